"""configure(): resolve settings once and build the process Runtime.

Telemetry providers, in order of preference: the ones passed in; the ones the
application already installed globally (never replaced silently); otherwise the
embedded pipeline of ``embedded.py`` for ``export="file:..."`` or ``"otlp"`` (and for a
scrape endpoint, ``metrics="prometheus:HOST:PORT"``); ``export="none"`` without one uses
the OpenTelemetry API's no-op providers.
"""

from __future__ import annotations

import atexit
import logging
from typing import Any, Optional

from opentelemetry import metrics, trace

from . import config as _config
from .runtime import Runtime, set_runtime

logger = logging.getLogger("cw_middleware")


def _app_has_providers() -> bool:
    # The API's proxies stand in until an SDK provider is set globally.
    tp = trace.get_tracer_provider()
    mp = metrics.get_meter_provider()
    return not isinstance(tp, trace.ProxyTracerProvider) or type(mp).__name__ not in ("_ProxyMeterProvider", "NoOpMeterProvider")


def configure(
    *,
    tracer_provider: Optional[trace.TracerProvider] = None,
    meter_provider: Optional[metrics.MeterProvider] = None,
    logger_provider: Any = None,
    **settings: Any,
) -> Runtime:
    """(Re)configure cw_middleware; see `config.resolve` for the settings and their env vars.

    Raises ConfigError for a bad setting. Returns the new Runtime.
    """
    cfg = _config.resolve(**settings)
    flush = shutdown = None
    if tracer_provider is not None or meter_provider is not None:
        pass  # the caller's providers, as given
    elif cfg.export == "none" and cfg.metrics_endpoint is None:
        tracer_provider, meter_provider = trace.NoOpTracerProvider(), metrics.NoOpMeterProvider()
    elif _app_has_providers():
        # The application owns telemetry: emit into its providers, never replace them.
        logger.info("cw_middleware: using the application's TracerProvider/MeterProvider; export=%s is not installed", cfg.export)
        if cfg.metrics_endpoint is not None:
            logger.warning(
                "cw_middleware: the application has its own MeterProvider, so metrics=%s opens no endpoint; "
                "add a PrometheusMetricReader to that provider instead",
                cfg.metrics,
            )
    else:
        from .embedded import install

        pipeline = install(cfg)
        tracer_provider, meter_provider = pipeline.tracer_provider, pipeline.meter_provider
        logger_provider = logger_provider or pipeline.logger_provider
        flush, shutdown = pipeline.flush, pipeline.shutdown
    runtime = Runtime(cfg, tracer_provider, meter_provider, shutdown=shutdown, flush=flush, logger_provider=logger_provider)
    previous = set_runtime(runtime)
    if previous is not None:
        previous.flush()
        previous.shutdown()
    return runtime


def flush(timeout: float = 10.0) -> bool:
    """Export everything recorded so far (CLI, tests, short scripts). True when all went out."""
    from . import runtime as _rt

    current = _rt._runtime
    return True if current is None else current.flush(timeout)


def _flush_at_exit() -> None:
    from .runtime import _runtime

    if _runtime is not None:
        _runtime.flush(5.0)
        _runtime.shutdown()


atexit.register(_flush_at_exit)
