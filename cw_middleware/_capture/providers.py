"""Which telemetry providers a new Runtime gets (`runtime.configure()` asks here).

For each signal (spans with their snapshot events; metrics), in order of preference: the
provider passed to configure(); the one the application installed globally (never replaced
silently); otherwise the embedded pipeline of ``embedded/`` for ``export="file:..."`` or
``"otlp"`` (metrics also for a scrape endpoint, ``metrics="prometheus:HOST:PORT"``);
``export="none"`` without one uses the OpenTelemetry API's no-op providers. So a provider
given for one signal leaves the other to ``export``, not to nothing.

Two choices made elsewhere decide where telemetry goes, and each is said once per
process, with no content, as a warning: providers of the application's (passed for one
signal only, or set globally) receive their signal, and the message names where each
signal goes; and ``OTEL_SDK_DISABLED=true``, the user's explicit OpenTelemetry opt-out, is
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

from .._kernel.config import Config, environment_export
from .._kernel.log import RateLimitedLog
from .._kernel.process import PROCESS

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
    # Every signal goes to cw's own pipeline or nowhere: no application observes a call's span, metrics or
    # log events before cw's flush, so a call's end may be recorded off the caller's thread (runtime.py).
    ours: bool = False
    # The embedded file pipeline's span processor, where the spans go there: it takes cw's snapshot events as they
    # are made (`_embedded/span_queue.CompactSpanProcessor.end_with`). None: they go through the span's add_event.
    own_events: Any = None


def _global_tracer_provider() -> Optional[trace.TracerProvider]:
    """The application's global TracerProvider, or None while the API's proxy stands in."""
    tp = trace.get_tracer_provider()
    return None if isinstance(tp, trace.ProxyTracerProvider) else tp


def _global_meter_provider() -> Optional[metrics.MeterProvider]:
    """The application's global MeterProvider, or None while the API's proxy (or its no-op) stands in."""
    mp = metrics.get_meter_provider()
    return None if type(mp).__name__ in ("_ProxyMeterProvider", "NoOpMeterProvider") else mp


def _app_has_providers() -> bool:
    return _global_tracer_provider() is not None or _global_meter_provider() is not None


def choose_providers(
    cfg: Config,
    tracer_provider: Optional[trace.TracerProvider] = None,
    meter_provider: Optional[metrics.MeterProvider] = None,
    logger_provider: Any = None,
) -> Providers:
    if tracer_provider is not None and meter_provider is not None:
        return Providers(tracer_provider, meter_provider, logger_provider)  # the caller's, as given
    if tracer_provider is None and meter_provider is None and not _app_has_providers():
        if cfg.export == "none" and cfg.metrics_endpoint is None:
            return _nowhere(logger_provider)
        if cfg.sdk_disabled:
            PROCESS.part(_SaidOnce).warning(
                "sdk-disabled",
                f"cw_middleware: OTEL_SDK_DISABLED=true switches OpenTelemetry off, so no snapshots are exported "
                f"(export={cfg.export}{f', metrics={cfg.metrics}' if cfg.metrics_endpoint is not None else ''} is not "
                "installed); cw.snapshots() and cw.estimate() still work. Unset it to export.",
            )
            return _nowhere(logger_provider)
        return _mixed(install_embedded(cfg), None, None, logger_provider)
    return _with_the_applications(cfg, tracer_provider, meter_provider, logger_provider)


def _nowhere(logger_provider: Any) -> Providers:
    """The API's no-op providers: nothing exported (an application's logger provider still gets log events)."""
    return Providers(trace.NoOpTracerProvider(), metrics.NoOpMeterProvider(), logger_provider, ours=logger_provider is None)


def _with_the_applications(
    cfg: Config,
    tracer_provider: Optional[trace.TracerProvider],
    meter_provider: Optional[metrics.MeterProvider],
    logger_provider: Any,
) -> Providers:
    """Some providers are the application's (passed to configure(), or set globally); ``export`` fills in a missing side.

    Spans (and with them the snapshot events) go to the application's TracerProvider if it has
    one, else where ``export`` sends them; metrics likewise (or to ``metrics=prometheus:...``'s
    endpoint). A side that neither covers goes nowhere. Where each signal goes is said once
    per process, as a warning: a provider passed for one signal must not silently lose the other.
    """
    tp = tracer_provider if tracer_provider is not None else _global_tracer_provider()
    mp = meter_provider if meter_provider is not None else _global_meter_provider()
    said = PROCESS.part(_SaidOnce)
    if mp is not None and cfg.metrics_endpoint is not None:
        said.warning(
            "endpoint-with-app-meter",
            f"cw_middleware: the application has its own MeterProvider, so metrics={cfg.metrics} opens no endpoint; "
            "add a PrometheusMetricReader to that provider instead",
        )
    off = "OTEL_SDK_DISABLED=true" if cfg.sdk_disabled else None
    fill_spans = tp is None and off is None and cfg.export != "none"
    fill_metrics = mp is None and off is None and (cfg.metrics_endpoint is not None or "none" not in (cfg.export, cfg.metrics))
    ours = "cw's own pipeline"
    if tp is not None:
        spans_to = _whose(tp, given=tracer_provider is not None, kind="TracerProvider")
    else:
        spans_to = f"export={cfg.export} ({ours})" if fill_spans else f"nowhere ({off or 'export=none'})"
    if mp is not None:
        metrics_to = _whose(mp, given=meter_provider is not None, kind="MeterProvider")
    elif fill_metrics:
        metrics_to = (f"metrics={cfg.metrics}" if cfg.metrics_endpoint is not None else f"export={cfg.export}") + f" ({ours})"
    else:
        metrics_to = f"nowhere ({off or ('metrics=none' if cfg.metrics == 'none' else 'export=none')})"
    unused = "" if fill_spans or fill_metrics or cfg.export == "none" else f"; export={cfg.export} is not installed"
    message = f"cw_middleware: snapshots (spans) go to {spans_to}, metrics to {metrics_to}{unused}"
    said.warning(message, message + ("; read them back from that backend" if tp is not None else ""))
    if not (fill_spans or fill_metrics):
        return Providers(
            tp if tp is not None else trace.NoOpTracerProvider(),
            mp if mp is not None else metrics.NoOpMeterProvider(),
            logger_provider,
        )
    return _mixed(install_embedded(cfg), tp, mp, logger_provider)


def install_embedded(cfg: Config) -> Any:
    """cw's own pipeline for ``cfg``: imported here, so a process that exports nothing never loads the OpenTelemetry SDK."""
    from .._embedded import install

    return install(cfg)


if environment_export() != "none":
    # The pipeline (the OpenTelemetry SDK, ~30 ms of imports) loads with the package, not inside the first LLM
    # call, unless the environment exports nothing: then only a configure() that exports loads it.
    from .. import _embedded  # noqa: F401


def _whose(provider: object, given: bool, kind: str) -> str:
    whose = f"the {kind} passed to configure()" if given else f"the application's own {kind}"
    return f"{whose} ({_type_name(provider)})"


def _mixed(pipeline: Any, tp: Any, mp: Any, logger_provider: Any) -> Providers:
    """The embedded pipeline's providers where the application has none of its own (``tp``, ``mp``: None)."""
    return Providers(
        tp if tp is not None else pipeline.tracer_provider,
        mp if mp is not None else pipeline.meter_provider,
        logger_provider or pipeline.logger_provider,
        pipeline.flush,
        pipeline.shutdown,
        lambda: _mixed(pipeline.for_child(), tp, mp, logger_provider),
        ours=tp is None and mp is None and logger_provider is None,
        own_events=pipeline.own_events if tp is None else None,
    )


def _type_name(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"
