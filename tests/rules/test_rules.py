"""Unit checks of the counting rules (no data set needed)."""

from cw_middleware.rules import rules_for, split_provider
from cw_middleware.rules._tiktoken import counter
from cw_middleware.rules.openai import render_tool


def test_openai_plain_message_framing_is_role_plus_three():
    rules = rules_for("openai/gpt-4o")
    count = counter("o200k_base")
    assert rules.message_framing({"role": "user", "content": "hello"}) == 3 + count("user")
    assert rules.request_overhead(1) == 3


def test_reasoning_models_use_harmony_priming():
    assert rules_for("openai/gpt-5-mini").request_overhead(1) == 2


def test_tools_overhead_is_zero_without_tools():
    for model in ("openai/gpt-4o", "anthropic/claude-sonnet-4-5", "gemini/gemini-2.5-flash"):
        assert rules_for(model).tools_overhead([], None) == 0


def test_tool_rendering_is_typescript_like():
    text = render_tool({"type": "function", "function": {
        "name": "get_weather", "description": "Weather",
        "parameters": {"type": "object", "required": ["city"], "properties": {
            "city": {"type": "string", "description": "City"},
            "unit": {"type": "string", "enum": ["c", "f"]}}}}})
    assert text == '// Weather\ntype get_weather = (_: {\n// City\ncity: string,\nunit?: "c" | "f",\n}) => any;\n\n'


def test_unknown_model_names_fall_back_by_family():
    assert split_provider("claude-opus-9")[0] == "anthropic"
    assert rules_for("openai/gpt-9-turbo").exact
    assert not rules_for("anthropic/claude-opus-9").exact
    assert rules_for("anthropic/claude-opus-9").tools_overhead([{"function": {"name": "x"}}], None) > 300
