"""Span records (cw_middleware/_embedded/records.py): tuples the collector ignores (their lines: test_span_json.py)."""

from __future__ import annotations

import gc

from opentelemetry import trace
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cw_middleware._embedded.records import Origins, compact


def _finished(limits: SpanLimits | None = None):
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=limits or SpanLimits())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("cw_middleware", "9.9")
    linked = trace.SpanContext(0x77, 0x88, is_remote=False, trace_state=trace.TraceState([("k", "v")]))
    with tracer.start_as_current_span("chat m", kind=trace.SpanKind.CLIENT, links=[trace.Link(linked, {"l": 1})]) as span:
        span.set_attributes({"s": "x", "i": 3, "f": 0.5, "b": False, "seq": ("a", "b")})
        span.add_event("agent.context_window.snapshot", {"agent.context_window.input_tokens": 12}, timestamp=5)
        span.set_status(trace.Status(trace.StatusCode.ERROR, "boom"))
    return exporter.get_finished_spans()


def test_a_record_holds_nothing_the_collector_tracks():
    (span,) = _finished()
    record = compact(span, Origins())
    # A collection untracks a tuple of untracked values when it passes over it: a nesting level a
    # pass. A dict or an SDK object inside would keep the record tracked for good.
    for _ in range(8):
        gc.collect()
    assert not gc.is_tracked(record)


def test_spans_of_one_tracer_share_one_origin():
    origins = Origins()
    first, second = (compact(s, origins) for s in (*_finished(), *_finished()))
    assert first[0] != second[0]  # two providers: two resources
    spans = _finished()
    assert compact(spans[0], origins)[0] == compact(spans[0], origins)[0]
