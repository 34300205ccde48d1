"""Pipeline assembly: providers with exporters for ``config.export`` and ``config.metrics``, flushed and stopped within bounds.

Export never reaches the call path: spans go through a bounded batching processor (full
queue: dropped, counted, said once a minute), for the file cw's own `CompactSpanProcessor`
and for OTLP the SDK's ``BatchSpanProcessor``; metrics through a push reader collected on a
worker (`PeriodicCollection`) or, with ``metrics="prometheus:HOST:PORT"``, the scrape
endpoint's reader, either collected only once the provider has registered it; log events,
when asked, through the SDK's ``BatchLogRecordProcessor``.
Flush and shutdown run on a `Worker` each that the caller waits for at most its timeout:
the SDK's ``BatchSpanProcessor.force_flush`` ignores its timeout and exports on the calling
thread behind a stuck export, and a metric flush waits on the same file. Nothing raises
into the application. The global providers are left alone.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, MetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased

from .._kernel.config import Config, resolve_read
from .._kernel.worker import Worker
from .file_exporters import OtlpJsonFileMetricExporter, file_log_exporter
from .health import Health, Hold, exporter_logs
from .otlp import GuardedMetricExporter, GuardedSpanExporter, guarded_log_exporter, otlp_exporters, otlp_log_exporter
from .readers import PeriodicCollection, push_reader
from .scrape import ScrapeEndpoint
from .sink import JsonLinesFile
from .span_queue import CompactSpanProcessor


class Pipeline:
    """The embedded telemetry of one process: its providers, and how to flush, stop and rebuild them after a fork.

    ``tracer_provider`` is the API's no-op one with ``export="none"``; ``logger_provider``
    exists only with ``config.log_events``, ``metrics_endpoint`` only with
    ``metrics="prometheus:..."``; ``health`` is the destination's (the file's or the OTLP
    endpoint's). A span or metric exporter passed in replaces the one ``config.export``
    names (tests, benchmarks).
    """

    def __init__(
        self, config: Config, span_exporter: Optional[SpanExporter] = None, metric_exporter: Optional[MetricExporter] = None
    ) -> None:
        self.config = config
        self._given = (span_exporter, metric_exporter)
        self._resource = Resource.create({"service.name": config.service_name})
        # The file's index (the readers' cache) is extended as lines are written: a query on it reads no line it
        # does not need (_readback/index_append.py).
        index_dir = resolve_read().index_dir if config.export_path is not None else None
        self._sink = JsonLinesFile(config.export_path, index_dir) if config.export_path is not None else None
        self.health: Optional[Health] = self._sink.health if self._sink is not None else None
        otlp_spans: Optional[SpanExporter] = None
        otlp_metrics: Optional[MetricExporter] = None
        wants_export_metrics = config.metrics == "export" and metric_exporter is None
        if config.export == "otlp" and (span_exporter is None or wants_export_metrics or config.log_events):
            otlp_spans, otlp_metrics, where = otlp_exporters(config)
            self.health = Health(where, f"cannot export telemetry to {where}")
        self._holds: list[Hold] = [
            exporter_logs.hold((e for e in (otlp_spans, otlp_metrics) if e is not None), encoders=config.export != "none")
        ]

        self.span_processor = self._span_processor(span_exporter, otlp_spans)
        self._sdk_tracer: Optional[TracerProvider] = None
        if self.span_processor is not None:
            self._sdk_tracer = TracerProvider(resource=self._resource, shutdown_on_exit=False)  # the Runtime closes it
            self._sdk_tracer.add_span_processor(self.span_processor)
        self.tracer_provider: trace.TracerProvider = (
            self._sdk_tracer if self._sdk_tracer is not None else trace.NoOpTracerProvider()
        )
        # cw's snapshot events and a call's attributes at its end go straight into the file's records where nothing but
        # the file sees the spans and the SDK's limits would keep them whole (`CompactSpanProcessor.end_with`).
        self.own_events: Optional[CompactSpanProcessor] = (
            self.span_processor
            if isinstance(self.span_processor, CompactSpanProcessor)
            and self._sdk_tracer is not None
            and _kept_whole(self._sdk_tracer.sampler)
            else None
        )

        self.metrics_endpoint: Optional[ScrapeEndpoint] = None
        readers = self._metric_readers(metric_exporter, otlp_metrics)
        self.meter_provider = MeterProvider(resource=self._resource, metric_readers=readers, shutdown_on_exit=False)
        # Only now that the provider has registered the readers may anything collect them (issue 18).
        if self.metrics_endpoint is not None and not self.metrics_endpoint.serve():
            # The port is taken: a provider without the endpoint's reader, which nothing would scrape.
            self.meter_provider.shutdown()
            self.metrics_endpoint, readers = None, []
            self.meter_provider = MeterProvider(resource=self._resource, shutdown_on_exit=False)
        # Only push readers are collected periodically and flushed: a flush of the scrape endpoint's
        # (pull) reader would queue a collection that its next scrape prints as well, every series
        # twice (the OpenTelemetry Prometheus collector emits whatever collections are queued), so
        # MeterProvider.force_flush is not used.
        endpoint_reader = self.metrics_endpoint.reader if self.metrics_endpoint is not None else None
        self._push_readers = [r for r in readers if r is not endpoint_reader]
        self._collection = PeriodicCollection(self._push_readers, config.metric_interval_ms)
        self._collection.start()

        self.logger_provider: Any = self._logger_provider() if config.log_events and config.export != "none" else None
        self._flusher = Worker("cw-flush", max_jobs=1)
        self._stopper = Worker("cw-shutdown", max_jobs=1)

    # ------------------------------------------------------------ assembly

    def _span_processor(self, given: Optional[SpanExporter], otlp: Optional[SpanExporter]) -> Optional[SpanProcessor]:
        config = self.config
        if config.export == "none" and given is None:
            return None
        batch = min(512, config.export_queue_size)
        if given is None and self._sink is not None:
            return CompactSpanProcessor(
                self._sink,
                max_queue_size=config.export_queue_size,
                max_export_batch_size=batch,
                schedule_delay_millis=config.export_interval_ms,
            )
        if given is None:
            assert otlp is not None and self.health is not None
            given = GuardedSpanExporter(otlp, self.health)
        return BatchSpanProcessor(
            given,
            max_queue_size=config.export_queue_size,
            max_export_batch_size=batch,
            schedule_delay_millis=config.export_interval_ms,
        )

    def _metric_readers(self, given: Optional[MetricExporter], otlp: Optional[MetricExporter]) -> list[MetricReader]:
        config = self.config
        if config.metrics == "export" and (config.export != "none" or given is not None):
            if given is None:
                if self._sink is not None:
                    given = OtlpJsonFileMetricExporter(self._sink.path, self._sink)
                else:
                    assert otlp is not None and self.health is not None
                    given = GuardedMetricExporter(otlp, self.health)
            return [push_reader(given, config)]
        if config.metrics_endpoint is not None:
            self.metrics_endpoint = ScrapeEndpoint(config)  # served once the provider has registered its reader
            return [self.metrics_endpoint.reader]
        return []

    def _logger_provider(self) -> Any:
        """Snapshots as log-based events (OTEP 4430 moves span events toward the Logs API)."""
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

        if self._sink is not None:
            exporter = file_log_exporter(self._sink)
        else:
            assert self.health is not None
            inner = otlp_log_exporter(self.config)
            self._holds.append(exporter_logs.hold([inner]))
            exporter = guarded_log_exporter(inner, self.health)
        provider = LoggerProvider(resource=self._resource, shutdown_on_exit=False)
        provider.add_log_record_processor(
            BatchLogRecordProcessor(
                exporter, max_queue_size=self.config.export_queue_size, schedule_delay_millis=self.config.export_interval_ms
            )
        )
        return provider

    # ------------------------------------------------------------ flush, shutdown, fork

    def flush(self, timeout: float) -> bool:
        """True when everything recorded went out; False (and one warning per fault) otherwise, within ``timeout``."""
        answer = self._flusher.run(lambda: self._flush_now(timeout), timeout)
        if answer is None and self.health is not None:
            self.health.failed(f"no answer within {timeout:g}s: a backend that does not respond, or a write that blocks")
        return bool(answer) and not (self.health is not None and self.health.failing)

    def _flush_now(self, timeout: float) -> bool:
        millis = int(timeout * 1000)
        ok = self._sdk_tracer is None or bool(self._sdk_tracer.force_flush(millis))
        if self.logger_provider is not None:
            ok = bool(self.logger_provider.force_flush(millis)) and ok
        for reader in self._push_readers:
            ok = bool(reader.force_flush(millis)) and ok
        return ok

    def shutdown(self, timeout: Optional[float] = None) -> None:
        """Stop every provider, waiting at most ``timeout`` (``config.exit_timeout``); a stuck exporter is left behind."""
        self._stopper.run(self._shutdown_now, self.config.exit_timeout if timeout is None else timeout)
        self._flusher.close(timeout=0)
        self._stopper.close(timeout=0)
        self._release_logs()

    def _shutdown_now(self) -> bool:
        if self._sdk_tracer is not None:
            self._sdk_tracer.shutdown()
        self._collection.stop()
        self._collection.collect()  # the last collection, which the SDK's own ticker made at shutdown
        self.meter_provider.shutdown()
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()
        if self.logger_provider is not None:
            self.logger_provider.shutdown()
        if self._sink is not None:
            self._sink.close()
        return True

    def _release_logs(self) -> None:
        for hold in self._holds:
            hold.release()

    def for_child(self) -> Pipeline:
        """In a forked child: leave this pipeline to the parent and build one of the child's own.

        The child's copies of the exporters write and send nothing (they check the process);
        the scrape endpoint's listening socket is the parent's, so the child closes its copy
        and serves no metrics (one port, one process).
        """
        exporter_logs.after_fork_in_child()
        self._release_logs()
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close_inherited()
        child_config = dataclasses.replace(self.config, metrics="none") if self.metrics_endpoint is not None else self.config
        return Pipeline(child_config, *self._given)


def install(
    config: Config, span_exporter: Optional[SpanExporter] = None, metric_exporter: Optional[MetricExporter] = None
) -> Pipeline:
    """Providers with exporters for ``config.export`` and ``config.metrics``; the global providers are left alone."""
    return Pipeline(config, span_exporter, metric_exporter)


# A snapshot event holds ~70 attributes, a call's span a few events and ~60 attributes: under the SDK's default limits
# (128 of each, no length limit) the SDK keeps them whole, and so may cw. Smaller limits (OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT,
# OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT, OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT...) are applied by the SDK's own add_event and
# set_attributes.
_KEPT_WHOLE = 128


def _kept_whole(sampler: Any) -> bool:
    """Whether the SDK would keep cw's events and attributes whole, and its sampler (one of the SDK's own, which read
    no attributes: not one named by an entry point) decides without the attributes a call's span starts with."""
    limits = SpanLimits()
    at_least = [limits.max_events, limits.max_event_attributes, limits.max_span_attributes]
    whole = all(n is None or n >= _KEPT_WHOLE for n in at_least) and limits.max_attribute_length is None
    samplers = [sampler, getattr(sampler, "_root", None)] if isinstance(sampler, ParentBased) else [sampler]
    return whole and all(type(s).__module__ == ParentBased.__module__ for s in samplers)
