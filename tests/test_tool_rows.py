"""Per-tool rows with real LiteLLM: results by the tool that produced them, calls counted, unused definitions, folding."""

from __future__ import annotations

import json

import pytest
from embedded_helpers import exported_to
from http_servers import OpenAIStub, running
from stubs import TraceStore, serving
from stubs.jaeger import JaegerStub
from stubs.tempo import TempoStub

import cw_middleware as cw
from cw_middleware._capture.runtime import Runtime, set_runtime
from cw_middleware._kernel.config import resolve


def _tool(name: str, description: str, source: cw.ToolSource | None = None) -> dict:
    definition = {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
    return cw.tool(definition, source) if source is not None else definition


TOOLS = [
    _tool("read_file", "Read a file from the repository."),
    _tool("write_file", "Write a file to the repository, replacing what it held."),
    _tool("search_issues", "Search the issues of a repository.", cw.ToolSource.mcp("github")),
    _tool("load_skill", "Load a skill's instructions.", cw.ToolSource.skill("pdf")),
]


def _call(call_id: str, name: str, path: str = "a.py") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps({"path": path})}}


def _messages() -> list:
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Look at a.py and b.py."},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1", "read_file"), _call("c2", "read_file", "b.py")]},
        {"role": "tool", "tool_call_id": "c1", "content": "import os\n" * 120},
        {"role": "tool", "tool_call_id": "c2", "content": "def f():\n    return 1\n" * 40},
        {"role": "assistant", "content": None, "tool_calls": [_call("c3", "search_issues")]},
        {"role": "tool", "tool_call_id": "c3", "content": "#12 flaky test"},
    ]


def _rows(snapshot) -> dict:
    return {t.name: t for t in snapshot.tools}


def test_tool_results_count_under_the_tool_that_produced_them(runtime):
    snap = cw.estimate(model="gpt-4o", messages=_messages(), tools=TOOLS)
    details = {(d.category.value, d.source): d.tokens for d in snap.details}
    # without the definitions the same results are plain "tool" messages: moving them changes no count
    plain = cw.estimate(model="gpt-4o", messages=_messages())
    plain_tool = {d.source: d.tokens for d in plain.details}["tool"]
    assert "tool" not in {d.source for d in snap.details}
    assert details[("conversation", "tool:read_file")] + details[("conversation", "tool:search_issues")] == plain_tool
    assert snap.tokens("conversation") == plain.tokens("conversation")
    rows = _rows(snap)
    assert rows["read_file"].result_tokens == details[("conversation", "tool:read_file")]
    assert rows["search_issues"].result_tokens == details[("conversation", "tool:search_issues")]
    assert rows["read_file"].result_tokens > rows["search_issues"].result_tokens > 0


def test_rows_carry_definitions_by_source_calls_and_unused_tools(runtime):
    snap = cw.estimate(model="gpt-4o", messages=_messages(), tools=TOOLS)
    rows = _rows(snap)
    assert set(rows) == {"read_file", "write_file", "search_issues", "load_skill"}
    assert [(rows[n].category.value, rows[n].source) for n in ("read_file", "search_issues", "load_skill")] == [
        ("tools", "native"),
        ("mcp_tools", "mcp:github"),
        ("skills", "skill:pdf"),
    ]
    # each source's definitions sum to that source's detail row (the tools' framing is a source of its own)
    details = {(d.category.value, d.source): d.tokens for d in snap.details}
    for category, source in (("tools", "native"), ("mcp_tools", "mcp:github"), ("skills", "skill:pdf")):
        rows_of = [t for t in snap.tools if (t.category.value, t.source) == (category, source)]
        assert sum(t.definition_tokens for t in rows_of) == details[(category, source)] > 0
    assert (rows["read_file"].invocations, rows["search_issues"].invocations, rows["write_file"].invocations) == (2, 1, 0)
    assert snap.unused_tool_tokens == rows["write_file"].definition_tokens + rows["load_skill"].definition_tokens
    # largest first: definition plus results
    sizes = [t.definition_tokens + t.result_tokens for t in snap.tools]
    assert sizes == sorted(sizes, reverse=True)


def test_the_calls_a_response_makes_count_on_its_snapshot(runtime):
    """mock_tool_calls: the model calls write_file; the response-side snapshot counts it, the first one does not."""
    cw.completion(
        model="gpt-4o",
        messages=_messages(),
        tools=TOOLS,
        mock_response="",
        mock_tool_calls=[_call("c4", "write_file"), _call("c5", "not_a_defined_tool")],
    )
    first, last = cw.snapshots()[-2:]
    assert _rows(first)["write_file"].invocations == 0
    assert _rows(last)["write_file"].invocations == 1
    assert last.unused_tool_tokens == _rows(last)["load_skill"].definition_tokens
    assert "not_a_defined_tool" not in json.dumps([s.model_dump(mode="json") for s in (first, last)])


def _tool_call_answer(model: str, call: dict, prompt_tokens: int) -> dict:
    """A Chat Completions response body whose one choice calls ``call``, with its usage."""
    return {
        "id": "chatcmpl-tools",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [call]}, "finish_reason": "tool_calls"}
        ],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 9, "total_tokens": prompt_tokens + 9},
    }


def test_the_local_server_reports_tool_calls_and_usage(runtime):
    """The local OpenAI-compatible server answers with a tool call: counted, and the rows rescale to its usage."""
    with running(OpenAIStub) as provider:
        provider.body = _tool_call_answer("gpt-4o-2024-08-06", _call("c9", "read_file"), prompt_tokens=2000)
        cw.completion(model="openai/gpt-4o", api_base=provider.url, api_key="sk-test", messages=_messages(), tools=TOOLS)
    local, answered = cw.snapshots()[-2:]
    assert answered.count_method.value == "response_usage_scaled_breakdown" and answered.input_tokens == 2000
    assert _rows(local)["read_file"].invocations == 2 and _rows(answered)["read_file"].invocations == 3
    # rescaled with their sources: results as their detail row, definitions summing to theirs
    details = {d.source: d.tokens for d in answered.details}
    assert _rows(answered)["read_file"].result_tokens == details["tool:read_file"] > _rows(local)["read_file"].result_tokens


def test_a_custom_tools_call_in_a_response_counts_as_its_invocation(runtime):
    """A free-form tool's call comes back as {"type": "custom", "custom": {"name", "input"}}: counted by its name."""
    import litellm.types.utils

    if not hasattr(litellm.types.utils, "ChatCompletionMessageCustomToolCall"):
        pytest.skip("this LiteLLM cannot read a custom tool's call in a response (it raises without cw too)")
    patch = {"type": "custom", "custom": {"name": "apply_patch", "description": "Apply a patch to the working tree."}}
    call = {"id": "c1", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin Patch\n*** End Patch"}}
    with running(OpenAIStub) as provider:
        provider.body = _tool_call_answer("gpt-5-2025-08-07", call, prompt_tokens=300)
        response = cw.completion(
            model="openai/gpt-5", api_base=provider.url, api_key="sk-test", messages=_messages(), tools=[*TOOLS, patch]
        )
    assert response.choices[0].message.tool_calls[0].custom.name == "apply_patch"  # LiteLLM's own custom-call object
    local, answered = cw.snapshots()[-2:]
    assert _rows(local)["apply_patch"].invocations == 0 and _rows(answered)["apply_patch"].invocations == 1
    assert _rows(answered)["apply_patch"].definition_tokens > 0
    # the call's input and the tool's description are counted, never carried
    carried = json.dumps([s.model_dump(mode="json") for s in (local, answered)])
    assert "Begin Patch" not in carried and "working tree" not in carried


def test_beyond_max_tools_the_rest_fold_into_one_row_with_a_warning(telemetry):
    rt = Runtime(resolve(export="none", max_tools=2, environ={}), telemetry.tracer_provider, telemetry.meter_provider)
    previous = set_runtime(rt)
    try:
        snap = cw.estimate(model="gpt-4o", messages=_messages(), tools=TOOLS)
    finally:
        rt.shutdown()
        set_runtime(previous)
    assert len(snap.tools) == 3 and "tools_folded" in snap.warning_codes()
    *kept, folded = snap.tools
    assert (folded.name, folded.category, folded.source, folded.folded) == ("(other tools)", None, None, 2)
    assert {t.name for t in kept} == {"read_file", "search_issues"}  # the two largest (results included)
    total_definitions = sum(t.definition_tokens for t in snap.tools)
    assert total_definitions == sum(d.tokens for d in snap.details if d.source in ("native", "mcp:github", "skill:pdf"))
    assert folded.invocations == 0 and snap.unused_tool_tokens == folded.definition_tokens


def test_every_reader_reads_the_rows_back(tmp_path):
    path = str(tmp_path / "t.jsonl")
    with exported_to(path) as rt, cw.stage("run-tools", "agent@1"):
        cw.completion(model="gpt-4o", messages=_messages(), tools=TOOLS, mock_response="ok")
        rt.flush(5.0)
        written = cw.snapshots()[-1]
    store = TraceStore()
    store.feed_file(path)
    with serving(JaegerStub(store)) as jaeger, serving(TempoStub(store)) as tempo:
        for backend in (f"file:{path}", f"jaeger+{jaeger.url}", f"tempo+{tempo.url}"):
            answer = cw.reader(backend).context_window("run-tools", "agent@1")
            assert answer.tools == written.tools, backend
            assert answer.unused_tool_tokens == written.unused_tool_tokens > 0
            unused = {u.name: u for u in answer.unused_tools}
            assert set(unused) == {"write_file", "load_skill"}
            assert unused["write_file"].definition_tokens == _rows(written)["write_file"].definition_tokens
    exported = open(path, encoding="utf-8").read()
    # rows ride on the event only: the span's mirror of the latest snapshot stays small
    spans = [s for line in exported.splitlines() if '"resourceSpans"' in line for s in _spans(json.loads(line))]
    call = next(s for s in spans if any(e["name"] == "agent.context_window.snapshot" for e in s.get("events", [])))
    assert "agent.context_window.tools.name" not in {a["key"] for a in call["attributes"]}
    assert "agent.context_window.unused_tool_tokens" in {a["key"] for a in call["attributes"]}


def _spans(doc: dict) -> list:
    return [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


@pytest.mark.parametrize("role", ["tool", "function"])
def test_a_result_without_a_matching_call_stays_plain(runtime, role):
    messages = [
        {"role": "user", "content": "hi"},
        {"role": role, "tool_call_id": "nowhere", "name": "nowhere", "content": "text " * 30},
    ]
    snap = cw.estimate(model="gpt-4o", messages=messages, tools=TOOLS)
    assert role in {d.source for d in snap.details}
    assert all(t.result_tokens == 0 for t in snap.tools)


def test_an_unchanged_conversation_and_tool_set_reuse_their_rows_and_a_new_turn_updates_them(runtime, monkeypatch):
    """Issue 21's estimate cost: the rows are made once per tool set and conversation, not per turn (tool_rows.ToolUse.memo)."""
    from cw_middleware._snapshots import build as snapshot_module

    made = []
    real = snapshot_module.tool_rows
    monkeypatch.setattr(snapshot_module, "tool_rows", lambda *a: made.append(1) or real(*a))
    first = cw.estimate(model="gpt-4o", messages=_messages(), tools=TOOLS)
    again = cw.estimate(model="gpt-4o", messages=_messages(), tools=[dict(t) for t in TOOLS])  # fresh dicts, same values
    assert len(made) == 1
    assert again.tools == first.tools and again.unused_tools == first.unused_tools
    assert again.tools is not first.tools and again.unused_tools is not first.unused_tools  # each snapshot its own lists
    first.tools.clear()  # what one caller does to its snapshot is not another's
    turn = {"role": "assistant", "content": None, "tool_calls": [_call("c9", "write_file")]}
    grown = cw.estimate(model="gpt-4o", messages=[*_messages(), turn], tools=TOOLS)
    assert len(made) == 2
    assert _rows(grown)["write_file"].invocations == 1 and _rows(again)["write_file"].invocations == 0
    assert "write_file" not in {u.name for u in grown.unused_tools}
    assert cw.estimate(model="gpt-4o", messages=_messages(), tools=TOOLS).tools == again.tools
