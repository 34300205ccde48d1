"""Which telemetry providers a new Runtime gets (`runtime.configure()` asks here).

In order of preference: the ones passed in; the ones the application already
installed globally (never replaced silently); otherwise the embedded pipeline of
``embedded.py`` for ``export="file:..."`` or ``"otlp"`` (and for a scrape endpoint,
``metrics="prometheus:HOST:PORT"``); ``export="none"`` without one uses
the OpenTelemetry API's no-op providers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from opentelemetry import metrics, trace

from .config import Config

logger = logging.getLogger("cw_middleware")


@dataclass(frozen=True)
class Providers:
    tracer_provider: Optional[trace.TracerProvider]
    meter_provider: Optional[metrics.MeterProvider]
    logger_provider: Any = None
    flush: Optional[Callable[[float], bool]] = None  # the embedded pipeline's, when we installed one
    shutdown: Optional[Callable[[], None]] = None


def _app_has_providers() -> bool:
    # The API's proxies stand in until an SDK provider is set globally.
    tp = trace.get_tracer_provider()
    mp = metrics.get_meter_provider()
    return not isinstance(tp, trace.ProxyTracerProvider) or type(mp).__name__ not in ("_ProxyMeterProvider", "NoOpMeterProvider")


def choose_providers(
    cfg: Config,
    tracer_provider: Optional[trace.TracerProvider] = None,
    meter_provider: Optional[metrics.MeterProvider] = None,
    logger_provider: Any = None,
) -> Providers:
    if tracer_provider is not None or meter_provider is not None:
        return Providers(tracer_provider, meter_provider, logger_provider)  # the caller's, as given
    if cfg.export == "none" and cfg.metrics_endpoint is None:
        return Providers(trace.NoOpTracerProvider(), metrics.NoOpMeterProvider(), logger_provider)
    if _app_has_providers():
        # The application owns telemetry: emit into its providers, never replace them.
        logger.info("cw_middleware: using the application's TracerProvider/MeterProvider; export=%s is not installed", cfg.export)
        if cfg.metrics_endpoint is not None:
            logger.warning(
                "cw_middleware: the application has its own MeterProvider, so metrics=%s opens no endpoint; "
                "add a PrometheusMetricReader to that provider instead",
                cfg.metrics,
            )
        return Providers(None, None, logger_provider)
    from .embedded import install

    pipeline = install(cfg)
    return Providers(
        pipeline.tracer_provider,
        pipeline.meter_provider,
        logger_provider or pipeline.logger_provider,
        pipeline.flush,
        pipeline.shutdown,
    )
