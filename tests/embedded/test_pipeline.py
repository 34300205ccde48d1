"""Pipeline assembly (cw_middleware/embedded/pipeline.py): threads started when needed, flush and shutdown bounded."""

from __future__ import annotations

import socket
import threading
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from cw_middleware.config import resolve
from cw_middleware.embedded import install
from cw_middleware.embedded.health import exporter_logs


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
