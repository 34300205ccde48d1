"""Install the embedded pipeline (as configure() would) without touching global providers."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any, Optional

from cw_middleware._capture.runtime import Runtime, set_runtime
from cw_middleware._embedded import install
from cw_middleware._kernel.config import resolve


@contextlib.contextmanager
def embedded_runtime(
    flush_at_exit: float = 5.0,
    index_writes: bool = True,
    ends_off_thread: bool = False,
    own_events: bool = True,
    **settings: Any,
) -> Iterator[Runtime]:
    """A Runtime exporting through embedded.install(), flushed (at most ``flush_at_exit`` s) and shut down at the end.

    ``index_writes=False``: the file is written as another program would write it, without extending
    its index (the readers' own path then indexes it). ``own_events=False``: the snapshot events go through
    the SDK's ``add_event``, as they must when a test adds a span processor of its own that reads them.
    """
    exporters = {k: settings.pop(k) for k in ("span_exporter", "metric_exporter") if k in settings}
    cfg = resolve(environ={}, **settings)
    with _index_dir("memory" if not index_writes else None):
        pipeline = install(cfg, **exporters)
    runtime = Runtime(
        cfg,
        pipeline.tracer_provider,
        pipeline.meter_provider,
        shutdown=pipeline.shutdown,
        flush=pipeline.flush,
        logger_provider=pipeline.logger_provider,
        ends_off_thread=ends_off_thread,  # as configure() builds it over cw's own pipeline
        own_events=pipeline.own_events if own_events else None,
    )
    runtime.pipeline = pipeline  # type: ignore[attr-defined]
    previous = set_runtime(runtime)
    try:
        yield runtime
    finally:
        runtime.flush(flush_at_exit)
        runtime.shutdown()
        set_runtime(previous)


@contextlib.contextmanager
def _index_dir(value: Optional[str]) -> Iterator[None]:
    """CW_INDEX_DIR set to ``value`` while a pipeline is built (it reads where the file's index lives then)."""
    if value is None:
        yield
        return
    previous = os.environ.get("CW_INDEX_DIR")
    os.environ["CW_INDEX_DIR"] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("CW_INDEX_DIR", None)
        else:
            os.environ["CW_INDEX_DIR"] = previous


@contextlib.contextmanager
def exported_to(file_path: str, traces_endpoint: Optional[str] = None, **settings: Any) -> Iterator[Runtime]:
    """The embedded file export, plus (when given) the same spans over OTLP/HTTP to ``traces_endpoint``."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    with embedded_runtime(export=f"file:{file_path}", own_events=traces_endpoint is None, **settings) as runtime:
        if traces_endpoint is not None:
            exporter = OTLPSpanExporter(endpoint=traces_endpoint)
            runtime.pipeline.tracer_provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=200))  # type: ignore[attr-defined]
        yield runtime
