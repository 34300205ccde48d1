"""Unit checks of the counting rules (no data set needed)."""

import math

import cw_middleware as cw
from cw_middleware._counting.rules import rules_for, split_provider
from cw_middleware._counting.rules._tiktoken import counter
from cw_middleware._counting.rules.openai import render_tool


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
    text = render_tool(
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather",
                "parameters": {
                    "type": "object",
                    "required": ["city"],
                    "properties": {
                        "city": {"type": "string", "description": "City"},
                        "unit": {"type": "string", "enum": ["c", "f"]},
                    },
                },
            },
        }
    )
    assert text == '// Weather\ntype get_weather = (_: {\n// City\ncity: string,\nunit?: "c" | "f",\n}) => any;\n\n'


def test_unknown_model_names_fall_back_by_family():
    assert split_provider("claude-opus-9")[0] == "anthropic"
    assert rules_for("openai/gpt-9-turbo").exact
    assert not rules_for("anthropic/claude-opus-9").exact
    assert rules_for("anthropic/claude-opus-9").tools_overhead([{"function": {"name": "x"}}], None) > 300


def test_rules_that_count_tools_differently_have_distinct_names():
    # The name keys the estimator's tool-count cache as well as its text cache.
    assert rules_for("openai/gpt-4o").name != rules_for("openai/gpt-5").name
    assert rules_for("anthropic/claude-3-5-haiku-latest").name != rules_for("anthropic/claude-sonnet-4-5").name
    assert rules_for("gemini/gemini-2.0-flash").name != rules_for("gemini/gemini-2.5-flash").name


def test_anthropic_system_prompt_has_no_turn_header():
    rules = rules_for("anthropic/claude-sonnet-4-5")
    assert rules.message_framing({"role": "system", "content": "x"}) == 0
    assert rules.message_framing({"role": "user", "content": "x"}) > 0


def test_gemini_2_0_declarations_count_text_values_only():
    rules = rules_for("gemini/gemini-2.0-flash")
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather",
            "parameters": {
                "type": "object",
                "required": ["city"],
                "properties": {"city": {"type": "string", "description": "City"}},
            },
        },
    }
    count = counter("o200k_base")
    pieces = ["get_weather", "Weather", "City", "city", "city"]
    values = 6  # o200k: "get_weather" 2 tokens, the four words 1 each (no digits, no newlines)
    assert sum(count(p) for p in pieces) == values
    # Vertex AI bills the text values alone; the Gemini API (2.0) two tokens more per declaration.
    assert rules_for("vertex_ai/gemini-2.0-flash").tool_definition(tool) == values
    assert rules.tool_definition(tool) == values + 2
    # 2.5+ render the declaration as JSON: more than the text values
    assert rules_for("gemini/gemini-2.5-flash").tool_definition(tool) > rules.tool_definition(tool)


def test_gemini_calls_count_keys_and_string_values():
    rules = rules_for("gemini/gemini-2.0-flash")
    call = {"function": {"name": "f", "arguments": '{"city": "Paris", "n": 3}'}}
    count = counter("o200k_base")
    assert rules.tool_calls([call]) == sum(max(1, round(count(p) * 1.04)) for p in ("f", "city", "Paris", "n"))


def test_openai_structured_output_hides_numeric_bounds():
    rules = rules_for("openai/gpt-4o")
    schema = {"type": "object", "properties": {"x": {"type": "number"}}}
    bounded = {"type": "object", "properties": {"x": {"type": "number", "minimum": 0, "maximum": 1}}}
    fmt = lambda s: {"type": "json_schema", "json_schema": {"name": "r", "schema": s}}  # noqa: E731
    assert rules.response_format(fmt(bounded)) == rules.response_format(fmt(schema))


def test_a_replayed_thought_signature_is_billed_on_the_gemini_api_not_on_vertex():
    signature = "Q2lJQk" * 400  # 2,400 base64 characters
    messages = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    "provider_specific_fields": {"thought_signature": signature},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    gemini_api = cw.estimate(model="gemini/gemini-3-flash-preview", messages=messages).input_tokens
    vertex = cw.estimate(model="vertex_ai/gemini-3-flash-preview", messages=messages).input_tokens
    also_vertex = cw.estimate(model="gemini-3-flash-preview", messages=messages, custom_llm_provider="vertex_ai").input_tokens
    # ~0.2 token a base64 character on the Gemini API; nothing on Vertex AI.
    assert 400 <= gemini_api - vertex <= 560
    assert also_vertex == vertex
    unsigned_call = {**messages[1]["tool_calls"][0], "provider_specific_fields": {}}
    unsigned = [messages[0], {**messages[1], "tool_calls": [unsigned_call]}, messages[2]]
    for route in ("gemini", "vertex_ai"):  # Gemini 2.5 bills (next to) nothing for it, on either endpoint
        with_signature = cw.estimate(model=f"{route}/gemini-2.5-flash", messages=messages).input_tokens
        assert with_signature == cw.estimate(model=f"{route}/gemini-2.5-flash", messages=unsigned).input_tokens


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}


def test_anthropic_tool_prompt_follows_tool_choice_as_documented():
    # Anthropic's pricing table: 4.5 models 496 (auto/none) vs 588 (any/tool); Claude 4 313 vs 315.
    sonnet45, sonnet4 = rules_for("anthropic/claude-sonnet-4-5"), rules_for("anthropic/claude-sonnet-4-20250514")
    for rules, auto, forced in ((sonnet45, 496, 588), (sonnet4, 313, 315)):
        assert rules.tools_overhead([WEATHER], None) == auto
        assert rules.tools_overhead([WEATHER], "auto") == auto
        assert rules.tools_overhead([WEATHER], "none") == auto
        assert rules.tools_overhead([WEATHER], "required") == forced
        assert rules.tools_overhead([WEATHER], {"type": "function", "function": {"name": "get_weather"}}) == forced
    assert rules_for("anthropic/claude-opus-4-7").tools_overhead([WEATHER], "required") == 804
    assert rules_for("bedrock/us.anthropic.claude-3-5-haiku-20241022-v1:0").tools_overhead([WEATHER], "auto") == 264


def test_anthropic_forced_tool_is_counted_apart_from_auto():
    kwargs = {"model": "anthropic/claude-sonnet-4-5", "messages": [{"role": "user", "content": "weather?"}], "tools": [WEATHER]}
    auto = cw.estimate(**kwargs, tool_choice="auto")
    forced = cw.estimate(**kwargs, tool_choice="required")  # the tool count is cached per tool_choice
    tools = {b.category.value: b.tokens for b in forced.breakdown}["tools"]
    assert forced.input_tokens - auto.input_tokens == 588 - 496
    assert tools - {b.category.value: b.tokens for b in auto.breakdown}["tools"] == 588 - 496


def test_anthropic_tool_is_listed_as_a_function_line_of_sorted_json():
    # Claude's tool-use prompt lists each tool as one <function>{JSON}</function> line: description,
    # name and parameters, keys sorted; tool JSON is scaled by its own ratio (1.09), not prose's (1.18).
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}},
            "description": "Weather in a city",
            "strict": True,
        },
    }
    listed = (
        '<function>{"description": "Weather in a city", "name": "get_weather", "parameters": '
        '{"properties": {"city": {"type": "string"}}, "required": ["city"], "type": "object"}}</function>\n'
    )
    count = counter("o200k_base")
    assert rules_for("anthropic/claude-sonnet-4-5").tool_definition(tool) == math.ceil(count(listed) * 1.09)
    # A tool with no description lists none; the new tokenizer generation scales tool JSON too.
    bare = {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}
    bare_listed = '<function>{"name": "ping", "parameters": {"properties": {}, "type": "object"}}</function>\n'
    assert rules_for("anthropic/claude-haiku-4-5").tool_definition(bare) == math.ceil(count(bare_listed) * 1.09)
    assert rules_for("anthropic/claude-opus-4-8").tool_definition(bare) == math.ceil(count(bare_listed) * round(1.09 * 1.35, 3))


def test_anthropic_extended_thinking_overhead_is_other():
    kwargs = {"model": "anthropic/claude-sonnet-4-5", "messages": [{"role": "user", "content": "think about it"}]}
    plain = cw.estimate(**kwargs)
    thinking = cw.estimate(**kwargs, thinking={"type": "enabled", "budget_tokens": 1024})
    extra = thinking.input_tokens - plain.input_tokens
    assert 20 <= extra <= 40  # measured 28-29 on reported usage
    assert {(d.category.value, d.source): d.tokens for d in thinking.details}[("other", "thinking")] == extra
    assert cw.estimate(**kwargs, thinking={"type": "disabled"}).input_tokens == plain.input_tokens
    assert cw.estimate(**kwargs, thinking={"type": "adaptive"}).input_tokens == plain.input_tokens
    # Other providers have no such instruction.
    gemini = {"model": "gemini/gemini-2.5-flash", "messages": kwargs["messages"]}
    assert cw.estimate(**gemini, thinking={"type": "enabled"}).input_tokens == cw.estimate(**gemini).input_tokens


def test_gemini_on_vertex_bills_declarations_as_text_values_and_no_content_markers():
    # The same request on both endpoints: Vertex AI reports fewer tokens (declaration text values,
    # no per-Content marker); 2.5+ on the Gemini API renders the declaration's JSON.
    tool = {"type": "function", "function": {"name": "get_file", "parameters": {"type": "object", "properties": {}}}}
    messages = [{"role": "user", "content": "Use the get_file tool now."}]
    api = cw.estimate(model="gemini/gemini-3-flash-preview", messages=messages, tools=[tool]).input_tokens
    vertex = cw.estimate(model="vertex_ai/gemini-3-flash-preview", messages=messages, tools=[tool]).input_tokens
    count = counter("o200k_base")
    assert api - vertex >= 10
    assert rules_for("vertex_ai/gemini-3-flash-preview").tool_definition(tool) == count("get_file")
    assert rules_for("vertex_ai/gemini-2.5-flash").message_framing(messages[0]) == 0
    assert rules_for("gemini/gemini-2.5-flash").message_framing(messages[0]) == 1
    # Different counting, different cache names (the estimator's caches are keyed by them).
    assert rules_for("vertex_ai/gemini-2.5-flash").name != rules_for("gemini/gemini-2.5-flash").name


def test_anthropic_new_tokenizer_generation_counts_more_for_the_same_text():
    # Opus 4.7 and later use a tokenizer Anthropic says costs up to 1.35x the tokens of the previous one.
    text = "The quick brown fox jumps over the lazy dog, then checks the weather in Lyon. " * 20
    older = rules_for("anthropic/claude-opus-4-6").text(text)
    newer = rules_for("anthropic/claude-opus-4-8").text(text)
    assert 1.25 <= newer / older <= 1.4
    assert rules_for("anthropic/claude-sonnet-5").text(text) == newer
    assert rules_for("anthropic/claude-opus-4-6").name != rules_for("anthropic/claude-opus-4-8").name


def test_gemini_counts_every_digit_as_a_piece():
    # Gemini's SentencePiece vocabulary splits digits; o200k takes them three at a time.
    count = counter("o200k_base")
    assert count("1234567890") == 4  # "123", "456", "789", "0"
    for model in ("gemini/gemini-2.0-flash", "gemini/gemini-2.5-flash", "vertex_ai/gemini-3-flash-preview"):
        rules = rules_for(model)
        assert rules.text("1234567890") == 10
        assert rules.text("Room 1234567890") == 12  # "Room", " " and ten digits
    snap = cw.estimate(model="gemini/gemini-2.0-flash", messages=[{"role": "user", "content": "Call 5550101 now"}])
    assert snap.input_tokens == count("Call ") + 7 + count(" now")


def test_gemini_splits_a_newline_o200k_glues_to_punctuation():
    # o200k tokenizes "Answer:\n\nyes.\n" as "Answer", ":\n\n", "yes", ".\n" (4 tokens); Gemini's
    # vocabulary keeps newline runs as pieces of their own: "Answer", ":", "\n\n", "yes", ".", "\n".
    count = counter("o200k_base")
    assert count("Answer:\n\nyes.\n") == 4
    # A newline after a word is its own token in both: "line", " one", "\n", "line", " two".
    assert count("line one\nline two") == 5
    for model in ("gemini/gemini-2.0-flash", "gemini/gemini-2.5-flash", "vertex_ai/gemini-3-flash-preview"):
        rules = rules_for(model)
        assert rules.text("Answer:\n\nyes.\n") == 6
        assert rules.text("line one\nline two") == 5
        # Pretty-printed JSON: "Reply", " in", " JSON", ":\n", "{\n", " ", ' "', "ok", '":', " true", "\n", "}"
        # is 12 o200k tokens; ":\n" and "{\n" each split in two.
        assert rules.text('Reply in JSON:\n{\n  "ok": true\n}') == 14
    snap = cw.estimate(model="gemini/gemini-2.0-flash", messages=[{"role": "user", "content": "Answer:\n\nyes.\n"}])
    assert snap.input_tokens == 6  # 2.0: no Content marker


GRAMMAR = '\n    start: expr\n    expr: INT ("+" INT)*\n    %import common.INT\n    '


def test_a_custom_tool_is_counted_as_a_free_form_function_with_its_grammar():
    o200k = counter("o200k_base")
    # OpenAI's free-form tool, as each API spells it: flat on the Responses API, under "custom" on Chat Completions.
    responses_tool = {
        "type": "custom",
        "name": "math_exp",
        "description": "Creates valid mathematical expressions",
        "format": {"type": "grammar", "syntax": "lark", "definition": GRAMMAR},
    }
    chat_tool = {
        "type": "custom",
        "custom": {
            "name": "math_exp",
            "description": "Creates valid mathematical expressions",
            "format": {"type": "grammar", "grammar": {"syntax": "lark", "definition": GRAMMAR}},
        },
    }
    # Written out by hand: the description line, the free-form signature, then the grammar (trimmed).
    shown = (
        "// Creates valid mathematical expressions\ntype math_exp = (FREEFORM) => any;\n\n"
        'math_exp FREEFORM grammar:\n\nstart: expr\n    expr: INT ("+" INT)*\n    %import common.INT\n\n'
    )
    assert render_tool(responses_tool, responses=True) == shown
    assert render_tool(chat_tool) == shown
    assert rules_for("openai/gpt-5", api="responses").tool_definition(responses_tool) == o200k(shown)
    assert rules_for("openai/gpt-4.1").tool_definition(chat_tool) == o200k(shown)
    # Without a grammar (free text): the signature alone.
    plain = {"type": "custom", "name": "run", "description": "Run a shell command.", "format": {"type": "text"}}
    assert render_tool(plain, responses=True) == "// Run a shell command.\ntype run = (FREEFORM) => any;\n\n"
