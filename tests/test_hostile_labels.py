"""Labels with a lone surrogate (issue 20 item 5): exported with U+FFFD in its place, no traceback floods.

Ids refuse lone surrogates; tag sources, ``ToolSource.mcp(...)`` names and model names do not,
and UTF-8 cannot carry them, so the OTLP encoder logged a traceback per attribute per export
(for a model name kept in the metric state: every export, forever) and dropped the span whose
name held one. Real LiteLLM with ``mock_response``, the embedded file export, real OTel SDK.
"""

from __future__ import annotations

import json
import logging

import litellm
import pytest
from embedded_helpers import exported_to

import cw_middleware as cw
from cw_middleware._kernel.codec import exportable, exportable_text

BAD_MODEL = "gpt-4o\ud800"
SEARCH = {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}


def _spans(path) -> list[dict]:
    out = []
    for line in path.read_bytes().splitlines():
        doc = json.loads(line)  # every line decodes
        out += [s for rs in doc.get("resourceSpans", []) for ss in rs["scopeSpans"] for s in ss["spans"]]
    return out


def _exception_type(fn, **kwargs) -> str:
    try:
        fn(**kwargs)
    except Exception as exc:  # noqa: BLE001
        return type(exc).__name__
    return "none"


def test_hostile_labels_neither_flood_the_log_nor_lose_a_span(tmp_path, caplog, capfd):
    path = tmp_path / "telemetry.jsonl"
    bare = _exception_type(litellm.completion, model=BAD_MODEL, messages=[{"role": "user", "content": "hi"}], mock_response="ok")
    capfd.readouterr()  # LiteLLM's own lines about the unknown provider are not ours
    messages = [
        cw.message("system", [cw.segment("Be careful.", "memory", source="AGENTS\ud800.md")]),
        {"role": "user", "content": "hi"},
    ]
    tools = [cw.tool(SEARCH, source=cw.ToolSource.mcp("git\udfffhub"))]
    with caplog.at_level(logging.DEBUG), exported_to(str(path)) as runtime:
        with cw.stage("hostile", "labels"):
            cw.completion(model="gpt-4o", messages=messages, tools=tools, mock_response="ok")
            ours = _exception_type(
                cw.completion, model=BAD_MODEL, messages=[{"role": "user", "content": "hi"}], mock_response="ok"
            )
            for i in range(3):  # each later export carries the metric state the bad model name left
                cw.completion(model="gpt-4o", messages=[{"role": "user", "content": f"hi {i}"}], mock_response="ok")
                assert runtime.flush(5.0)
    assert ours == bare != "none"  # the call fails as it does in bare LiteLLM
    flood = [r for r in caplog.records if r.levelno >= logging.WARNING and (r.exc_info or "encode" in r.getMessage())]
    assert flood == []
    assert "Traceback" not in capfd.readouterr().err
    spans = _spans(path)
    calls = [s for s in spans if s["name"].startswith("chat ")]
    assert len(calls) == 5  # the failed call's span too
    assert "chat gpt-4o\ufffd" in [s["name"] for s in calls]
    window = cw.reader(f"file:{path}").context_window("hostile", "labels")
    assert window.available
    sources = {
        a["value"]["arrayValue"]["values"][i]["stringValue"]
        for s in calls
        for e in s.get("events", [])
        for a in e["attributes"]
        if a["key"] == "agent.context_window.details.source"
        for i in range(len(a["value"]["arrayValue"]["values"]))
    }
    assert {"AGENTS\ufffd.md", "mcp:git\ufffdhub"} <= sources


@pytest.mark.parametrize(
    ("value", "exported"),
    [("plain", "plain"), ("ü and 😀", "ü and 😀"), ("a\ud800b", "a\ufffdb"), ("\udfff\ud800", "\ufffd\ufffd")],
)
def test_a_label_keeps_every_character_utf8_can_carry(value, exported):
    assert exportable_text(value) == exported
    assert exportable({"k": value, "list": [value, "x"], "n": 1}) == {"k": exported, "list": [exported, "x"], "n": 1}


def test_an_unencodable_attribute_is_left_out_of_the_file_without_a_traceback(tmp_path, caplog):
    # What the gate above never lets through, should anything else reach cw's span file: the line
    # leaves the attribute out, as the SDK's OTLP encoder does, and nothing reaches the app's log.
    path = tmp_path / "telemetry.jsonl"
    with caplog.at_level(logging.DEBUG), exported_to(str(path)) as runtime:
        tracer = runtime.pipeline.tracer_provider.get_tracer("test")  # type: ignore[attr-defined]
        for _ in range(3):
            tracer.start_span("odd", attributes={"odd.value": "x\ud800", "odd.fine": "y"}).end()
            runtime.flush(5.0)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    spans = _spans(path)
    assert [s["name"] for s in spans] == ["odd"] * 3  # the spans themselves go out
    assert all([a["key"] for a in s.get("attributes", [])] == ["odd.fine"] for s in spans)
