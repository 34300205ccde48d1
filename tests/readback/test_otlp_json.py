"""The shared OTLP-JSON decoder: every shape real backends write."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from cw_middleware._kernel.contract import Category, CountMethod, Staleness, UnavailableReason
from cw_middleware._readback import fold
from cw_middleware._readback.otlp_json import any_value, iter_spans, normalize_id

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TRACE_HEX = "b181d3e495396a7b1953a675c7c146bd"
SPAN_HEX = "6f9af74775c0b9bf"
# The synthetic spans below sit near the epoch: pin the staleness clock just after them.
QUIET = fold.Horizon(now_ns=10**6)


def fold_stage(spans, run_id, stage_id):
    return fold.fold_stage(spans, run_id, stage_id, QUIET)


def fold_run(spans, run_id):
    return fold.fold_run(spans, run_id, QUIET)


def _b64(hex_id: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_id)).decode()


def _kv(key, value):
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    if isinstance(value, list):
        return {"key": key, "value": {"arrayValue": {"values": [{"stringValue": v} for v in value]}}}
    return {"key": key, "value": {"stringValue": value}}


def _span(name, span_id, attrs, events=(), parent="", start=1_000, end=2_000):
    return {
        "traceId": TRACE_HEX,
        "spanId": span_id,
        "parentSpanId": parent,
        "name": name,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": [_kv(k, v) for k, v in attrs.items()],
        "events": [{"name": n, "timeUnixNano": str(t), "attributes": [_kv(k, v) for k, v in a.items()]} for n, t, a in events],
    }


def _snapshot(seq, tokens, method="local_estimate", run="r", stage="s"):
    return {
        "agent.run.id": run,
        "agent.stage.id": stage,
        "agent.context_window.schema": 1,
        "agent.context_window.input_tokens": sum(tokens.values()),
        "agent.context_window.limit_tokens": 1000,
        "agent.context_window.count_method": method,
        "agent.context_window.event_seq": seq,
        "agent.context_window.generated_at": f"2026-01-01T00:00:{seq:02d}+00:00",
        "agent.context_window.warnings": ["details_truncated"],
        "agent.context_window.details.category": ["memory"],
        "agent.context_window.details.source": ["AGENTS.md"],
        **{f"agent.context_window.tokens.{k}": v for k, v in tokens.items()},
    }


def _doc(spans):
    return {"resourceSpans": [{"resource": {"attributes": [_kv("service.instance.id", "w1")]}, "scopeSpans": [{"spans": spans}]}]}


def _spans(*raw):
    return list(iter_spans(_doc(list(raw))))


def test_ids_hex_or_base64():
    assert normalize_id(TRACE_HEX.upper()) == TRACE_HEX
    assert normalize_id(_b64(TRACE_HEX)) == TRACE_HEX
    assert normalize_id(_b64(SPAN_HEX)) == SPAN_HEX
    assert normalize_id("") == ""


def test_any_value_camel_and_snake_and_int_strings():
    assert any_value({"intValue": "12"}) == 12
    assert any_value({"int_value": 7}) == 7
    assert any_value({"double_value": "0.5"}) == 0.5
    assert any_value({"string_value": "x"}) == "x"
    assert any_value({"arrayValue": {"values": [{"intValue": "1"}, {"stringValue": "a"}]}}) == [1, "a"]
    assert any_value({"kvlistValue": {"values": [_kv("a", "b")]}}) == {"a": "b"}


@pytest.mark.parametrize(
    "wrap",
    [
        lambda rs: {"resourceSpans": rs},
        lambda rs: {"batches": [{**r, "instrumentationLibrarySpans": r.pop("scopeSpans")} for r in rs]},
        lambda rs: {"result": {"resourceSpans": rs}},
        lambda rs: {"trace": {"resourceSpans": rs}},
    ],
)
def test_top_level_shapes(wrap):
    raw = _span(
        "chat",
        _b64(SPAN_HEX),
        {"agent.run.id": "r", "agent.stage.id": "s"},
        [("agent.context_window.snapshot", 5, _snapshot(1, {"tools": 3}))],
    )
    doc = wrap([{"resource": {}, "scopeSpans": [{"spans": [raw]}]}])
    spans = list(iter_spans(json.loads(json.dumps(doc))))
    assert [s.span_id for s in spans] == [SPAN_HEX]
    assert spans[0].events[0].attributes["agent.context_window.tokens.tools"] == 3


def test_recorded_otel_file_exporter_lines_decode():
    traces = (FIXTURES / "recorded" / "otlp-json-file-exporter-0.66b1-traces.jsonl").read_text().splitlines()
    spans = [s for line in traces for s in iter_spans(json.loads(line))]
    assert spans and spans[0].trace_id == TRACE_HEX and spans[0].events[0].name == "agent.context_window.snapshot"
    metrics = (FIXTURES / "recorded" / "otlp-json-file-exporter-0.66b1-metrics.jsonl").read_text().splitlines()
    assert [s for line in metrics for s in iter_spans(json.loads(line))] == []


def test_jaeger_api_v3_fixture_decodes():
    doc = json.loads((FIXTURES / "jaeger-apiv3" / "GetTrace.json").read_text())
    spans = list(iter_spans(doc))
    assert spans and all(len(s.trace_id) == 32 for s in spans)


def test_fold_latest_by_generated_at_and_staleness():
    stage_attrs = {"agent.run.id": "r", "agent.stage.id": "s", "agent.stage.kind": "agent"}
    marker = _span(
        "agent.stage.start", "01" * 8, {**stage_attrs, "agent.stage.state": "started"}, parent="aa" * 8, start=1, end=1
    )
    call_a = _span(
        "chat",
        "02" * 8,
        stage_attrs,
        [
            ("agent.context_window.snapshot", 10, _snapshot(1, {"tools": 1})),
            ("agent.context_window.snapshot", 40, _snapshot(4, {"tools": 4}, "response_usage_scaled_breakdown")),
        ],
        end=50,
    )
    call_b = _span("chat", "03" * 8, stage_attrs, [("agent.context_window.snapshot", 20, _snapshot(2, {"tools": 2}))], end=30)
    live = fold_stage(_spans(marker, call_b, call_a), "r", "s")
    assert live.staleness is Staleness.LIVE and live.event_seq == 4
    assert live.count_method is CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN
    assert live.usage_percent == 0.4 and live.breakdown[1].category is Category.TOOLS and live.breakdown[1].usage_percent == 0.4
    assert [w.code for w in live.warnings] == ["details_truncated"] and live.warnings[0].message
    ended = _span("agent.stage agent", "aa" * 8, {**stage_attrs, "agent.stage.state": "ended"}, start=1, end=60)
    late = _span(
        "agent.context_window.late_snapshot",
        "04" * 8,
        {**stage_attrs, "agent.context_window.late": True},
        [("agent.context_window.snapshot", 70, _snapshot(5, {"tools": 5}, "provider_api_scaled_breakdown"))],
        start=70,
        end=71,
    )
    stored = fold_stage(_spans(marker, call_b, call_a, ended, late), "r", "s")
    assert stored.staleness is Staleness.STORED and stored.event_seq == 5
    assert stored.count_method is CountMethod.PROVIDER_API_SCALED_BREAKDOWN
    assert fold_stage(_spans(marker), "r", "s").unavailable_reason is UnavailableReason.NOT_OBSERVED
    tool_marker = _span(
        "agent.stage.start", "05" * 8, {**stage_attrs, "agent.stage.kind": "tool", "agent.stage.state": "started"}
    )
    assert fold_stage(_spans(tool_marker), "r", "s").unavailable_reason is UnavailableReason.NOT_AGENT_STAGE
    assert fold_stage(_spans(marker), "r", "other") is None
    stages = fold_run(_spans(marker, call_b, call_a, ended), "r")
    assert [(s.stage_id, s.kind, s.staleness) for s in stages] == [("s", "agent", Staleness.STORED)]
    assert fold_run(_spans(marker), "nope") is None
