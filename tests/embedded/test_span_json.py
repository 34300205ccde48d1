"""Span records written straight to OTLP JSON (cw_middleware/_embedded/span_json.py): the SDK encoder's bytes, span by span.

The reference is the SDK's own path, run here: ``encode_spans`` → protobuf → ``MessageToDict``
→ hex ids → compact JSON (`to_json_line`). Every case is a real span from a real
TracerProvider, recorded as the span queue records it.
"""

from __future__ import annotations

import json
import logging

import litellm
import pytest
from embedded_helpers import embedded_runtime
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import cw_middleware as cw
from cw_middleware._embedded.encode import to_json_line
from cw_middleware._embedded.records import Origins, compact
from cw_middleware._embedded.span_json import SpanLines

TEXTS = ["", "plain", 'quote " backslash \\ slash /', "tab\tnew\nline\r\x00\x1f\x7f", "ü · ∑ 漢字 😀", "\u2028\u2029"]
NUMBERS = [0, 1, -1, 2**31, 2**53 + 1, 2**63 - 1, -(2**63)]
DOUBLES = [0.0, -0.0, 0.1, 1.0, -2.5, 1e300, 1e-300, 5e-324, 123456789.123, float("nan"), float("inf"), float("-inf")]
ATTRIBUTES = {
    **{f"s{i}": t for i, t in enumerate(TEXTS)},
    **{f"i{i}": n for i, n in enumerate(NUMBERS)},
    **{f"d{i}": d for i, d in enumerate(DOUBLES)},
    "b_true": True,
    "b_false": False,
    "seq_s": tuple(TEXTS),
    "seq_i": tuple(NUMBERS),
    "seq_d": tuple(DOUBLES),
    "seq_b": (True, False),
    "seq_empty": (),
    "list_s": ["a", "b"],
    'ü key "q"': "v",
}


def _provider(resource: Resource, limits: SpanLimits | None = None) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=resource, span_limits=limits or SpanLimits(), shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _varied_spans() -> list:
    spans = []
    resources = [
        Resource.create({"service.name": "svc", "r.int": 7, "r.seq": ("x", "y"), "r.d": 0.5}, schema_url="https://r/1"),
        Resource({}),
        Resource({"only": "one"}),
    ]
    limited = SpanLimits(max_span_attributes=3, max_events=2, max_links=1, max_event_attributes=1, max_link_attributes=1)
    for resource in resources:
        for limits in (None, limited):
            provider, exporter = _provider(resource, limits)
            tracers = [
                provider.get_tracer("cw_middleware", "1.2.3", schema_url="https://s/1"),
                provider.get_tracer("bare"),
                provider.get_tracer("", None),
            ]
            try:
                tracers.append(provider.get_tracer("with.attributes", "0", attributes={"scope.k": "v", "scope.n": 3}))
            except TypeError:  # an SDK without scope attributes
                pass
            remote = trace.SpanContext(
                0x1234,
                0x5678,
                is_remote=True,
                trace_flags=trace.TraceFlags(1),
                trace_state=trace.TraceState([("vendor", "v1"), ("b", "2")]),
            )
            local = trace.SpanContext(0xFFFF_FFFF_FFFF_FFFF_FFFF_FFFF_FFFF_FFFF, 0x1, is_remote=False)
            links = [
                trace.Link(trace.SpanContext(0x99, 0x44, is_remote=False), {"link.k": "v", "link.n": 2}),
                trace.Link(trace.SpanContext(0x98, 0x45, is_remote=True, trace_state=trace.TraceState([("k", "v")]))),
            ]
            statuses = [
                None,
                trace.Status(trace.StatusCode.OK),
                trace.Status(trace.StatusCode.ERROR, "ValueError: ü"),
                trace.Status(trace.StatusCode.ERROR),
            ]
            kinds = list(trace.SpanKind)
            for i, tracer in enumerate(tracers):
                for j, parent in enumerate((None, remote, local)):
                    context = trace.set_span_in_context(trace.NonRecordingSpan(parent)) if parent is not None else None
                    status = statuses[(i + j) % len(statuses)]
                    with tracer.start_as_current_span(
                        ("chat m", "", "ü name")[j],
                        context=context,
                        kind=kinds[(i + j) % len(kinds)],
                        links=links if j else [],
                        start_time=None if j != 2 else 1,
                    ) as span:
                        span.set_attributes(ATTRIBUTES if j != 1 else {"one": 1})
                        span.add_event(
                            "agent.context_window.snapshot", {"k1": 1, "k2": "two", "k3": (3, 4), "k4": 0.25}, timestamp=10
                        )
                        span.add_event("")
                        span.add_event("late", {"x": "y"})
                        if status is not None:
                            span.set_status(status)
            spans += exporter.get_finished_spans()
    return spans


def _sdk_line(span) -> bytes:
    return to_json_line(encode_spans([span]))


def test_every_varied_span_is_written_as_the_sdk_encoder_writes_it():
    spans = _varied_spans()
    origins = Origins()
    lines = SpanLines(origins)
    assert len(spans) >= 40
    for span in spans:
        assert lines.line(compact(span, origins)) == _sdk_line(span), span.name
    # The cases are what they say: dropped counts, remote parents, links, statuses and every kind occur.
    written = [json.loads(_sdk_line(s))["resourceSpans"][0]["scopeSpans"][0]["spans"][0] for s in spans]
    assert {w["kind"] for w in written} == {1, 2, 3, 4, 5}
    assert {w["flags"] for w in written} == {256, 768}
    assert {w.get("status", {}).get("code", 0) for w in written} == {0, 1, 2}
    assert any(w.get("droppedAttributesCount") for w in written) and any(w.get("droppedEventsCount") for w in written)
    assert any(w.get("droppedLinksCount") for w in written) and any("traceState" in w for w in written)


def test_pairs_kept_made_are_written_as_the_sdk_encoder_writes_each_span():
    """The pairs SpanLines keeps made (issue 22 gap 1) never stand in for an equal value that encodes otherwise."""
    provider, exporter = _provider(Resource({}))
    tracer = provider.get_tracer("cw_middleware")
    arrays = [(1, 0), (True, False), (1.0, 0.0), (0.0,), (-0.0,), (0,), ("a", "b"), ("a", "b"), ("a", "\ud800")]
    arrays += [((1,),), ((True,),), 1, True, 1.0, 0.0, -0.0, "a", "\ud800"]  # nested arrays and the scalars
    for value in arrays + arrays:  # each twice: made, then kept
        with tracer.start_as_current_span("s") as span:
            span.add_event("e", {"rows": value})
            span.set_attribute("rows", value)
    origins = Origins()
    lines = SpanLines(origins)
    spans = exporter.get_finished_spans()
    assert len(spans) == 2 * len(arrays)
    for span in spans:
        try:
            expected = _sdk_line(span)
        except Exception:  # noqa: BLE001 - the lone surrogate: the SDK's path drops the attribute or fails
            continue
        assert lines.line(compact(span, origins)) == expected, span.attributes["rows"]
    assert 0 < len(lines._pairs) < len(arrays)


def test_the_origin_part_is_made_once_and_shared_by_every_span_of_a_tracer():
    provider, exporter = _provider(Resource.create({"service.name": "svc"}))
    tracer = provider.get_tracer("cw_middleware", "1")
    for name in ("a", "b", "c"):
        with tracer.start_as_current_span(name):
            pass
    origins = Origins()
    lines = SpanLines(origins)
    out = [lines.line(compact(span, origins)) for span in exporter.get_finished_spans()]
    assert out == [_sdk_line(span) for span in exporter.get_finished_spans()]
    assert len(lines._frames) == 1


def test_an_attribute_the_sdk_encoder_cannot_take_is_left_out_as_it_leaves_it_out(caplog):
    provider, exporter = _provider(Resource({}))
    with provider.get_tracer("t").start_as_current_span("s") as span:
        span.set_attributes({"before": 1, "too.big": 2**64, "surrogate": "bad \ud800", "in.seq": ("ok", "\udfff"), "after": 2})
        span.add_event("e", {"big": -(2**63) - 1, "fine": True})
    (finished,) = exporter.get_finished_spans()
    origins = Origins()
    with caplog.at_level(logging.CRITICAL):  # the SDK's encoder logs each key it drops
        expected = _sdk_line(finished)
    assert SpanLines(origins).line(compact(finished, origins)) == expected
    written = json.loads(expected)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert [a["key"] for a in written["attributes"]] == ["before", "after"]


def test_a_name_that_is_not_utf8_fails_on_both_paths():
    provider, exporter = _provider(Resource({}))
    with provider.get_tracer("t").start_as_current_span("bad \ud800"):
        pass
    (finished,) = exporter.get_finished_spans()
    origins = Origins()
    with pytest.raises(UnicodeEncodeError):
        _sdk_line(finished)
    with pytest.raises(UnicodeEncodeError):
        SpanLines(origins).line(compact(finished, origins))


def test_cws_own_spans_reach_the_file_as_the_sdk_encoder_writes_them(tmp_path, monkeypatch):
    """A stage, plain calls, a stream, tools and a failed call through the embedded default: the file's lines are the
    SDK encoder's of the same spans with their snapshot events added by the SDK's own ``add_event`` and their
    attributes at the end set by its ``set_attributes``.

    cw hands its snapshot events and a call's attributes at its end to the file pipeline with the span's end
    (`CompactSpanProcessor.end_with`), past the SDK's attribute checks: the reference puts each through them
    (`BoundedAttributes`, as ``add_event`` and ``set_attributes`` do)."""
    from opentelemetry.attributes import BoundedAttributes
    from opentelemetry.sdk.trace import Event, ReadableSpan

    from cw_middleware._embedded.span_queue import CompactSpanProcessor

    handed: dict[int, list] = {}
    set_at_end: dict[int, dict] = {}
    end_with = CompactSpanProcessor.end_with

    def spy(self, span, events, end_time=None, attributes=None):
        handed[span.get_span_context().span_id] = list(events)
        set_at_end[span.get_span_context().span_id] = dict(attributes or {})
        return end_with(self, span, events, end_time, attributes)

    monkeypatch.setattr(CompactSpanProcessor, "end_with", spy)
    path = tmp_path / "t.jsonl"
    seen = InMemorySpanExporter()
    with embedded_runtime(export=f"file:{path}", export_interval_ms=60_000) as runtime:
        runtime.pipeline.tracer_provider.add_span_processor(SimpleSpanProcessor(seen))  # type: ignore[attr-defined]
        with cw.stage(run_id="run-j", stage_id="impl@1"):
            messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
            cw.completion(model="gpt-4o", messages=messages, mock_response="ok")
            for _ in cw.completion(model="gpt-4o", messages=messages, mock_response="streamed", stream=True):
                pass
            tools = [{"type": "function", "function": {"name": n, "description": "d " * i}} for i, n in enumerate("fgh")]
            cw.completion(model="gpt-4o", messages=messages, mock_response="ok", tools=tools)
            cw.completion(model="claude-sonnet-4-5", messages=messages * 3, mock_response="ok", tools=tools)
            with pytest.raises(litellm.exceptions.BadRequestError):
                cw.completion(model="gpt-4o", messages=messages, mock_response=litellm.BadRequestError("no", "gpt-4o", "openai"))
        runtime.snapshots()
        assert runtime.flush(5)
    written = [line for line in path.read_bytes().splitlines(keepends=True) if line.startswith(b'{"resourceSpans"')]

    def as_the_sdk_holds_it(span) -> ReadableSpan:
        own = handed.get(span.get_span_context().span_id, [])
        events = tuple(span.events) + tuple(
            Event(name, BoundedAttributes(128, attributes, immutable=True), at) for name, at, attributes in own
        )
        attributes = BoundedAttributes(128, span.attributes, immutable=False)
        for key, value in set_at_end.get(span.get_span_context().span_id, {}).items():
            attributes[key] = value  # as set_attributes sets them: a key set again moves to the end
        return ReadableSpan(
            name=span.name,
            context=span.get_span_context(),
            parent=span.parent,
            resource=span.resource,
            attributes=attributes,
            events=events,
            links=span.links,
            kind=span.kind,
            status=span.status,
            start_time=span.start_time,
            end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope,
        )

    expected = [_sdk_line(as_the_sdk_holds_it(span)) for span in seen.get_finished_spans()]
    assert len(expected) >= 5 and written == expected
    # The events did go the short way: every call span's snapshot events, none through the SDK's add_event.
    calls = [s for s in seen.get_finished_spans() if s.name.startswith("chat ")]
    assert len(calls) == 5 and all(handed[s.get_span_context().span_id] and not s.events for s in calls)
    assert all(len(e[2]) > 20 for s in calls for e in handed[s.get_span_context().span_id])
    # ... and so did their attributes, those they start with and those set at the end: none reached the SDK's span.
    for s in calls:
        at_end = set_at_end[s.get_span_context().span_id]
        assert {"gen_ai.operation.name", "agent.stage.kind", "agent.context_window.input_tokens"} <= set(at_end)
        assert not s.attributes
    failed = [set_at_end[s.get_span_context().span_id] for s in calls if s.status.status_code.name == "ERROR"]
    assert [a["error.type"] for a in failed] == ["BadRequestError"]
