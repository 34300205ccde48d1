"""The metric readers the pipeline builds: a periodic push reader for an exporter, a pull reader for the scrape endpoint.

Each aggregates at most ``metric_series_limit`` attribute sets a metric (beyond it, one
overflow series), the same limit for every instrument class.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics import _Gauge as Gauge  # the SDK's synchronous gauge (its public name is the API's)
from opentelemetry.sdk.metrics.export import MetricExporter, MetricReader, PeriodicExportingMetricReader


def series_limits(limit: int) -> dict[type, int]:
    """The same cardinality limit for every instrument class (the SDK's default is 2000 each)."""
    return {
        cls: limit
        for cls in (Counter, UpDownCounter, Histogram, Gauge, ObservableCounter, ObservableUpDownCounter, ObservableGauge)
    }


def periodic_reader(exporter: MetricExporter, interval_ms: float, series_limit: int) -> MetricReader:
    """Pushes to ``exporter`` every ``interval_ms``."""
    return PeriodicExportingMetricReader(
        exporter, export_interval_millis=interval_ms, cardinality_limits=series_limits(series_limit)
    )


def prometheus_reader(registry: Any, series_limit: int) -> MetricReader:
    """Collects when ``registry`` is scraped (opentelemetry-exporter-prometheus, imported only when asked)."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader

    return PrometheusMetricReader(registry=registry, cardinality_limits=series_limits(series_limit))
