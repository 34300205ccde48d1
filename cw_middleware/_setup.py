"""Which telemetry providers a new Runtime gets (`runtime.configure()` asks here).

In order of preference: the ones passed in; the ones the application already
installed globally (never replaced silently); otherwise the embedded pipeline of
``embedded.py`` for ``export="file:..."`` or ``"otlp"`` (and for a scrape endpoint,
``metrics="prometheus:HOST:PORT"``); ``export="none"`` without one uses
the OpenTelemetry API's no-op providers.

Two choices made elsewhere decide where telemetry goes, and each is said once per
process, with no content, as a warning: an application that installed its own
providers receives the snapshots (the ``export`` setting is then not installed),
and ``OTEL_SDK_DISABLED=true``, the user's explicit OpenTelemetry opt-out, is
honoured (nothing is exported; ``cw.snapshots()`` and ``cw.estimate()`` still work).

The embedded pipeline (and with it the OpenTelemetry SDK, ~40 ms) is imported with the
package, not when the first call configures: a short-lived worker's first LLM call is the
one that must not wait (issue 11, item 5). The read side pays that once at start-up.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from opentelemetry import metrics, trace

from ._log import RateLimitedLog
from .config import Config
from .embedded import install as install_embedded
from .process import PROCESS

logger = logging.getLogger("cw_middleware")


class _SaidOnce(RateLimitedLog):
    """Each of these warnings once per process, however often configure() runs (a part of the process state)."""

    def __init__(self) -> None:
        super().__init__(interval=math.inf)

    def after_fork_in_child(self) -> None:
        pass  # its lock is renewed with every log's; what was said stays said


@dataclass(frozen=True)
class Providers:
    tracer_provider: Optional[trace.TracerProvider]
    meter_provider: Optional[metrics.MeterProvider]
    logger_provider: Any = None
    flush: Optional[Callable[[float], bool]] = None  # the embedded pipeline's, when we installed one
    shutdown: Optional[Callable[..., None]] = None  # shutdown(timeout=None), bounded
    for_child: Optional[Callable[[], Providers]] = None  # after os.fork(): the child's own embedded pipeline


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
    if cfg.sdk_disabled:
        PROCESS.part(_SaidOnce).warning(
            "sdk-disabled",
            f"cw_middleware: OTEL_SDK_DISABLED=true switches OpenTelemetry off, so no snapshots are exported "
            f"(export={cfg.export}{f', metrics={cfg.metrics}' if cfg.metrics_endpoint is not None else ''} is not installed); "
            "cw.snapshots() and cw.estimate() still work. Unset it to export.",
        )
        return Providers(trace.NoOpTracerProvider(), metrics.NoOpMeterProvider(), logger_provider)
    if _app_has_providers():
        # The application owns telemetry: emit into its providers, never replace them.
        tp, mp = trace.get_tracer_provider(), metrics.get_meter_provider()
        PROCESS.part(_SaidOnce).warning(
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
        return Providers(None, None, logger_provider)
    return _embedded(install_embedded(cfg), logger_provider)


def _embedded(pipeline: Any, logger_provider: Any) -> Providers:
    return Providers(
        pipeline.tracer_provider,
        pipeline.meter_provider,
        logger_provider or pipeline.logger_provider,
        pipeline.flush,
        pipeline.shutdown,
        lambda: _embedded(pipeline.for_child(), logger_provider),
    )


def _type_name(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"
