"""The SDK-encoder path to OTLP JSON lines (cw_middleware/_embedded/encode.py): hex ids, one compact line a batch.

Spans go through it here as the encoder of record that `span_json` must match; metrics and log events are written by it.
"""

from __future__ import annotations

import json

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cw_middleware._embedded.encode import encode_metrics_json, to_json_line


def _spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "svc"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("scope", "1.0")
    parent = trace.SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=trace.TraceFlags(1))
    with tracer.start_as_current_span("chat m", context=trace.set_span_in_context(trace.NonRecordingSpan(parent))) as span:
        span.set_attribute("agent.context_window.input_tokens", 2**40)
        span.set_attribute("agent.stage.id", "plan@1 · ü")
    return exporter.get_finished_spans()


def test_a_span_batch_is_one_compact_line_with_hex_ids_and_int64_as_strings():
    (span,) = _spans()
    line = to_json_line(encode_spans([span]))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert line.startswith(b'{"resourceSpans":[')
    assert b": " not in line and b", " not in line  # compact separators
    assert "plan@1 · ü".encode() in line  # UTF-8 as is, not \u escapes
    encoded = json.loads(line)["resourceSpans"][0]["scopeSpans"][0]
    assert encoded["scope"] == {"name": "scope", "version": "1.0"}
    written = encoded["spans"][0]
    assert written["traceId"] == f"{0xABC:032x}" and written["parentSpanId"] == f"{0xDEF:016x}"
    assert written["spanId"] == f"{span.context.span_id:016x}"
    attributes = {a["key"]: a["value"] for a in written["attributes"]}
    assert attributes["agent.context_window.input_tokens"] == {"intValue": str(2**40)}


def test_metrics_are_one_line_under_their_own_key():
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    provider.get_meter("m").create_counter("agent.context_window.snapshots").add(3, {"agent.context_window.count_method": "x"})
    line = encode_metrics_json(reader.get_metrics_data())
    assert line.startswith(b'{"resourceMetrics":[') and line.endswith(b"\n") and line.count(b"\n") == 1
    metric = json.loads(line)["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]
    assert metric["name"] == "agent.context_window.snapshots"
    assert metric["sum"]["dataPoints"][0]["asInt"] == "3"
