"""Telemetry out: GenAI call spans under the stage span, snapshot events, stage markers, metrics."""

from __future__ import annotations

import pytest
from providers import CHAT, provider  # noqa: F401 - the fixture

import cw_middleware as cw
from cw_middleware._capture.runtime import Runtime, set_runtime
from cw_middleware._kernel.config import resolve

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]


def _metrics(telemetry):
    data = telemetry.metrics.get_metrics_data()
    out = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out[m.name] = m
    return out


def test_stage_and_call_spans(runtime, telemetry):
    with cw.stage("run-1", "agent@1"):
        cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="ok")
    with cw.stage("run-1", "lint@1", kind="tool"):
        pass
    spans = {s.name: s for s in telemetry.spans.get_finished_spans()}
    stage = spans["agent.stage agent"]
    call = spans["chat gpt-4o"]
    assert call.parent.span_id == stage.context.span_id
    assert call.attributes["gen_ai.operation.name"] == "chat" and call.attributes["gen_ai.provider.name"] == "openai"
    assert call.attributes["gen_ai.request.model"] == "gpt-4o" and call.attributes["agent.stage.kind"] == "agent"
    assert dict(stage.attributes) | {} == {
        "agent.run.id": "run-1",
        "agent.stage.id": "agent@1",
        "agent.stage.kind": "agent",
        "agent.context_window.schema": 1,
        "agent.stage.state": "ended",
    }
    markers = [s for s in telemetry.spans.get_finished_spans() if s.name == "agent.stage.start"]
    assert [
        (m.attributes["agent.stage.id"], m.attributes["agent.stage.kind"], m.attributes["agent.stage.state"]) for m in markers
    ] == [("agent@1", "agent", "started"), ("lint@1", "tool", "started")]
    assert markers[0].parent.span_id == stage.context.span_id
    events = [e for e in call.events if e.name == "agent.context_window.snapshot"]
    assert len(events) == 2
    attrs = events[-1].attributes
    assert attrs["agent.run.id"] == "run-1" and attrs["agent.stage.id"] == "agent@1" and attrs["agent.context_window.schema"] == 1
    assert sum(attrs["agent.context_window.tokens." + c.value] for c in cw.Category) == attrs["agent.context_window.input_tokens"]
    assert 0 < attrs["agent.context_window.utilization"] < 1 and not any(k.startswith("gen_ai.") for k in attrs)
    # The latest totals are mirrored on the span for backends that search span attributes only.
    assert (
        call.attributes["agent.context_window.event_seq"] == attrs["agent.context_window.event_seq"]
        and call.attributes["agent.context_window.schema"] == 1
    )


def test_marker_is_exported_while_the_stage_runs(runtime, telemetry):
    with cw.stage("run-1", "agent@1"):
        assert [s.name for s in telemetry.spans.get_finished_spans()] == ["agent.stage.start"]


def test_stage_error_records_type_only(runtime, telemetry):
    with pytest.raises(ValueError):
        with cw.stage("run-1", "agent@1"):
            raise ValueError("secret prompt text")
    stage = next(s for s in telemetry.spans.get_finished_spans() if s.name == "agent.stage agent")
    assert stage.attributes["error.type"] == "ValueError" and not stage.events
    assert "secret" not in str(stage.status.description) and stage.attributes["agent.stage.state"] == "ended"


def test_metrics_names_and_attributes(runtime, telemetry):
    with cw.stage("run-1", "agent@1"):
        cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="ok")
    metrics = _metrics(telemetry)
    assert {
        "agent.context_window.tokens",
        "agent.context_window.limit",
        "agent.context_window.utilization",
        "agent.context_window.snapshots",
    } <= set(metrics)
    tokens = metrics["agent.context_window.tokens"]
    assert tokens.unit == "{token}"
    cats = {p.attributes["agent.context_window.category"] for p in tokens.data.data_points}
    assert cats == {c.value for c in cw.Category}
    for p in tokens.data.data_points:
        assert "agent.run.id" not in p.attributes and p.attributes["gen_ai.provider.name"] == "openai"
    counted = {
        p.attributes["agent.context_window.count_method"]: p.value
        for p in metrics["agent.context_window.snapshots"].data.data_points
    }
    assert counted == {"local_estimate": 2}
    # OTel -> Prometheus: dots become underscores, {annotations} add no unit suffix, counters get _total.
    assert _prometheus_name(tokens) == "agent_context_window_tokens"
    assert _prometheus_name(metrics["agent.context_window.snapshots"], counter=True) == "agent_context_window_snapshots_total"


def test_run_labels_only_when_opted_in(telemetry):
    rt = Runtime(resolve(export="none", environ={}, metric_run_labels=True), telemetry.tracer_provider, telemetry.meter_provider)
    previous = set_runtime(rt)
    try:
        with cw.stage("run-1", "agent@1"):
            cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="ok")
    finally:
        set_runtime(previous)
    points = _metrics(telemetry)["agent.context_window.tokens"].data.data_points
    assert all(p.attributes["agent.run.id"] == "run-1" and p.attributes["agent.stage.id"] == "agent@1" for p in points)


def _prometheus_name(metric, counter=False):
    name = metric.name.replace(".", "_")
    unit = metric.unit or ""
    if unit and not unit.startswith("{") and unit != "1":
        name += "_" + unit
    return name + ("_total" if counter else "")


def test_gauges_hold_the_calls_last_snapshot(runtime, telemetry, provider):  # noqa: F811
    provider[CHAT].tokens = 777  # the local OpenAI-compatible server reports this prompt size
    cw.completion(model="openai/gpt-4o", messages=MESSAGES, api_base=f"{provider.url}/v1", api_key="sk-test")
    last = cw.snapshots()[-1]
    assert last.input_tokens == 777 and cw.snapshots()[-2].input_tokens != 777
    points = {
        p.attributes["agent.context_window.category"]: p.value
        for p in _metrics(telemetry)["agent.context_window.tokens"].data.data_points
    }
    assert points == {item.category.value: item.tokens for item in last.breakdown}
    assert sum(points.values()) == 777
