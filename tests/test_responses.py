"""The Responses API drop-in with real LiteLLM: same results, tags on input items, its own usage block."""

from __future__ import annotations

import json
import logging

import litellm
from litellm.responses.streaming_iterator import ResponsesAPIStreamingIterator, SyncResponsesAPIStreamingIterator
from providers import OPENAI_COUNT, RESPONSES, provider  # noqa: F401 - the fixture

import cw_middleware as cw
from cw_middleware._kernel.contract import CountMethod, WarningCode

GEN_AI_INPUT_TOKENS = "gen_ai.usage.input_tokens"

TOOL = {"type": "function", "name": "search", "description": "Search.", "parameters": {"type": "object", "properties": {}}}


def test_responses_returns_what_litellm_returns(runtime):
    ours = cw.responses(model="openai/gpt-4o", input="Say hi.", instructions="Be terse.", mock_response="hello")
    theirs = litellm.responses(model="openai/gpt-4o", input="Say hi.", instructions="Be terse.", mock_response="hello")
    assert type(ours) is type(theirs)
    assert ours.output[0].content[0].text == theirs.output[0].content[0].text == "hello"
    first, last = cw.snapshots()
    assert first.count_method is last.count_method is CountMethod.LOCAL_ESTIMATE
    assert WarningCode.MOCK_USAGE_NOT_RECONCILED.value in last.warning_codes()
    assert {(d.category.value, d.source) for d in first.details} >= {("system_prompt", "instructions"), ("conversation", "user")}


def test_estimate_takes_responses_arguments(runtime):
    items = [
        cw.message("user", [cw.segment("Notes about the repo.", "memory", "AGENTS.md"), "What next?"]),
        {"type": "function_call", "call_id": "c1", "name": "search", "arguments": '{"q": "x"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "found it"},
    ]
    tools = [cw.tool(TOOL, source=cw.ToolSource.mcp("github"))]
    snap = cw.estimate(model="openai/gpt-4o", input=items, tools=tools)
    by = {(d.category.value, d.source) for d in snap.details}
    # the function_call_output's tokens carry the tool that produced it, matched through its call_id
    assert {
        ("memory", "AGENTS.md"),
        ("mcp_tools", "mcp:github"),
        ("conversation", "tool:search"),
        ("conversation", "assistant"),
    } <= by
    # the same request written for Chat Completions counts its messages and tools alike
    chat = cw.estimate(
        model="openai/gpt-4o",
        messages=[
            items[0],
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "found it"},
        ],
        tools=[
            cw.tool(
                {"type": "function", "function": {k: v for k, v in TOOL.items() if k != "type"}},
                source=cw.ToolSource.mcp("github"),
            )
        ],
    )
    assert snap.tokens("memory") == chat.tokens("memory") and snap.tokens("mcp_tools") == chat.tokens("mcp_tools")
    # the per-tool row: its definition, its result (function_call_output / tool message), one call
    (row,) = snap.tools
    assert (row.name, row.category.value, row.source, row.invocations) == ("search", "mcp_tools", "mcp:github", 1)
    assert row.result_tokens == next(d.tokens for d in snap.details if d.source == "tool:search") > 0
    assert [(t.name, t.invocations, t.result_tokens > 0) for t in chat.tools] == [("search", 1, True)]


# ---------------------------------------------------------------- over HTTP: a local Responses API server


def _kwargs(provider, **extra):  # noqa: F811
    return {
        "model": "openai/gpt-4o",
        "input": "Say hello.",
        "instructions": "Be terse.",
        "api_base": f"{provider.url}/v1",
        "api_key": "sk-test",
        **extra,
    }


def _dump(obj) -> dict:
    dump = obj.model_dump(warnings=False)  # LiteLLM's own usage field trips pydantic's serializer warning
    response = dump.get("response") if isinstance(dump.get("response"), dict) else dump
    response.pop("created_at", None)  # the server's clock
    return dump


def _reconciled(snap, total: int) -> None:
    assert snap.count_method is CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN
    assert snap.input_tokens == sum(b.tokens for b in snap.breakdown) == total
    assert snap.tokens("system_prompt") > 0 and snap.tokens("conversation") > 0


def test_non_streamed_reconciles_to_the_usage_block(runtime, provider, telemetry):  # noqa: F811
    expected = litellm.responses(**_kwargs(provider))
    response = cw.responses(**_kwargs(provider))
    assert type(response) is type(expected) and _dump(response) == _dump(expected)
    _reconciled(cw.snapshots()[-1], provider[RESPONSES].tokens)
    (span,) = [s for s in telemetry.spans.get_finished_spans() if s.attributes.get(GEN_AI_INPUT_TOKENS) is not None]
    assert span.attributes["gen_ai.usage.input_tokens"] == provider[RESPONSES].tokens
    assert span.attributes["gen_ai.usage.cache_read.input_tokens"] == provider[RESPONSES].cached_tokens
    assert span.attributes["gen_ai.operation.name"] == "chat"


def test_stream_is_litellms_iterator_with_its_events_unchanged(runtime, provider):  # noqa: F811
    expected = [_dump(e) for e in litellm.responses(**_kwargs(provider, stream=True))]
    stream = cw.responses(**_kwargs(provider, stream=True))
    assert isinstance(stream, SyncResponsesAPIStreamingIterator)
    assert [_dump(e) for e in stream] == expected
    assert expected[-1]["type"] == "response.completed"
    assert [r.body.get("stream") for r in provider.hits(RESPONSES)] == [True, True]
    assert "stream_options" not in provider.hits(RESPONSES)[-1].body
    _reconciled(cw.snapshots()[-1], provider[RESPONSES].tokens)


async def test_async_stream_and_call(runtime, provider):  # noqa: F811
    plain = await litellm.aresponses(**_kwargs(provider, stream=True))
    expected = [_dump(e) async for e in plain]
    stream = await cw.aresponses(**_kwargs(provider, stream=True))
    assert isinstance(stream, ResponsesAPIStreamingIterator)
    assert [_dump(e) async for e in stream] == expected
    _reconciled(cw.snapshots()[-1], provider[RESPONSES].tokens)
    response = await cw.aresponses(**_kwargs(provider))
    assert response.usage.input_tokens == provider[RESPONSES].tokens
    _reconciled(cw.snapshots()[-1], provider[RESPONSES].tokens)


def test_tags_on_input_items_and_tools_never_reach_the_provider(runtime, provider):  # noqa: F811
    items = [
        cw.message("developer", [cw.segment("Always run the tests.", "memory", "AGENTS.md"), "Work carefully."]),
        {"role": "user", "content": [{"type": "input_text", "text": "Use the pdf skill."}]},
        {"type": "function_call", "call_id": "call_1", "name": "load_skill", "arguments": '{"name": "pdf"}'},
        cw.message("tool", "PDF skill: read pages with pdftotext.", category="skills", source="skill:pdf", tool_call_id="call_1"),
    ]
    tools = [cw.tool(TOOL, source=cw.ToolSource.mcp("github")), {"type": "web_search_preview"}]
    cw.responses(**_kwargs(provider, input=items, tools=tools, cw_context_window=50_000, cw_provider_count="never"))

    (request,) = provider.hits(RESPONSES)
    raw = json.dumps(request.body)
    assert "cw_tag" not in raw and "cw_context_window" not in raw and "cw_provider_count" not in raw
    assert request.body["input"][0]["content"] == [
        {"type": "input_text", "text": "Always run the tests."},
        {"type": "input_text", "text": "Work carefully."},
    ]
    assert request.body["input"][1] is not None and request.body["input"][1] == items[1]  # untagged: as given
    assert request.body["input"][3] == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": "PDF skill: read pages with pdftotext.",
    }
    assert request.body["tools"][0] == TOOL
    assert "cw_tag" in items[0]["content"][0] and "cw_tag" in tools[0]  # the caller's objects are left as they were
    snap = cw.snapshots()[-1]
    assert snap.context_window_tokens == 50_000
    assert {(d.category.value, d.source) for d in snap.details} >= {
        ("memory", "AGENTS.md"),
        ("skills", "skill:pdf"),
        ("mcp_tools", "mcp:github"),
        ("system_prompt", "instructions"),
    }
    assert WarningCode.PROVIDER_TOOL_NOT_ESTIMATED.value in snap.warning_codes()


def test_provider_count_sends_the_responses_body(runtime, provider, monkeypatch):  # noqa: F811
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE"):
        monkeypatch.delenv(name, raising=False)
    items = [cw.message("user", [cw.segment("Remember this.", "memory", "notes.md")])]
    cw.responses(
        **_kwargs(provider, input=items, tools=[TOOL], text={"format": {"type": "json_object"}}, cw_provider_count="always")
    )
    assert cw.flush(5)
    (count,) = provider.hits(OPENAI_COUNT)
    assert count.body == {
        "model": "gpt-4o",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Remember this."}]}],
        "instructions": "Be terse.",
        "tools": [TOOL],
        "text": {"format": {"type": "json_object"}},
    }
    counted = [s for s in cw.snapshots() if s.count_method is CountMethod.PROVIDER_API_SCALED_BREAKDOWN]
    assert [s.input_tokens for s in counted] == [provider[OPENAI_COUNT].tokens]


def test_previous_response_id_is_flagged(runtime):
    snap = cw.estimate(model="openai/gpt-4o", input="And then?", previous_response_id="resp_123")
    assert WarningCode.OPAQUE_CONTEXT_NOT_ESTIMATED.value in snap.warning_codes()


def test_no_content_of_a_responses_call_is_exported(provider, tmp_path, caplog):  # noqa: F811
    from embedded_helpers import embedded_runtime

    canary = "CANARY-responses-5d1e"
    path = tmp_path / "t.jsonl"
    items = [
        cw.message("user", [cw.segment(f"memory {canary}", "memory", "notes.md"), f"question {canary}"]),
        {"type": "function_call", "call_id": "c1", "name": "search", "arguments": json.dumps({"q": canary})},
        {"type": "function_call_output", "call_id": "c1", "output": f"result {canary}"},
    ]
    tool = {**TOOL, "description": f"Search {canary}."}
    with caplog.at_level(logging.DEBUG, logger="cw_middleware"), embedded_runtime(export=f"file:{path}", log_events=True):
        for stream in (False, True):
            response = cw.responses(
                **_kwargs(provider, input=items, instructions=f"Be terse {canary}.", tools=[tool], stream=stream)
            )
            if stream:
                list(response)
    exported = path.read_bytes()
    assert b"agent.context_window.snapshot" in exported and b"resourceLogs" in exported
    assert canary.encode() not in exported
    assert not any(canary in r.getMessage() for r in caplog.records if r.name.startswith("cw_middleware"))


def test_a_custom_tool_is_counted_and_listed_and_only_provider_run_tools_are_left_out(runtime):
    custom = {
        "type": "custom",
        "name": "apply_patch",
        "description": "Apply a patch to the working tree.",
        "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch" /(.|\\n)*/'},
    }
    base = cw.estimate(model="openai/gpt-5", input="Fix the bug.")
    snap = cw.estimate(model="openai/gpt-5", input="Fix the bug.", tools=[custom])
    (row,) = snap.tools
    assert (row.name, row.category.value, row.source) == ("apply_patch", "tools", "native")
    assert row.definition_tokens > 10 and snap.input_tokens > base.input_tokens + row.definition_tokens
    assert "provider_tool_not_estimated" not in snap.warning_codes()
    # A provider-run tool beside it is still left out, with the warning; the custom tool still counts.
    both = cw.estimate(model="openai/gpt-5", input="Fix the bug.", tools=[custom, {"type": "web_search"}])
    assert [t.name for t in both.tools] == ["apply_patch"] and both.input_tokens == snap.input_tokens
    assert "provider_tool_not_estimated" in both.warning_codes()
