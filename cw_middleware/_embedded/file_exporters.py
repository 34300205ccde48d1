"""The file exporters of metrics and log events: OTLP JSON lines appended to the one sink (spans: `span_queue`).

Thin per-signal shells over one sink (as the SDK's own JSON file exporter puts one file
behind per-signal classes). A batch that cannot be encoded is warned about (rate-limited)
and reported as FAILURE to the SDK's processor; nothing raises into its worker. The encoders'
own log lines are held back (`inside_export`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData

from .encode import encode_logs_json, encode_metrics_json
from .health import inside_export, warn
from .sink import JsonLinesFile


class OtlpJsonFileMetricExporter(MetricExporter):
    def __init__(self, path: str, sink: Optional[JsonLinesFile] = None) -> None:
        super().__init__(preferred_temporality={})
        self._file = sink or JsonLinesFile(path)

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        try:
            with inside_export():
                line = encode_metrics_json(metrics_data)
        except Exception as exc:  # noqa: BLE001
            warn("encode", f"cw_middleware: could not encode metrics ({type(exc).__name__})")
            return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS if self._file.append(line) else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


def file_log_exporter(sink: JsonLinesFile) -> Any:
    """A LogRecordExporter writing OTLP JSON lines to the shared file (logs SDK imported only when asked)."""
    from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult

    class OtlpJsonFileLogExporter(LogRecordExporter):
        def export(self, batch: Sequence[Any]) -> LogRecordExportResult:
            try:
                with inside_export():
                    line = encode_logs_json(batch)
            except Exception as exc:  # noqa: BLE001
                warn("encode", f"cw_middleware: could not encode log events ({type(exc).__name__})")
                return LogRecordExportResult.FAILURE
            return LogRecordExportResult.SUCCESS if sink.append(line) else LogRecordExportResult.FAILURE

        def shutdown(self) -> None:
            pass

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    return OtlpJsonFileLogExporter()
