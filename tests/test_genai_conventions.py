"""The OpenTelemetry GenAI conventions, complete where they apply (issue 40 item 4), read by an OTLP/HTTP receiver.

Real LiteLLM calls to the local Anthropic Messages route (cache reads and writes in its usage), exported by
cw's embedded pipeline over plain OTLP (http/protobuf) to a receiver on 127.0.0.1, decoded with the
OpenTelemetry protobufs. Every name is written out here: these are what GenAI-aware backends read.
"""

from __future__ import annotations

import json

import pytest
from embedded_helpers import embedded_runtime
from http_servers import OtlpReceiver, running
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from providers import MESSAGES, provider  # noqa: F401 - the fixture

import cw_middleware as cw

MODEL = "anthropic/claude-sonnet-4-5"


def _value(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind)


def _call_spans(receiver) -> list[dict]:
    spans = []
    for body in receiver.bodies.get("/v1/traces", []):
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    attrs = {a.key: _value(a.value) for a in span.attributes}
                    if "gen_ai.operation.name" in attrs:
                        spans.append(attrs)
    return spans


def _metric_names(receiver) -> set[str]:
    names = set()
    for body in receiver.bodies.get("/v1/metrics", []):
        request = ExportMetricsServiceRequest.FromString(body)
        for resource in request.resource_metrics:
            for scope in resource.scope_metrics:
                names |= {m.name for m in scope.metrics}
    return names


@pytest.fixture
def receiver(monkeypatch):
    with running(OtlpReceiver) as server:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", server.url)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        yield server


def _call(provider, messages, stream=False):  # noqa: F811
    response = cw.completion(model=MODEL, messages=messages, api_base=provider.url, api_key="sk-ant-test", stream=stream)
    if stream:
        for _ in response:
            pass


def test_every_genai_attribute_and_metric_reaches_an_otlp_receiver(receiver, provider):  # noqa: F811
    route = provider[MESSAGES]
    long_history = [{"role": "user", "content": f"turn {i}: " + "words " * 30} for i in range(8)]
    with embedded_runtime(export="otlp", metrics="export", langfuse_usage_details=True) as runtime:
        with cw.stage("conventions", "s@1"):
            _call(provider, long_history)
            _call(provider, [{"role": "user", "content": "a summary of the eight turns"}], stream=True)
        assert runtime.flush(10)
    first, second = _call_spans(receiver)
    served = route.tokens + route.cached_tokens + route.cache_write_tokens
    assert first["gen_ai.usage.input_tokens"] == served
    assert first["gen_ai.usage.cache_read.input_tokens"] == route.cached_tokens
    assert first["gen_ai.usage.cache_creation.input_tokens"] == route.cache_write_tokens
    assert first["gen_ai.usage.cache_write.input_tokens"] == route.cache_write_tokens
    assert first["gen_ai.context.utilization"] == pytest.approx(served / first["gen_ai.context.window_size"], abs=1e-6)
    details = json.loads(first["langfuse.observation.usage_details"])
    # the categories are the input, given once: Langfuse's total (its usage types summed) is input + output
    assert sum(v for k, v in details.items() if k.startswith("input_")) == served and "input" not in details
    assert details["output"] == route.completion_tokens
    for span in (first, second):
        assert span["gen_ai.response.finish_reasons"] == ["stop"]  # as the caller reads it: LiteLLM maps end_turn
        assert span["gen_ai.context.window_size"] == 200_000 and 0 < span["gen_ai.context.utilization"] < 1
    assert first["gen_ai.request.stream"] is False and second["gen_ai.request.stream"] is True
    assert "gen_ai.conversation.compacted" not in first and second["gen_ai.conversation.compacted"] is True
    assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration"} <= _metric_names(receiver)


def test_the_langfuse_usage_details_are_off_by_default(receiver, provider):  # noqa: F811
    with embedded_runtime(export="otlp") as runtime:
        _call(provider, [{"role": "user", "content": "hi"}])
        assert runtime.flush(10)
    (span,) = _call_spans(receiver)
    assert "langfuse.observation.usage_details" not in span
