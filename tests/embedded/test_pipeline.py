"""Pipeline assembly (cw_middleware/_embedded/pipeline.py): threads started when needed, flush and shutdown bounded."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from servers import require_prometheus_extra

from cw_middleware._embedded import install, pipeline
from cw_middleware._embedded.health import exporter_logs
from cw_middleware._kernel.config import resolve


def _threads(*names: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name in names]


def _span(pipeline, name: str = "s") -> None:
    with pipeline.tracer_provider.get_tracer("t").start_as_current_span(name):
        pass


class StuckExporter(SpanExporter):
    """Blocks in export until the test releases it."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.entered.set()
        assert self.release.wait(60)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


def test_a_file_pipeline_starts_its_threads_when_needed_and_ends_them_at_shutdown(tmp_path):
    ours = ("cw-span-export", "cw-flush", "cw-shutdown")
    before = set(_threads(*ours))
    pipeline = install(resolve(environ={}, export=f"file:{tmp_path / 't.jsonl'}", metrics="none"))
    assert set(_threads(*ours)) == before  # an idle pipeline runs nothing
    _span(pipeline)
    assert pipeline.flush(10)
    started = set(_threads(*ours)) - before
    assert {t.name for t in started} == {"cw-span-export", "cw-flush"}
    pipeline.shutdown(10)
    for thread in started | (set(_threads(*ours)) - before):
        thread.join(30)  # a hang guard: closed workers' threads end
        assert not thread.is_alive(), thread.name
    assert (tmp_path / "t.jsonl").read_text().count('"name":"s"') == 1


def test_flush_answers_within_its_timeout_while_an_export_is_stuck(tmp_path):
    stuck = StuckExporter()
    pipeline = install(resolve(environ={}, export=f"file:{tmp_path / 't.jsonl'}", metrics="none"), span_exporter=stuck)
    _span(pipeline)
    try:
        assert pipeline.flush(0.05) is False
        assert stuck.entered.wait(30) and not stuck.release.is_set()  # it answered while the export was still stuck
        assert pipeline.flush(0.05) is False
        assert len(_threads("cw-flush")) <= 1  # the second flush waited behind the stuck one, beside no new thread
        pipeline.shutdown(0.05)  # bounded too, while the export is still stuck
        assert not stuck.release.is_set()
    finally:
        stuck.release.set()


def test_an_otlp_pipeline_holds_the_exporters_loggers_until_shutdown(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    before = exporter_logs.held()
    pipeline = install(resolve(environ={}, export="otlp", metrics="none", exit_timeout=0.5))
    during = exporter_logs.held()
    assert (
        during["opentelemetry.exporter.otlp.proto.http.trace_exporter"]
        == before.get("opentelemetry.exporter.otlp.proto.http.trace_exporter", 0) + 1
    )
    pipeline.shutdown(0.5)
    assert exporter_logs.held() == before


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _refused(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.parametrize("metrics", ["export", "prometheus"])
def test_nothing_collects_a_metric_reader_before_the_provider_has_registered_it(tmp_path, monkeypatch, caplog, metrics):
    """Issue 18: a reader collected before its MeterProvider registered it logs an SDK warning (and loses the collection).

    The provider's constructor, which registers the readers, is held until the test opens it: a
    slow registration, as on a loaded machine. Nothing the pipeline has started by then may
    be able to collect: no thread of the pipeline runs, and no scrape endpoint answers.
    """
    if metrics == "prometheus":
        require_prometheus_extra()
    entered, release = threading.Event(), threading.Event()

    class SlowToRegister(MeterProvider):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            entered.set()
            assert release.wait(60)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(pipeline, "MeterProvider", SlowToRegister)
    port = _free_port()
    settings = (
        {"export": f"file:{tmp_path / 't.jsonl'}", "metric_interval_ms": 1}
        if metrics == "export"
        else {"export": "none", "metrics": f"prometheus:127.0.0.1:{port}"}
    )
    before = set(threading.enumerate())
    built: list[Any] = []
    assembling = threading.Thread(target=lambda: built.append(install(resolve(environ={}, **settings))), name="assembling")
    with caplog.at_level(logging.WARNING):
        assembling.start()
        try:
            assert entered.wait(30)
            started = {t.name for t in set(threading.enumerate()) - before} - {"assembling"}
            # OpenTelemetry SDK 1.45.0's resource detection shuts its executor down without waiting, so
            # its idle worker may still be ending here; it runs detectors and can collect nothing.
            started = {name for name in started if not name.startswith("ThreadPoolExecutor-")}
            assert started == set()  # the old order had the SDK's ticker (and the endpoint's server) running here
            assert _refused(port)
        finally:
            release.set()
        assembling.join(30)
        (built_pipeline,) = built
        built_pipeline.meter_provider.get_meter("m").create_counter("agent.context_window.snapshots").add(1)
        if metrics == "export":
            assert built_pipeline.flush(10)
        else:
            import httpx

            page = httpx.get(built_pipeline.metrics_endpoint.url, timeout=10).text
            assert "agent_context_window_snapshots_total{" in page
        built_pipeline.shutdown(10)
    assert not [r.getMessage() for r in caplog.records if "Cannot call collect" in r.getMessage()]
    if metrics == "export":
        assert '"name":"agent.context_window.snapshots"' in (tmp_path / "t.jsonl").read_text()


@pytest.mark.parametrize(
    ("variable", "value", "own"),
    [
        (None, None, True),
        ("OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", "16", False),
        ("OTEL_SPAN_EVENT_COUNT_LIMIT", "2", False),
        ("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "64", False),
        ("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "64", False),
        ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio", True),  # the SDK's own: reads no attributes
        ("OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", "1000", True),
    ],
)
def test_cws_events_skip_the_sdk_only_where_its_limits_would_keep_them_whole(tmp_path, monkeypatch, variable, value, own):
    if variable is not None:
        monkeypatch.setenv(variable, value)
    file_pipeline = install(resolve(environ={}, export=f"file:{tmp_path / 't.jsonl'}"))
    try:
        assert (file_pipeline.own_events is file_pipeline.span_processor) is own
        assert own is (file_pipeline.own_events is not None)
    finally:
        file_pipeline.shutdown(timeout=5)
    otlp_pipeline = install(resolve(environ={}, export="otlp"))  # the SDK's batcher and OTLP exporter: never
    try:
        assert otlp_pipeline.own_events is None
    finally:
        otlp_pipeline.shutdown(timeout=5)


def test_a_sampler_that_may_read_attributes_keeps_the_sdk_s_way():
    """A call span starts without its attributes only under the SDK's own samplers, which read none at the start."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, Sampler, SamplingResult, TraceIdRatioBased

    from cw_middleware._embedded.pipeline import _kept_whole

    class ByAttribute(Sampler):
        def should_sample(self, parent_context, trace_id, name, kind=None, attributes=None, links=None, trace_state=None):
            return SamplingResult(ALWAYS_ON.should_sample(parent_context, trace_id, name).decision)

        def get_description(self) -> str:
            return "by attribute"

    assert _kept_whole(ParentBased(ALWAYS_ON)) and _kept_whole(TraceIdRatioBased(0.5))
    assert not _kept_whole(ByAttribute()) and not _kept_whole(ParentBased(ByAttribute()))
