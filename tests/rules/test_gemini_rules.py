"""Gemini's counting rules checked against counts derived by hand from the rule and an o200k count."""

import base64
import json

from cw_middleware._counting.rules import rules_for
from cw_middleware._counting.rules._tiktoken import counter


def _call(arguments: str, signature: str = "") -> dict:
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    if signature:
        call["provider_specific_fields"] = {"thought_signature": signature}
    return call


def test_a_replayed_call_bills_its_rendering_on_the_gemini_api_from_2_5_on():
    # Text values: "get_weather" (2 o200k tokens: "get", "_weather"), "city" (1), "Paris" (1) = 4.
    call = _call('{"city": "Paris"}')
    assert rules_for("gemini/gemini-2.5-flash").tool_calls([call]) == 4 + 18
    assert rules_for("gemini/gemini-2.5-pro").tool_calls([call]) == 4 + 18
    assert rules_for("gemini/gemini-3-flash-preview").tool_calls([call]) == 4 + 18  # no signature: the rendering
    # 2.0 and Vertex AI count the text values only (Google's SDK accumulator).
    assert rules_for("gemini/gemini-2.0-flash").tool_calls([call]) == 4
    assert rules_for("vertex_ai/gemini-2.5-flash").tool_calls([call]) == 4
    assert rules_for("vertex_ai/gemini-3-flash-preview").tool_calls([call]) == 4


def test_a_gemini_3_signature_stands_in_for_the_rendering_up_to_its_size():
    call = '{"city": "Paris"}'
    # The documented placeholder that skips signature validation: 44 base64 characters, 8 tokens
    # at 5 characters a token, under the 18-token rendering, which is billed instead.
    placeholder = base64.b64encode(b"skip_thought_signature_validator").decode()
    assert len(placeholder) == 44
    gemini_3 = rules_for("gemini/gemini-3-flash-preview")
    assert gemini_3.tool_calls([_call(call, placeholder)]) == 4 + 18
    # A real signature of 2,400 characters: 480 tokens, which include the rendering.
    assert gemini_3.tool_calls([_call(call, "Q2lJQk" * 400)]) == 4 + 480
    # 2.5 does not bill the signature: the rendering alone, signed or not.
    assert rules_for("gemini/gemini-2.5-flash").tool_calls([_call(call, "Q2lJQk" * 400)]) == 4 + 18


def test_gemini_2_5_bills_a_declaration_as_its_compact_json_plus_a_wrapper():
    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
    # By hand (o200k), the compact JSON {"name":"get_weather","description":"Weather for a city.","parameters":
    # {"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}} is 33 tokens: '{"', 'name',
    # '":"', 'get', '_weather', '","', 'description', '":"', 'Weather', ' for', ' a', ' city', '.","', 'parameters',
    # '":{"', 'type', '":"', 'object', '","', 'properties', '":{"', 'city', '":{"', 'type', '":"', 'string', '"}}',
    # ',"', 'required', '":["', 'city', '"]', '}}'. 2.5 bills it plus 4, and 2 once for the request's declarations.
    for model in ("gemini/gemini-2.5-flash", "gemini/gemini-2.5-pro"):
        rules = rules_for(model)
        assert rules.tool_definition(weather) == 33 + 4
        assert rules.tools_overhead([weather], None) == 2
        assert rules.tools_overhead([], None) == 0
    # Gemini 3 keeps the JSON with spaces (45 tokens: '{"', 'name', '":', ' "', 'get', ... one more per separator),
    # no wrapper; Vertex AI bills the text values.
    gemini_3 = rules_for("gemini/gemini-3-flash-preview")
    assert gemini_3.tool_definition(weather) == 45
    assert gemini_3.tools_overhead([weather], None) == 0
    assert rules_for("vertex_ai/gemini-2.5-flash").tools_overhead([weather], None) == 0
    assert len({rules_for(m).name for m in ("gemini/gemini-2.5-flash", "gemini/gemini-3-flash-preview")}) == 2


def _tree_declaration() -> dict:
    node = {
        "description": "A node.",
        "properties": {"children": {"items": {"$ref": "#/$defs/Node"}, "type": "array"}, "label": {"type": "string"}},
        "required": ["label"],
        "type": "object",
    }
    params = {"$defs": {"Node": node}, "properties": {"tree": {"$ref": "#/$defs/Node"}}, "required": ["tree"], "type": "object"}
    return {"type": "function", "function": {"name": "record", "parameters": params}}


def test_gemini_2_5_unrolls_a_schema_that_refers_to_itself_ten_times():
    # Written out by hand: the node inlined 10 times down `children`, the 11th reference left as it is.
    inner: dict = {"$ref": "#/$defs/Node"}
    for _ in range(10):
        inner = {
            "description": "A node.",
            "properties": {"children": {"items": inner, "type": "array"}, "label": {"type": "string"}},
            "required": ["label"],
            "type": "object",
        }
    unrolled = {
        "name": "record",
        "parameters": {"properties": {"tree": inner}, "required": ["tree"], "type": "object"},
    }
    o200k = counter("o200k_base")
    expected = o200k(json.dumps(unrolled, separators=(",", ":"))) + 4
    assert rules_for("gemini/gemini-2.5-flash").tool_definition(_tree_declaration()) == expected


def test_a_schema_that_refers_to_itself_twice_is_counted_within_a_bound():
    declaration = _tree_declaration()
    node = declaration["function"]["parameters"]["$defs"]["Node"]
    node["properties"]["sibling"] = {"$ref": "#/$defs/Node"}  # two self-references: 2**10 copies unbounded
    for model in ("gemini/gemini-2.5-flash", "gemini/gemini-3-flash-preview", "vertex_ai/gemini-2.5-flash"):
        tokens = rules_for(model).tool_definition(declaration)
        # Past 2,000 inlined references the rest stay bare: some tens of thousands of tokens, not millions.
        assert 2_000 < tokens < 200_000, (model, tokens)


def test_a_chain_of_references_deeper_than_the_unroll_count_is_inlined_whole():
    # Twelve distinct definitions, each referring to the next: nothing refers to itself, so all are inlined.
    defs = {f"D{i}": {"properties": {f"k{i}": {"$ref": f"#/$defs/D{i + 1}"}}, "type": "object"} for i in range(12)}
    defs["D12"] = {"properties": {"leaf": {"type": "string"}}, "type": "object"}
    params = {"$defs": defs, "properties": {"root": {"$ref": "#/$defs/D0"}}, "type": "object"}
    declaration = {"type": "function", "function": {"name": "chain", "parameters": params}}
    inner: dict = {"properties": {"leaf": {"type": "string"}}, "type": "object"}
    for i in reversed(range(12)):
        inner = {"properties": {f"k{i}": inner}, "type": "object"}
    form = {"name": "chain", "parameters": {"properties": {"root": inner}, "type": "object"}}
    o200k = counter("o200k_base")
    assert rules_for("gemini/gemini-2.5-flash").tool_definition(declaration) == o200k(json.dumps(form, separators=(",", ":"))) + 4
