"""The metric readers the pipeline builds, and the periodic collection that drives the push readers.

A push reader (an exporter's) is a ``PeriodicExportingMetricReader`` without a thread of its
own: the SDK's starts its ticker in the reader's constructor, before any ``MeterProvider`` has
registered the reader, and a tick in that window (a loaded machine, a short interval) logs
"Cannot call collect on a MetricReader until it is registered on a MeterProvider"
(issue 18). Here `PeriodicCollection` collects on a `Worker`, started by the pipeline once the
provider holds the reader. A pull reader (the scrape endpoint's) collects when scraped.

Each aggregates at most ``metric_series_limit`` attribute sets a metric (beyond it, one
overflow series), the same limit for every instrument class, where the installed SDK can say
so: readers take ``cardinality_limits`` from opentelemetry-sdk 1.45.2 on (1.44.0 and 1.45.1
have neither that argument nor a View's ``aggregation_cardinality_limit``, and no limit at
all). Each reader class's signature is read once; without the argument the reader is built
without it (series unbounded, as those SDKs always are) and one warning says so when it
matters (run/stage labels on, or a limit asked for).
"""

from __future__ import annotations

import functools
import inspect
import math
import threading
from collections.abc import Sequence
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

from .._kernel.config import Config
from .._kernel.worker import Worker
from .health import warn


def series_limits(limit: int) -> dict[type, int]:
    """The same cardinality limit for every instrument class (the SDK's default is 2000 each)."""
    return {
        cls: limit
        for cls in (Counter, UpDownCounter, Histogram, Gauge, ObservableCounter, ObservableUpDownCounter, ObservableGauge)
    }


@functools.cache
def takes_series_limits(reader_class: type) -> bool:
    """Whether this SDK's ``reader_class`` accepts ``cardinality_limits`` (its signature, read once)."""
    try:
        return "cardinality_limits" in inspect.signature(reader_class).parameters
    except (TypeError, ValueError):
        return False


def _limit_arguments(reader_class: type, config: Config) -> dict[str, Any]:
    if takes_series_limits(reader_class):
        return {"cardinality_limits": series_limits(config.metric_series_limit)}
    if config.metric_run_labels or config.metric_series_limit != Config.metric_series_limit:
        warn(
            "series-limit",
            f"cw_middleware: this opentelemetry-sdk cannot limit metric series (cardinality limits came with 1.45.2), "
            f"so metric_series_limit={config.metric_series_limit} is not applied"
            + (": each run/stage adds series without bound" if config.metric_run_labels else ""),
        )
    return {}


def push_reader(exporter: MetricExporter, config: Config) -> MetricReader:
    """Exports to ``exporter`` when collected: by `PeriodicCollection`, a flush, or its shutdown's last collection."""
    # An infinite interval: the SDK starts no ticker thread (nor an at-fork hook that restarts it).
    return PeriodicExportingMetricReader(
        exporter, export_interval_millis=math.inf, **_limit_arguments(PeriodicExportingMetricReader, config)
    )


def prometheus_reader(registry: Any, config: Config) -> MetricReader:
    """Collects when ``registry`` is scraped (opentelemetry-exporter-prometheus, imported only when asked)."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader

    return PrometheusMetricReader(registry=registry, **_limit_arguments(PrometheusMetricReader, config))


class PeriodicCollection:
    """Collects the push readers every ``interval_ms`` on a worker of its own, from `start` to `stop`.

    One job at a time: each waits the interval (woken early by `stop`), collects, and queues
    the next. `start` must come after the provider registered the readers.
    """

    def __init__(self, readers: Sequence[MetricReader], interval_ms: float) -> None:
        self._readers = list(readers)
        self._interval = interval_ms / 1000
        self._stopped = threading.Event()
        self._worker = Worker("cw-metric-export", max_jobs=1)

    def start(self) -> None:
        if self._readers and self._interval < math.inf:
            self._worker.submit(self._tick)

    def _tick(self) -> None:
        if self._stopped.wait(self._interval):
            return
        self.collect()
        self._worker.submit(self._tick)

    def collect(self) -> None:
        """One collection of every push reader, now (the SDK's ticker's broad catch: never into a thread of ours)."""
        for reader in self._readers:
            try:
                reader.collect()
            except Exception as exc:  # noqa: BLE001 - a failed collection is the telemetry's, never the app's
                warn("metric-collect", f"cw_middleware: metric collection failed ({type(exc).__name__})")

    def stop(self) -> None:
        """No more periodic collections (a running one finishes); the pipeline's shutdown collects once more."""
        self._stopped.set()
        self._worker.close(timeout=0)
