"""Install the embedded pipeline (as configure() would) without touching global providers."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from cw_middleware.config import resolve
from cw_middleware.embedded import install
from cw_middleware.runtime import Runtime, set_runtime


@contextlib.contextmanager
def embedded_runtime(**settings: Any) -> Iterator[Runtime]:
    """A Runtime exporting through embedded.install(); restores the previous runtime afterwards."""
    exporters = {k: settings.pop(k) for k in ("span_exporter", "metric_exporter") if k in settings}
    cfg = resolve(environ={}, **settings)
    pipeline = install(cfg, **exporters)
    runtime = Runtime(
        cfg,
        pipeline.tracer_provider,
        pipeline.meter_provider,
        shutdown=pipeline.shutdown,
        flush=pipeline.flush,
        logger_provider=pipeline.logger_provider,
    )
    runtime.pipeline = pipeline  # type: ignore[attr-defined]
    previous = set_runtime(runtime)
    try:
        yield runtime
    finally:
        runtime.flush(5.0)
        runtime.shutdown()
        set_runtime(previous)
