"""configure(): resolve settings once and build the process Runtime.

Telemetry providers, in order of preference: the ones passed in; the ones the
application already installed globally (never replaced silently); otherwise the
embedded pipeline of ``embedded.py`` for ``export="file:..."`` or ``"otlp"`` (and for a
scrape endpoint, ``metrics="prometheus:HOST:PORT"``); ``export="none"`` without one uses
the OpenTelemetry API's no-op providers.

Two choices made elsewhere decide where telemetry goes, and each is said once per
process, with no content, as a warning: an application that installed its own
providers receives the snapshots (the ``export`` setting is then not installed),
and ``OTEL_SDK_DISABLED=true``, the user's explicit OpenTelemetry opt-out, is
honoured (nothing is exported; ``cw.snapshots()`` and ``cw.estimate()`` still work).
"""

from __future__ import annotations

import atexit
import logging
import math
import os
from collections.abc import Mapping
from typing import Any, Optional

from opentelemetry import metrics, trace

from . import config as _config
from ._log import RateLimitedLog
from .runtime import Runtime, set_runtime

logger = logging.getLogger("cw_middleware")
_once = RateLimitedLog(interval=math.inf)  # each of these warnings once per process, however often configure() runs


def sdk_disabled(environ: Optional[Mapping[str, str]] = None) -> bool:
    """OTEL_SDK_DISABLED=true: the OpenTelemetry SDK's own switch (spec: "true", case-insensitive)."""
    env = os.environ if environ is None else environ
    return env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


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
    elif sdk_disabled():
        _once.warning(
            "sdk-disabled",
            f"cw_middleware: OTEL_SDK_DISABLED=true switches OpenTelemetry off, so no snapshots are exported "
            f"(export={cfg.export}{f', metrics={cfg.metrics}' if cfg.metrics_endpoint is not None else ''} is not installed); "
            "cw.snapshots() and cw.estimate() still work. Unset it to export.",
        )
        tracer_provider, meter_provider = trace.NoOpTracerProvider(), metrics.NoOpMeterProvider()
    elif _app_has_providers():
        # The application owns telemetry: emit into its providers, never replace them.
        tp, mp = trace.get_tracer_provider(), metrics.get_meter_provider()
        _once.warning(
            "app-providers",
            f"cw_middleware: the application installed its own TracerProvider ({_type_name(tp)}) / MeterProvider "
            f"({_type_name(mp)}): snapshots go to its exporters, export={cfg.export} is not installed; "
            "read them back from that backend",
        )
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


def _type_name(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


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
