"""Exporter health and log muting (cw_middleware/_embedded/health.py): one warning a fault, exporters' lines held back."""

from __future__ import annotations

import logging
import threading

import pytest

from cw_middleware._embedded import health
from cw_middleware._embedded.health import ExporterLogs, Health, inside_export
from cw_middleware._kernel.log import RateLimitedLog


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(health, "export_warnings", RateLimitedLog())


def _cw_lines(caplog, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "cw_middleware" and r.levelno == level]


def test_a_fault_is_said_once_however_many_exports_fail(caplog):
    destination = Health("collector:4318", "cannot export telemetry to collector:4318")
    with caplog.at_level(logging.INFO, logger="cw_middleware"):
        for _ in range(50):
            destination.failed("ConnectionRefusedError")
        assert destination.failing
        destination.succeeded()
        destination.succeeded()  # working on: nothing more to say
    (warning,) = _cw_lines(caplog, logging.WARNING)
    assert "cannot export telemetry to collector:4318 (ConnectionRefusedError)" in warning
    assert "the LLM calls proceed" in warning
    assert _cw_lines(caplog, logging.INFO) == [
        "cw_middleware: telemetry export to collector:4318 works again (50 exports failed)"
    ]
    assert not destination.failing


def test_a_flapping_destination_is_warned_about_at_most_once_a_minute(caplog):
    destination = Health("t.jsonl", "cannot write telemetry to t.jsonl")
    with caplog.at_level(logging.WARNING, logger="cw_middleware"):
        for _ in range(3):
            destination.failed("OSError")
            destination.succeeded()
    assert len(_cw_lines(caplog, logging.WARNING)) == 1


class _FakeExporter:
    """Stands for an OTLP exporter: what matters is the module its class is defined in."""


_FakeExporter.__module__ = "opentelemetry.exporter.fake.exporter"
EXPORTER_LOGGER = logging.getLogger("opentelemetry.exporter.fake.exporter")


def test_exporter_lines_inside_cws_export_go_to_debug_and_the_applications_stay(caplog):
    logs = ExporterLogs()
    hold = logs.hold([_FakeExporter()])
    try:
        with caplog.at_level(logging.DEBUG):
            with inside_export():
                EXPORTER_LOGGER.warning("Transient error, retrying in 1s")
            EXPORTER_LOGGER.warning("the application's own exporter failed")  # not inside cw's export
    finally:
        hold.release()
    lines = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert ("opentelemetry.exporter.fake.exporter", "WARNING", "the application's own exporter failed") in lines
    assert (
        "cw_middleware.export",
        "DEBUG",
        "WARNING opentelemetry.exporter.fake.exporter: Transient error, retrying in 1s",
    ) in lines
    assert not [line for line in lines if line[0] == "opentelemetry.exporter.fake.exporter" and "retrying" in line[2]]


def test_the_filter_stays_while_any_pipeline_holds_the_logger_and_goes_with_the_last():
    logs = ExporterLogs()
    first, second = logs.hold([_FakeExporter()]), logs.hold([_FakeExporter()])
    assert logs.held()["opentelemetry.exporter.fake.exporter"] == 2
    assert logs.held()["opentelemetry.exporter.otlp.common.http"] == 2  # the HTTP exporters' shared client, always
    first.release()
    first.release()  # a second release takes nothing
    assert logs in EXPORTER_LOGGER.filters and logs.held()["opentelemetry.exporter.fake.exporter"] == 1
    second.release()
    assert logs not in EXPORTER_LOGGER.filters and logs.held() == {}


def test_no_exporters_hold_nothing():
    logs = ExporterLogs()
    logs.hold([]).release()
    assert logs.held() == {}


def test_inside_export_is_per_thread():
    seen: list[bool] = []
    logs = ExporterLogs()
    record = logging.LogRecord("opentelemetry.exporter.fake.exporter", logging.WARNING, __file__, 1, "retry", None, None)
    with inside_export():
        other = threading.Thread(target=lambda: seen.append(logs.filter(record)))
        other.start()
        other.join()
        seen.append(logs.filter(record))
    assert seen == [True, False]  # passed on the other thread, held back on the exporting one


def test_a_released_logger_keeps_the_filter_while_an_export_still_runs(monkeypatch, caplog):
    """A pipeline stopped within its exit timeout leaves a stuck exporter retrying on its own thread (the fault
    matrix's refused gRPC collector): its lines stay held back until that export ends, then the filter comes off."""
    logs = ExporterLogs()
    monkeypatch.setattr(health, "exporter_logs", logs)  # the instance inside_export reports to
    hold = logs.hold([_FakeExporter()])
    inside, retry = threading.Event(), threading.Event()

    def stuck_export() -> None:
        with inside_export():
            inside.set()
            assert retry.wait(10)
            EXPORTER_LOGGER.warning("Transient error, retrying in 1s")

    exporter = threading.Thread(target=stuck_export)
    with caplog.at_level(logging.DEBUG):
        exporter.start()
        assert inside.wait(10)
        hold.release()  # the pipeline's bounded exit gave up waiting for it
        assert logs in EXPORTER_LOGGER.filters
        retry.set()
        exporter.join(10)
    lines = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert not [line for line in lines if line[0] == "opentelemetry.exporter.fake.exporter"]
    held_back = "WARNING opentelemetry.exporter.fake.exporter: Transient error, retrying in 1s"
    assert ("cw_middleware.export", "DEBUG", held_back) in lines
    assert logs not in EXPORTER_LOGGER.filters and logs.held() == {}  # off once no export of cw's runs
