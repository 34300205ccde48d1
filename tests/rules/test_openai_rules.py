"""OpenAI's counting rules: tool choice, Responses-API tool rendering, tool results, additional tools."""

import json

from pydantic import BaseModel

import cw_middleware as cw
from cw_middleware._capture.apis.responses import RESPONSES, item_as_message
from cw_middleware._capture.wrapper import _local_estimate, get_runtime
from cw_middleware._counting.count_bodies import to_openai_responses
from cw_middleware._counting.rules import rules_for
from cw_middleware._counting.rules.openai import render_tool

WEATHER = {
    "name": "get_weather",
    "description": "  Weather for a city.\n    ",
    "parameters": {
        "title": "get_weather_args",
        "description": "Typed arguments.",
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
CHAT_TOOL = {"type": "function", "function": WEATHER}
FLAT_TOOL = {"type": "function", **WEATHER}
ASK = [{"role": "user", "content": "Weather in Paris?"}]


def test_a_forced_function_costs_its_name_in_tools():
    def tools(choice, name="get_weather"):
        tool = {"type": "function", "function": {**WEATHER, "name": name}}
        return cw.estimate(model="openai/gpt-4o", messages=ASK, tools=[tool], tool_choice=choice).tokens("tools")

    forced = {"type": "function", "function": {"name": "get_weather"}}
    assert tools(forced) > tools("auto") == tools(None) == tools("required")
    long_name = "get_the_weather_for_a_city_today"
    longer = tools({"type": "function", "function": {"name": long_name}}, long_name) - tools("auto", long_name)
    assert longer > tools(forced) - tools("auto")
    # the Responses API's spelling of the same choice costs the same
    flat = cw.estimate(
        model="openai/gpt-4o", input=ASK, tools=[FLAT_TOOL], tool_choice={"type": "function", "name": "get_weather"}
    )
    auto = cw.estimate(model="openai/gpt-4o", input=ASK, tools=[FLAT_TOOL], tool_choice="auto")
    assert flat.tokens("tools") - auto.tokens("tools") == tools(forced) - tools("auto")


def test_responses_shows_the_schema_title_and_description_and_trims_the_function_description():
    chat = render_tool(CHAT_TOOL)
    responses = render_tool(FLAT_TOOL, responses=True)
    assert "get_weather_args" not in chat and "Typed arguments." not in chat
    assert responses.startswith("// Weather for a city.\n// get_weather_args\n//\n// Typed arguments.\ntype get_weather = (_: {")
    # chat drops the indentation and the blank last line, but not a line's trailing space
    assert chat.startswith("// Weather for a city.\ntype get_weather")
    spaced = {"type": "function", "function": {**WEATHER, "description": "Weather for a city. "}}
    assert render_tool(spaced).startswith("// Weather for a city. \ntype")
    assert render_tool({"type": "function", **spaced["function"]}, responses=True).startswith("// Weather for a city.\n")


def test_responses_opens_no_message_for_the_tool_block():
    chat = cw.estimate(model="openai/gpt-4o", messages=ASK, tools=[CHAT_TOOL])
    responses = cw.estimate(model="openai/gpt-4o", input=ASK, tools=[FLAT_TOOL])
    # what the two renderers bill for the definition itself differs: set it aside
    shown = rules_for("openai/gpt-4o", api="responses").tool_definition(FLAT_TOOL) - rules_for("openai/gpt-4o").tool_definition(
        CHAT_TOOL
    )
    assert shown > 0
    # the chat block opens a system message and carries a "# Tools" header; the Responses block neither
    assert chat.tokens("tools") - (responses.tokens("tools") - shown) >= 6
    assert chat.tokens("conversation") == responses.tokens("conversation")


def test_a_tool_results_name_is_not_billed_but_a_users_is():
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    history = [*ASK, {"role": "assistant", "content": None, "tool_calls": [call]}]
    result = {"role": "tool", "tool_call_id": "c1", "content": "sunny"}

    def total(messages):
        return cw.estimate(model="openai/gpt-4o", messages=messages, tools=[CHAT_TOOL]).input_tokens

    assert total([*history, {**result, "name": "get_weather"}]) == total([*history, result])
    assert total([{**ASK[0], "name": "alice_smith"}]) > total(ASK)


def test_results_of_one_parallel_call_cost_less_each():
    def call(i):
        return {"id": f"c{i}", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}

    rules = rules_for("openai/gpt-4o")
    entry = rules.text(',{"recipient_name":"functions.get_weather","parameters":{"city":"Paris"}}')
    # one more call adds its entry to the multi_tool_use.parallel JSON, less what its result saves
    assert rules.tool_calls([call(1), call(2), call(3)]) - rules.tool_calls([call(1), call(2)]) < entry


def test_results_of_a_parallel_call_are_shown_as_json_strings():
    """Chat Completions: a parallel call's results bill their JSON escapes (line ends, quotes, non-ASCII); lone ones do not."""
    page = 'Title: "Agents in 2025"\nText: caf\u00e9 menus\n\nScore: None'
    plain = "Title: Agents in 2025 Text: cafe menus Score: None"  # nothing a JSON string escapes
    as_object = '{"title": "Agents in 2025", "score": null}'

    def call(i):
        return {"id": f"c{i}", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}

    def total(content, calls=2, model="openai/gpt-4o"):
        made = [call(i) for i in range(calls)]
        results = [{"role": "tool", "tool_call_id": c["id"], "content": content} for c in made]
        messages = [*ASK, {"role": "assistant", "content": None, "tool_calls": made}, *results]
        return cw.estimate(model=model, messages=messages, tools=[CHAT_TOOL]).input_tokens

    text = rules_for("openai/gpt-4o").text
    escaped = json.dumps(page)[1:-1]  # the body of the JSON string: \" for a quote, \n for a line end, \u00e9 for é
    assert text(escaped) > text(page)
    assert total(page) - total(plain) == 2 * (text(escaped) - text(plain))
    assert total(page, calls=1) - total(plain, calls=1) == text(page) - text(plain)
    # a result that is a JSON object is embedded as it is, quotes and all
    assert total(as_object) - total(plain) == 2 * (text(as_object) - text(plain))
    # harmony-layout models show the results as they are (no evidence of escaping there)
    gpt5 = rules_for("openai/gpt-5").text
    assert total(page, model="openai/gpt-5") - total(plain, model="openai/gpt-5") == 2 * (gpt5(page) - gpt5(plain))


def test_additional_tools_item_counts_as_tools_and_reaches_the_provider_unchanged():
    extra = {"type": "additional_tools", "role": "developer", "tools": [FLAT_TOOL]}
    items = [*ASK, extra]
    for model in ("openai/gpt-4o", "openai/gpt-5"):
        with_extra = cw.estimate(model=model, input=items)
        without = cw.estimate(model=model, input=ASK)
        assert with_extra.tokens("tools") > 0 == without.tokens("tools")
        assert ("tools", "additional_tools") in {(d.category.value, d.source) for d in with_extra.details}
        assert with_extra.tokens("conversation") == without.tokens("conversation")
    # a reasoning model reads the channel rules for function calls with the tools: a larger cost
    assert cw.estimate(model="openai/gpt-5", input=items).tokens("tools") > cw.estimate(
        model="openai/gpt-4o", input=items
    ).tokens("tools")
    kwargs = {"model": "openai/gpt-4o", "input": items}
    parsed, estimate = _local_estimate(get_runtime(), RESPONSES, (), kwargs)
    forward = RESPONSES.forward((), dict(kwargs), parsed, estimate.tagged_messages, "openai")
    assert forward.kwargs["input"] is items


def test_only_gpt_5_and_later_read_harmonys_function_call_preamble():
    tools = [CHAT_TOOL]
    gpt5, o3 = rules_for("openai/gpt-5-mini"), rules_for("openai/o3-mini")
    assert o3.layout == gpt5.layout == "harmony"
    assert gpt5.tools_overhead(tools, None) - o3.tools_overhead(tools, None) > 50
    assert gpt5.name != o3.name  # the estimator caches tool counts by rules name


def test_a_function_without_description_bills_less_than_its_rendering():
    # harmony-layout models and the Responses API: the function's description decides
    for rules in (rules_for("openai/gpt-5-mini"), rules_for("openai/gpt-4o", api="responses")):
        bare = {"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "description"}}
        assert rules.tool_definition(bare) < rules.text(rules._render(bare))
        assert rules.tool_definition(CHAT_TOOL) == rules.text(rules._render(CHAT_TOOL))
        no_params = {"type": "function", "function": {"name": "ping"}}
        assert rules.tool_definition(no_params) == rules.text(rules._render(no_params))


def _with_city(spec):
    return {"type": "function", "function": {**WEATHER, "parameters": {**WEATHER["parameters"], "properties": {"city": spec}}}}


def test_chat_functions_opening_on_a_bare_property_bill_less_than_their_rendering():
    rules = rules_for("openai/gpt-4o")
    described, undescribed = _with_city({"type": "string"}), {"type": "function", "function": {"name": "f", "parameters": {}}}
    # described or not, a function whose first property has no comment line bills one token less
    assert rules.tool_definition(described) == rules.text(render_tool(described)) - 1
    for commented in (
        _with_city({"type": "string", "description": "The city."}),
        _with_city({"type": "string", "title": "City"}),
    ):
        assert rules.tool_definition(commented) == rules.text(render_tool(commented))
    # a $ref'd first property shows its target's title: not bare
    ref = {
        "$defs": {"City": {"title": "City", "type": "string"}},
        "type": "object",
        "properties": {"city": {"$ref": "#/$defs/City"}},
    }
    by_ref = {"type": "function", "function": {"name": "f", "description": "F.", "parameters": ref}}
    assert rules.tool_definition(by_ref) == rules.text(render_tool(by_ref))
    assert rules.tool_definition(undescribed) == rules.text(render_tool(undescribed))


def test_a_multi_line_description_is_one_comment_line_per_line_without_indentation():
    docstring = "Convert Celsius to Fahrenheit.\n\n    Args:\n        celsius: Temperature in Celsius\n    "
    tool = {"type": "function", "function": {"name": "convert", "description": docstring}}
    assert render_tool(tool) == (
        "// Convert Celsius to Fahrenheit.\n// Args:\n// celsius: Temperature in Celsius\ntype convert = () => any;\n\n"
    )
    one_marker = "// " + docstring + "\ntype convert = () => any;\n\n"
    rules = rules_for("openai/gpt-4o")
    assert rules.tool_definition(tool) < rules.text(one_marker)


def test_responses_does_not_indent_nested_objects():
    nested = {
        "type": "function",
        "name": "plan",
        "parameters": {
            "type": "object",
            "properties": {"step": {"type": "object", "properties": {"text": {"type": "string", "description": "What."}}}},
        },
    }
    assert "\n  // What.\n  text?: string," in render_tool(nested)
    assert "\n// What.\ntext?: string," in render_tool(nested, responses=True)


def test_gpt_5_calls_cost_a_commentary_channel_header_the_o_series_do_not():
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
    gpt5, o3, gpt4o = rules_for("openai/gpt-5-mini"), rules_for("openai/o3-mini"), rules_for("openai/gpt-4o")
    assert gpt5.tool_calls([call]) > o3.tool_calls([call]) == gpt4o.tool_calls([call])


def test_responses_lays_the_block_out_as_chat_when_a_schema_comes_without_instructions():
    class Answer(BaseModel):
        city: str

    schema = {"type": "json_schema", "name": "answer", "schema": Answer.model_json_schema()}

    def tools(**kwargs):
        return cw.estimate(model="openai/gpt-4o", input=ASK, tools=[FLAT_TOOL], **kwargs).tokens("tools")

    assert tools(text={"format": schema}) > tools()
    assert tools(text_format=Answer) == tools(text={"format": schema})
    assert tools(text={"format": schema}, instructions="Be brief.") == tools(instructions="Be brief.")


def test_a_responses_function_call_item_costs_more_than_a_chat_call_on_chat_layout_models():
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
    chat = [*ASK, {"role": "assistant", "content": None, "tool_calls": [call]}]
    items = [*ASK, {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Paris"}'}]

    def conversation(model):
        return (
            cw.estimate(model=model, messages=chat).tokens("conversation"),
            cw.estimate(model=model, input=items).tokens("conversation"),
        )

    as_chat, as_items = conversation("openai/gpt-4o")
    assert as_items > as_chat
    as_chat, as_items = conversation("openai/gpt-5")
    assert as_items == as_chat


def test_a_lone_calls_result_header_names_its_function_on_chat_completions():
    def conversation(name, model="openai/gpt-4o", parallel=False):
        calls = [{"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": "{}"}} for i in (1, 2)]
        calls = calls if parallel else calls[:1]
        results = [{"role": "tool", "tool_call_id": c["id"], "content": "sunny"} for c in calls]
        messages = [*ASK, {"role": "assistant", "content": None, "tool_calls": calls}, *results]
        tool = {"type": "function", "function": {"name": name, "parameters": {}}}
        return cw.estimate(model=model, messages=messages, tools=[tool]).tokens("conversation")

    long, short = "durability_get_weather_in_city", "get_weather"
    # by hand (o200k): the call's recipient " to=functions.{name}" is 10 tokens for the long name
    # (" to", "=", "functions", ".d", "ur", "ability", "_get", "_weather", "_in", "_city"), 5 for the short one;
    # the result's header "{name} to=assistant" is 9 ("dur", "ability", ..., " to", "=", "assistant") against 5
    assert conversation(long) - conversation(short) == (10 - 5) + (9 - 5)
    # harmony-layout models and parallel calls: only the recipient's tokens differ (" to=functions.{name}" in the
    # call, the function's name in the parallel call's JSON)
    assert conversation(long, "openai/gpt-5") - conversation(short, "openai/gpt-5") == 10 - 5
    rules = rules_for("openai/gpt-4o")
    in_json = rules.text(f'"functions.{long}"') - rules.text(f'"functions.{short}"')
    assert conversation(long, parallel=True) - conversation(short, parallel=True) == 2 * in_json


def test_web_search_chat_models_bill_the_messages_text_alone():
    messages = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "What day is today?"}]
    # by hand (o200k): "You", " are", " a", " helpful", " assistant", "." and "What", " day", " is", " today", "?"
    assert cw.estimate(model="openai/gpt-4o-search-preview", messages=messages).input_tokens == 6 + 5
    # the same messages to gpt-4o: each framed (3 specials and the role) and the reply primed (3)
    assert cw.estimate(model="openai/gpt-4o", messages=messages).input_tokens == 6 + 5 + 2 * (3 + 1) + 3
    assert rules_for("openai/gpt-4o-search-preview").name != rules_for("openai/gpt-4o").name


def test_a_calls_arguments_are_shown_as_compact_json_on_responses_and_for_a_lone_chat_call():
    spaced, compact = '{"city": "Paris", "days": 3}', '{"city":"Paris","days":3}'

    def items(arguments):
        call = {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": arguments}
        return [*ASK, call, {"type": "function_call_output", "call_id": "c1", "output": "sunny"}]

    def chat(arguments):
        call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
        return [
            *ASK,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ]

    rules = rules_for("openai/gpt-4o")
    # by hand (o200k): '{"', 'city', '":', ' "', 'Paris', '",', ' "', 'days', '":', ' ', '3', '}' (12) against
    # '{"', 'city', '":"', 'Paris', '","', 'days', '":', '3', '}' (9)
    assert rules.text(spaced) - rules.text(compact) == 12 - 9
    for model in ("openai/gpt-4o", "openai/gpt-5"):
        assert (
            cw.estimate(model=model, input=items(spaced)).input_tokens
            == cw.estimate(model=model, input=items(compact)).input_tokens
        )
    # Chat Completions: a lone call's too on chat-layout models; harmony-layout ones bill the arguments as sent
    spaced_4o = cw.estimate(model="openai/gpt-4o", messages=chat(spaced)).input_tokens
    assert spaced_4o == cw.estimate(model="openai/gpt-4o", messages=chat(compact)).input_tokens
    spaced_o3 = cw.estimate(model="openai/o3-mini", messages=chat(spaced)).input_tokens
    assert spaced_o3 - cw.estimate(model="openai/o3-mini", messages=chat(compact)).input_tokens == 12 - 9
    # and so does a parallel call's JSON
    two = [{"id": f"c{i}", "type": "function", "function": {"name": "get_weather", "arguments": spaced}} for i in (1, 2)]
    compact_two = [{**c, "function": {**c["function"], "arguments": compact}} for c in two]
    assert rules.tool_calls(two) - rules.tool_calls(compact_two) == 2 * (12 - 9)


def test_responses_follows_the_schema_title_with_an_empty_comment_line():
    rules = rules_for("openai/gpt-4o", api="responses")
    titled = {**FLAT_TOOL, "parameters": {k: v for k, v in WEATHER["parameters"].items() if k != "description"}}
    by_hand = "// Weather for a city.\n// get_weather_args\n//\ntype get_weather = (_: {\ncity: string,\n}) => any;\n\n"
    assert render_tool(titled, responses=True) == by_hand
    # by hand (o200k): ..., " get", "_weather", "_args", "\n", "//\n", "type", ... is 26 tokens, one more than the
    # title line alone (..., "_args", "\n", "type", ...: 25); the function bills its rendering, so the line too
    assert rules.text(by_hand) == 26
    assert rules.text(by_hand.replace("_args\n//\n", "_args\n")) == 25
    assert rules.tool_definition(titled) == 26
    # a property's title keeps its single line
    titled_city = {
        **FLAT_TOOL,
        "parameters": {**WEATHER["parameters"], "properties": {"city": {"type": "string", "title": "City"}}},
    }
    assert "\n// City\ncity: string," in render_tool(titled_city, responses=True)


def test_a_namespaced_responses_call_names_its_namespace_in_the_call_and_in_its_result():
    def items(**namespace):
        call = {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}", **namespace}
        return [*ASK, call, {"type": "function_call_output", "call_id": "c1", "output": "sunny"}]

    # by hand (o200k): the call's recipient " to=functions.weather.get_weather" is 6 tokens (" to", "=", "functions",
    # ".weather", ".get", "_weather") against 5 without the namespace; the result's header names the same address,
    # "functions.weather.get_weather" (4: "functions", ".weather", ".get", "_weather") against 3
    for model in ("openai/gpt-5.4", "openai/gpt-4o"):
        plain = cw.estimate(model=model, input=items()).tokens("conversation")
        namespaced = cw.estimate(model=model, input=items(namespace="weather")).tokens("conversation")
        assert namespaced - plain == (6 - 5) + (4 - 3)
    # the item reaches the provider as it was written
    kwargs = {"model": "openai/gpt-5.4", "input": items(namespace="weather")}
    parsed, estimate = _local_estimate(get_runtime(), RESPONSES, (), kwargs)
    forward = RESPONSES.forward((), dict(kwargs), parsed, estimate.tagged_messages, "openai")
    assert forward.kwargs["input"][1]["namespace"] == "weather"
    # and the body sent to the provider's input-token count keeps it too
    messages = [m for m in (item_as_message(i) for i in items(namespace="weather")) if m is not None]
    body = to_openai_responses("gpt-5.4", messages, [], None)
    assert [i.get("namespace") for i in body["input"] if i.get("type") == "function_call"] == ["weather"]


def test_a_schema_section_without_a_system_message_before_it_opens_one_on_chat_completions():
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
    system = [{"role": "system", "content": "Be brief."}]

    def added(model, messages, response_format=fmt):
        with_format = cw.estimate(model=model, messages=messages, response_format=response_format).input_tokens
        return with_format - cw.estimate(model=model, messages=messages).input_tokens

    # by hand (o200k): "# Response Formats\n\n## answer\n\n" is 7 tokens ("#", " Response", " Formats", "\n\n", "##",
    # " answer", "\n\n"), the compact schema 14 ('{"', 'type', '":"', 'object', '","', 'properties', '":{"', 'ok',
    # '":{"', 'type', '":"', 'boolean', '"}}', '}'); the section's own message 4; with no system message first, a
    # system message opened for it, 3 more
    assert added("openai/gpt-4o", [*system, *ASK]) == 4 + 7 + 14
    assert added("openai/gpt-4o", ASK) == 4 + 7 + 14 + 3
    # json_object bills nothing; the Responses API and harmony-layout models do not open one
    assert added("openai/gpt-4o", ASK, {"type": "json_object"}) == 0
    rules = rules_for("openai/gpt-4o", api="responses")
    assert rules.response_format_placement(False, fmt) == 0
    assert rules_for("openai/gpt-5").response_format_placement(False, fmt) == 0
    assert rules_for("openai/gpt-4o").response_format_placement(True, fmt) == 0
