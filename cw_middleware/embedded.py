"""The embedded telemetry pipeline: the only user of the OpenTelemetry SDK.

``export="file:PATH"`` appends OTLP JSON lines to PATH: one export batch a line,
``{"resourceSpans":[...]}`` or ``{"resourceMetrics":[...]}``, the format of the
OpenTelemetry file exporter spec and of the Collector's ``file`` exporter, so one
reader serves both. Traces and metrics share the one file the user names; every
line starts with its signal's key, so a trace reader skips metric lines by
their first bytes. ``export="otlp"`` sends plain OTLP to the endpoint named by
the standard OTEL_EXPORTER_OTLP_* variables (http/protobuf by default, grpc
with OTEL_EXPORTER_OTLP_PROTOCOL=grpc).

``metrics="prometheus:HOST:PORT"`` sends metrics to a scrape endpoint instead: an
``opentelemetry-exporter-prometheus`` reader behind prometheus_client's HTTP server,
bound to HOST only, started by ``install`` and stopped by its shutdown (never a port
opened unless asked). It serves its own registry, not prometheus_client's global one,
so an application's own Prometheus metrics are neither mixed in nor disturbed. Spans
(and log events) still go where ``export`` says.

Export never reaches the call path: spans go through a bounded
``BatchSpanProcessor`` (full queue: dropped, the SDK warns) and metrics through a
``PeriodicExportingMetricReader``; the file is written on their worker threads.
A failing write or a dead collector logs one warning per minute and reports
FAILURE to the SDK; nothing raises into the application.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from opentelemetry import trace
from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    MeterProvider,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics import _Gauge as Gauge  # the SDK's synchronous gauge (its public name is the API's)
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricReader,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from ._log import RateLimitedLog
from .config import Config

logger = logging.getLogger("cw_middleware")

_ID_KEYS = ("traceId", "spanId", "parentSpanId")


_log = RateLimitedLog()  # a dead collector must not flood the application's log
_warn = _log.warning


# ---------------------------------------------------------------- OTLP JSON encoding


def _hex_ids(node: Any) -> None:
    """protobuf's JSON mapping writes bytes as base64; OTLP JSON wants trace and span ids in hex."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_KEYS and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)


def _to_json_line(message: Any) -> bytes:
    from google.protobuf.json_format import MessageToDict

    doc = MessageToDict(message, use_integers_for_enums=True)
    _hex_ids(doc)
    return (json.dumps(doc, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8")


def encode_spans_json(spans: Sequence[ReadableSpan]) -> bytes:
    """One OTLP JSON line ``{"resourceSpans":[...]}`` for a batch of finished spans."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return _to_json_line(encode_spans(spans))


def encode_logs_json(batch: Sequence[Any]) -> bytes:
    """One OTLP JSON line ``{"resourceLogs":[...]}`` (log-based snapshot events)."""
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs

    return _to_json_line(encode_logs(batch))


def encode_metrics_json(data: MetricsData) -> bytes:
    """One OTLP JSON line ``{"resourceMetrics":[...]}``."""
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics

    return _to_json_line(encode_metrics(data))


class _JsonLinesFile:
    """Appends whole lines to one file; shared by the span and the metric exporter.

    The file is opened per write (append mode, one ``write`` per line) so rotation
    and deletion by other tools are harmless and no descriptor leaks at exit.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()

    def append(self, line: bytes) -> bool:
        try:
            with self._lock:
                folder = os.path.dirname(self.path)
                if folder:
                    os.makedirs(folder, exist_ok=True)
                with open(self.path, "ab") as f:
                    f.write(line)
            return True
        except OSError as exc:
            _warn(
                "file",
                f"cw_middleware: cannot write telemetry to {self.path} ({type(exc).__name__}: {exc.strerror}); "
                "snapshots are not exported, the LLM calls proceed",
            )
            return False


class OtlpJsonFileSpanExporter(SpanExporter):
    def __init__(self, path: str, sink: Optional[_JsonLinesFile] = None) -> None:
        self._file = sink or _JsonLinesFile(path)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            line = encode_spans_json(spans)
        except Exception as exc:  # noqa: BLE001 - never into the SDK's worker, never into the app
            _warn("encode", f"cw_middleware: could not encode spans ({type(exc).__name__})")
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS if self._file.append(line) else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class OtlpJsonFileMetricExporter(MetricExporter):
    def __init__(self, path: str, sink: Optional[_JsonLinesFile] = None) -> None:
        super().__init__(preferred_temporality={})
        self._file = sink or _JsonLinesFile(path)

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        try:
            line = encode_metrics_json(metrics_data)
        except Exception as exc:  # noqa: BLE001
            _warn("encode", f"cw_middleware: could not encode metrics ({type(exc).__name__})")
            return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS if self._file.append(line) else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


def _file_log_exporter(sink: _JsonLinesFile) -> Any:
    """A LogRecordExporter writing OTLP JSON lines to the shared file (logs SDK imported only when asked)."""
    from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult

    class OtlpJsonFileLogExporter(LogRecordExporter):
        def export(self, batch: Sequence[Any]) -> LogRecordExportResult:
            try:
                line = encode_logs_json(batch)
            except Exception as exc:  # noqa: BLE001
                _warn("encode", f"cw_middleware: could not encode log events ({type(exc).__name__})")
                return LogRecordExportResult.FAILURE
            return LogRecordExportResult.SUCCESS if sink.append(line) else LogRecordExportResult.FAILURE

        def shutdown(self) -> None:
            pass

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    return OtlpJsonFileLogExporter()


def _otlp_log_exporter() -> Any:
    if otlp_protocol() == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
    else:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter  # type: ignore[assignment]
    return OTLPLogExporter()


class _GuardedSpanExporter(SpanExporter):
    """Wraps a network exporter: exceptions become FAILURE and one warning a minute."""

    def __init__(self, inner: SpanExporter, what: str) -> None:
        self._inner, self._what = inner, what

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception as exc:  # noqa: BLE001
            result = SpanExportResult.FAILURE
            _warn("otlp-spans", f"cw_middleware: span export to {self._what} failed ({type(exc).__name__})")
        if result is not SpanExportResult.SUCCESS:
            _warn("otlp-spans", f"cw_middleware: span export to {self._what} failed; the LLM calls proceed")
        return result

    def shutdown(self) -> None:
        try:
            self._inner.shutdown()
        except Exception:  # noqa: BLE001
            pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        try:
            return self._inner.force_flush(timeout_millis)
        except Exception:  # noqa: BLE001
            return False


class _GuardedMetricExporter(MetricExporter):
    def __init__(self, inner: MetricExporter, what: str) -> None:
        super().__init__(
            preferred_temporality=getattr(inner, "_preferred_temporality", None),
            preferred_aggregation=getattr(inner, "_preferred_aggregation", None),
        )
        self._inner, self._what = inner, what

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        try:
            result = self._inner.export(metrics_data, timeout_millis=timeout_millis)
        except Exception as exc:  # noqa: BLE001
            result = MetricExportResult.FAILURE
            _warn("otlp-metrics", f"cw_middleware: metric export to {self._what} failed ({type(exc).__name__})")
        if result is not MetricExportResult.SUCCESS:
            _warn("otlp-metrics", f"cw_middleware: metric export to {self._what} failed; the LLM calls proceed")
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        try:
            return self._inner.force_flush(timeout_millis)
        except Exception:  # noqa: BLE001
            return False

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        try:
            self._inner.shutdown(timeout_millis=timeout_millis)
        except Exception:  # noqa: BLE001
            pass


# ---------------------------------------------------------------- OTLP over the network


def otlp_protocol(environ: Optional[dict[str, str]] = None) -> str:
    env = os.environ if environ is None else environ
    return (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip()


def _otlp_exporters() -> tuple[SpanExporter, MetricExporter, str]:
    """OTLP exporters configured by the standard OTEL_EXPORTER_OTLP_* variables (read by the exporters)."""
    protocol = otlp_protocol()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans

        spans: SpanExporter = GrpcSpans()
        metric: MetricExporter = GrpcMetrics()
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans

        spans, metric = HttpSpans(), HttpMetrics()
    where = f"OTLP ({protocol}) {os.environ.get('OTEL_EXPORTER_OTLP_ENDPOINT', 'default endpoint')}"
    return spans, metric, where


# ---------------------------------------------------------------- the scrape endpoint


class ScrapeEndpoint:
    """Prometheus text format on HOST:PORT, from a PrometheusMetricReader with a registry of its own."""

    def __init__(self, host: str, port: int, reader: MetricReader, registry: Any) -> None:
        from prometheus_client import start_http_server

        self.reader = reader
        # prometheus_client picks the address family from HOST; nothing else is bound.
        self._httpd, self._thread = start_http_server(port, addr=host, registry=registry)
        bound = self._httpd.server_address
        self.address: tuple[str, int] = (str(bound[0]), int(bound[1]))

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}/metrics" if ":" in host else f"http://{host}:{port}/metrics"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5.0)


def _series_limits(limit: int) -> dict[type, int]:
    """The same cardinality limit for every instrument class (the SDK's default is 2000 each)."""
    return {
        cls: limit
        for cls in (Counter, UpDownCounter, Histogram, Gauge, ObservableCounter, ObservableUpDownCounter, ObservableGauge)
    }


def _scrape_endpoint(config: Config) -> Optional[ScrapeEndpoint]:
    """Start the endpoint of ``metrics="prometheus:HOST:PORT"``; a port that cannot be bound logs and gives None.

    A busy port is not a bad setting (several worker processes of one application share
    one environment): the application runs on, and the other telemetry too.
    """
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry

    assert config.metrics_endpoint is not None
    host, port = config.metrics_endpoint
    registry = CollectorRegistry(auto_describe=True)
    reader = PrometheusMetricReader(registry=registry, cardinality_limits=_series_limits(config.metric_series_limit))
    try:
        endpoint = ScrapeEndpoint(host, port, reader, registry)
    except OSError as exc:
        reader.shutdown()
        _warn(
            "metrics-endpoint",
            f"cw_middleware: cannot serve metrics on {host}:{port} ({type(exc).__name__}: {exc.strerror or exc}); "
            "metrics are not exported from this process, the LLM calls proceed",
        )
        return None
    logger.info("cw_middleware: metrics for Prometheus at %s", endpoint.url)
    return endpoint


# ---------------------------------------------------------------- the pipeline


@dataclass
class Pipeline:
    tracer_provider: trace.TracerProvider  # the API's no-op one with export="none"
    meter_provider: MeterProvider
    flush: Callable[[float], bool]
    shutdown: Callable[[], None]
    span_processor: Optional[BatchSpanProcessor]
    logger_provider: Any = None  # only with config.log_events
    metrics_endpoint: Optional[ScrapeEndpoint] = None  # only with metrics="prometheus:..."


def install(
    config: Config,
    span_exporter: Optional[SpanExporter] = None,
    metric_exporter: Optional[MetricExporter] = None,
) -> Pipeline:
    """Providers with exporters for ``config.export`` and ``config.metrics``; the global providers are left alone."""
    resource = Resource.create({"service.name": config.service_name})
    sink = _JsonLinesFile(config.export_path) if config.export_path is not None else None
    where = ""
    otlp_spans: Optional[SpanExporter] = None
    otlp_metrics: Optional[MetricExporter] = None
    wants_export_metrics = config.metrics == "export" and metric_exporter is None
    if config.export == "otlp" and (span_exporter is None or wants_export_metrics):
        otlp_spans, otlp_metrics, where = _otlp_exporters()

    processor: Optional[BatchSpanProcessor] = None
    sdk_tracer: Optional[TracerProvider] = None
    if config.export != "none" or span_exporter is not None:
        if span_exporter is None:
            if sink is not None:
                span_exporter = OtlpJsonFileSpanExporter(sink.path, sink)
            else:
                assert otlp_spans is not None
                span_exporter = _GuardedSpanExporter(otlp_spans, where)
        processor = BatchSpanProcessor(
            span_exporter,
            max_queue_size=config.export_queue_size,
            max_export_batch_size=min(512, config.export_queue_size),
            schedule_delay_millis=config.export_interval_ms,
        )
        sdk_tracer = TracerProvider(resource=resource, shutdown_on_exit=False)  # _setup flushes at exit
        sdk_tracer.add_span_processor(processor)
    tracer_provider: trace.TracerProvider = sdk_tracer if sdk_tracer is not None else trace.NoOpTracerProvider()

    readers: list[MetricReader] = []
    endpoint: Optional[ScrapeEndpoint] = None
    if config.metrics == "export" and (config.export != "none" or metric_exporter is not None):
        if metric_exporter is None:
            if sink is not None:
                metric_exporter = OtlpJsonFileMetricExporter(sink.path, sink)
            else:
                assert otlp_metrics is not None
                metric_exporter = _GuardedMetricExporter(otlp_metrics, where)
        readers.append(
            PeriodicExportingMetricReader(
                metric_exporter,
                export_interval_millis=config.metric_interval_ms,
                cardinality_limits=_series_limits(config.metric_series_limit),
            )
        )
    elif config.metrics_endpoint is not None:
        endpoint = _scrape_endpoint(config)
        if endpoint is not None:
            readers.append(endpoint.reader)
    meter_provider = MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)

    logger_provider = _logger_provider(config, resource) if config.log_events and config.export != "none" else None

    # Only push readers are flushed: a flush of the scrape endpoint's (pull) reader would queue a
    # collection that its next scrape prints as well, every series twice (the OpenTelemetry
    # Prometheus collector emits whatever collections are queued), so MeterProvider.force_flush
    # is not used.
    push_readers = [r for r in readers if endpoint is None or r is not endpoint.reader]

    def flush(timeout: float) -> bool:
        millis = int(timeout * 1000)
        ok = sdk_tracer is None or bool(sdk_tracer.force_flush(millis))
        if logger_provider is not None:
            ok = bool(logger_provider.force_flush(millis)) and ok
        for reader in push_readers:
            ok = bool(reader.force_flush(millis)) and ok
        return ok

    def shutdown() -> None:
        if sdk_tracer is not None:
            sdk_tracer.shutdown()
        meter_provider.shutdown()
        if endpoint is not None:
            endpoint.close()
        if logger_provider is not None:
            logger_provider.shutdown()

    return Pipeline(tracer_provider, meter_provider, flush, shutdown, processor, logger_provider, endpoint)


def _logger_provider(config: Config, resource: Resource) -> Any:
    """Snapshots as log-based events (OTEP 4430 moves span events toward the Logs API)."""
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

    if config.export_path is not None:
        exporter = _file_log_exporter(_JsonLinesFile(config.export_path))
    else:
        exporter = _otlp_log_exporter()
    provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_log_record_processor(
        BatchLogRecordProcessor(
            exporter, max_queue_size=config.export_queue_size, schedule_delay_millis=config.export_interval_ms
        )
    )
    return provider


__all__ = [
    "OtlpJsonFileMetricExporter",
    "OtlpJsonFileSpanExporter",
    "Pipeline",
    "ScrapeEndpoint",
    "encode_metrics_json",
    "encode_spans_json",
    "install",
    "otlp_protocol",
]
