"""OTLP over the network: the exporters the standard OTEL_EXPORTER_OTLP_* variables configure, guarded.

``export="otlp"`` sends plain OTLP to the endpoint those variables name (http/protobuf by
default, grpc with OTEL_EXPORTER_OTLP_PROTOCOL=grpc). Each exporter is wrapped so that an
exception becomes FAILURE, failures are the destination's `Health` (one warning per fault),
the exporter's own log lines made meanwhile are held back (`inside_export`), and a forked
child's copy sends nothing (the child builds a pipeline of its own).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from .._kernel.config import Config
from .health import Health, inside_export


def otlp_exporters(config: Config) -> tuple[SpanExporter, MetricExporter, str]:
    """OTLP exporters for ``config.otlp_protocol`` (the endpoint, headers and TLS are read by the exporters themselves,
    from the standard OTEL_EXPORTER_OTLP_* variables); and where they send, as cw's messages name it."""
    protocol = config.otlp_protocol
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans

        spans: SpanExporter = GrpcSpans()
        metric: MetricExporter = GrpcMetrics()
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans

        spans, metric = HttpSpans(), HttpMetrics()
    where = f"OTLP ({protocol}) {config.otlp_endpoint or 'default endpoint'}"
    return spans, metric, where


def otlp_log_exporter(config: Config) -> Any:
    if config.otlp_protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
    else:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter  # type: ignore[assignment]
    return OTLPLogExporter()


class _Guard:
    """What cw's OTLP exporter wrappers share: a destination's health, its logs held back, the owning process."""

    def __init__(self, health: Health) -> None:
        self.health = health
        self._pid = os.getpid()

    @property
    def forked_copy(self) -> bool:
        return os.getpid() != self._pid  # the parent's exporter, copied by fork: never used in the child

    def export(self, signal: str, send: Callable[[], Any], success: Any) -> bool:
        """Run one export of ``signal`` ("span", "metric", "log"); failures are the destination's (said once), never raised."""
        try:
            with inside_export():
                ok = send() == success
            why = f"{signal} export failed; the exporter's own lines: logger cw_middleware.export at DEBUG"
        except Exception as exc:  # noqa: BLE001
            ok, why = False, f"{signal} export: {type(exc).__name__}"
        if ok:
            self.health.succeeded()
        else:
            self.health.failed(why)
        return ok

    def quietly(self, call: Callable[[], Any], default: Any = None) -> Any:
        try:
            with inside_export():
                return call()
        except Exception:  # noqa: BLE001
            return default


class GuardedSpanExporter(SpanExporter):
    """Wraps a network exporter: exceptions become FAILURE, failures one warning per fault."""

    def __init__(self, inner: SpanExporter, health: Health) -> None:
        self._inner, self._guard = inner, _Guard(health)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._guard.forked_copy:
            return SpanExportResult.SUCCESS
        ok = self._guard.export("span", lambda: self._inner.export(spans), SpanExportResult.SUCCESS)
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        if not self._guard.forked_copy:
            self._guard.quietly(self._inner.shutdown)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self._guard.quietly(lambda: self._inner.force_flush(timeout_millis), False))


class GuardedMetricExporter(MetricExporter):
    def __init__(self, inner: MetricExporter, health: Health) -> None:
        super().__init__(
            preferred_temporality=getattr(inner, "_preferred_temporality", None),
            preferred_aggregation=getattr(inner, "_preferred_aggregation", None),
        )
        self._inner, self._guard = inner, _Guard(health)

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        if self._guard.forked_copy:
            return MetricExportResult.SUCCESS
        ok = self._guard.export(
            "metric", lambda: self._inner.export(metrics_data, timeout_millis=timeout_millis), MetricExportResult.SUCCESS
        )
        return MetricExportResult.SUCCESS if ok else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return bool(self._guard.quietly(lambda: self._inner.force_flush(timeout_millis), False))

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        if not self._guard.forked_copy:
            self._guard.quietly(lambda: self._inner.shutdown(timeout_millis=timeout_millis))


def guarded_log_exporter(inner: Any, health: Health) -> Any:
    """The same guard for an OTLP LogRecordExporter (logs SDK imported only when asked)."""
    from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult

    class GuardedLogExporter(LogRecordExporter):
        def __init__(self) -> None:
            self._guard = _Guard(health)

        def export(self, batch: Sequence[Any]) -> LogRecordExportResult:
            if self._guard.forked_copy:
                return LogRecordExportResult.SUCCESS
            ok = self._guard.export("log", lambda: inner.export(batch), LogRecordExportResult.SUCCESS)
            return LogRecordExportResult.SUCCESS if ok else LogRecordExportResult.FAILURE

        def shutdown(self) -> None:
            if not self._guard.forked_copy:
                self._guard.quietly(inner.shutdown)

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return bool(self._guard.quietly(lambda: inner.force_flush(timeout_millis), False))

    return GuardedLogExporter()
