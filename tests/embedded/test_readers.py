"""Metric readers (cw_middleware/_embedded/readers.py): the series limit where the installed SDK can apply it, else said.

opentelemetry-sdk takes ``cardinality_limits`` on its readers from 1.45.2 on; on 1.44.0 and
1.45.1 passing it was a TypeError that left telemetry off (issue 17 item 2). The expectation
here comes from the installed SDK itself (its reader's signature), so the same test checks
either side of that line in whichever environment it runs.
"""

from __future__ import annotations

import inspect
import json
import logging
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from servers import free_port, require_prometheus_extra

from cw_middleware._embedded import health, install, readers
from cw_middleware._kernel.config import resolve
from cw_middleware._kernel.log import RateLimitedLog


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(health, "export_warnings", RateLimitedLog())


SDK_LIMITS = "cardinality_limits" in inspect.signature(PeriodicExportingMetricReader).parameters


class ReaderWithoutLimits(PeriodicExportingMetricReader):
    """PeriodicExportingMetricReader as opentelemetry-sdk 1.44.0 and 1.45.1 define it."""

    def __init__(self, exporter: Any, export_interval_millis: Any = None, export_timeout_millis: Any = None) -> None:
        super().__init__(exporter, export_interval_millis, export_timeout_millis)


def _series_exported(tmp_path, **settings: Any) -> list[dict[str, Any]]:
    """Attribute sets of one counter given ten of them, as the pipeline exported it to the file."""
    path = tmp_path / "t.jsonl"
    pipeline = install(resolve(environ={}, export=f"file:{path}", metric_series_limit=3, **settings))
    counter = pipeline.meter_provider.get_meter("m").create_counter("agent.context_window.snapshots")
    for i in range(10):
        counter.add(1, {"agent.stage.id": f"s{i}"})
    assert pipeline.flush(10)
    pipeline.shutdown(10)
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.startswith('{"resourceMetrics"')]
    points = lines[-1]["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["sum"]["dataPoints"]
    return [{a["key"]: next(iter(a["value"].values())) for a in p.get("attributes", [])} for p in points]


def _limit_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "cannot limit metric series" in r.getMessage()]


def test_the_series_limit_holds_where_the_installed_sdk_can_apply_it(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="cw_middleware"):
        series = _series_exported(tmp_path, metric_run_labels=True)
    if SDK_LIMITS:
        assert len(series) == 4 and {"otel.metric.overflow": True} in series  # three, then one overflow series
        assert _limit_warnings(caplog) == []
    else:
        assert len(series) == 10
        assert len(_limit_warnings(caplog)) == 1


def test_a_reader_without_the_argument_is_built_without_it_and_one_warning_says_so(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(readers, "PeriodicExportingMetricReader", ReaderWithoutLimits)
    assert readers.takes_series_limits(ReaderWithoutLimits) is False
    with caplog.at_level(logging.WARNING, logger="cw_middleware"):
        series = _series_exported(tmp_path, metric_run_labels=True)  # no TypeError: telemetry stays on
        assert len(series) == 10
        _series_exported(tmp_path)
    (warning,) = _limit_warnings(caplog)
    assert "metric_series_limit=3 is not applied" in warning and "run/stage adds series without bound" in warning


def test_without_run_labels_or_a_limit_asked_for_nothing_is_said(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(readers, "PeriodicExportingMetricReader", ReaderWithoutLimits)
    path = tmp_path / "t.jsonl"
    with caplog.at_level(logging.WARNING, logger="cw_middleware"):
        install(resolve(environ={}, export=f"file:{path}")).shutdown(10)
    assert _limit_warnings(caplog) == []


def test_the_scrape_endpoint_serves_with_a_reader_without_the_argument(monkeypatch):
    require_prometheus_extra()
    import opentelemetry.exporter.prometheus as prometheus_exporter

    class PrometheusReaderWithoutLimits(prometheus_exporter.PrometheusMetricReader):
        def __init__(self, disable_target_info: bool = False, prefix: str = "", *, registry: Any) -> None:
            super().__init__(disable_target_info, prefix, registry=registry)

    monkeypatch.setattr(prometheus_exporter, "PrometheusMetricReader", PrometheusReaderWithoutLimits)
    pipeline = install(resolve(environ={}, export="none", metrics=f"prometheus:127.0.0.1:{free_port()}"))
    try:
        assert isinstance(pipeline.metrics_endpoint.reader, PrometheusReaderWithoutLimits)
        pipeline.meter_provider.get_meter("m").create_counter("agent.context_window.snapshots").add(1)
        assert "agent_context_window_snapshots_total{" in httpx.get(pipeline.metrics_endpoint.url, timeout=10).text
    finally:
        pipeline.shutdown(10)
