"""The embedded telemetry pipeline: the only user of the OpenTelemetry SDK.

``export="file:PATH"`` appends OTLP JSON lines to PATH: one export batch a line,
``{"resourceSpans":[...]}`` or ``{"resourceMetrics":[...]}``, the format of the
OpenTelemetry file exporter spec and of the Collector's ``file`` exporter, so one
reader serves both. Traces and metrics share the one file the user names; every
line starts with its signal's key, so a trace reader skips metric lines by
their first bytes. ``export="otlp"`` sends plain OTLP to the endpoint named by
the standard OTEL_EXPORTER_OTLP_* variables (http/protobuf by default, grpc
with OTEL_EXPORTER_OTLP_PROTOCOL=grpc).

``metrics="prometheus:HOST:PORT"`` sends metrics to a scrape endpoint instead: an
``opentelemetry-exporter-prometheus`` reader behind prometheus_client's HTTP server,
bound to HOST only, started by ``install`` and stopped by its shutdown (never a port
opened unless asked). It serves its own registry, not prometheus_client's global one,
so an application's own Prometheus metrics are neither mixed in nor disturbed. Spans
(and log events) still go where ``export`` says.

Export never reaches the call path: spans go through a bounded batching processor
(full queue: dropped, counted, said once a minute), for the file cw's own
`_CompactSpanProcessor`, which queues spans as tuples the garbage collector ignores,
not as SDK objects it would promote (issue 11 #4), and for OTLP the SDK's
``BatchSpanProcessor``; metrics go through a ``PeriodicExportingMetricReader``; the
file is written on their worker threads.

Faults are bounded and said once. A destination that fails (a dead or erroring
collector, a full disk, a path that cannot be written, a FIFO nobody reads) or does
not answer (a hung collector, a write that blocks) gets one warning from cw when it
starts failing and an info line when it works again (`_Health`); the OTLP exporters'
own retry and failure lines, logged while cw's exporters run, go to the
``cw_middleware.export`` logger at DEBUG instead (`_ExporterLogs`). Flush and
shutdown run on a daemon thread the caller waits for at most its timeout
(`_OffThread`): the SDK's ``BatchSpanProcessor.force_flush`` ignores its timeout and
exports on the calling thread behind a stuck export, and a metric flush waits on
the same file. Nothing raises into the application.

After ``os.fork()`` the child builds a pipeline of its own (`Pipeline.for_child`,
called by the Runtime): the parent's exporters, file lock, HTTP sessions, gRPC
channels and metric state stay the parent's, and what the child's copies of them
would still send is dropped.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import dataclasses
import json
import logging
import os
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    MeterProvider,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics import _Gauge as Gauge  # the SDK's synchronous gauge (its public name is the API's)
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricReader,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util import BoundedList
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Status, StatusCode

from ._log import RateLimitedLog
from .config import Config

logger = logging.getLogger("cw_middleware")

_ID_KEYS = ("traceId", "spanId", "parentSpanId")


_log = RateLimitedLog()  # a dead collector must not flood the application's log
_warn = _log.warning
_debug = logging.getLogger("cw_middleware.export")


# ---------------------------------------------------------------- faults: said once, never waited on


class _Health:
    """Whether one destination (the file, the OTLP endpoint) takes exports.

    It warns when the destination starts failing (at most once a minute, for one that
    flaps) and logs an info line when it works again: one warning per fault, however
    many batches fail meanwhile. Spans, metrics and log events share their destination's.
    """

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self._problem = problem  # "cannot write telemetry to PATH", "cannot export telemetry to OTLP ..."
        self._lock = threading.Lock()
        self._failing = False
        self._failures = 0

    @property
    def failing(self) -> bool:
        return self._failing

    def failed(self, why: str) -> None:
        with self._lock:
            first = not self._failing
            self._failing = True
            self._failures += 1
        if first:
            _warn(
                self.where,
                f"cw_middleware: {self._problem} ({why}); snapshots are not exported until it works again "
                "(said once), the LLM calls proceed",
            )

    def succeeded(self) -> None:
        with self._lock:
            was, failures = self._failing, self._failures
            self._failing, self._failures = False, 0
        if was:
            logger.info("cw_middleware: telemetry export to %s works again (%d exports failed)", self.where, failures)


_exporting = threading.local()  # .active: this thread is inside one of cw's own exporters


@contextlib.contextmanager
def _inside_export() -> Iterator[None]:
    outer = getattr(_exporting, "active", False)
    _exporting.active = True
    try:
        yield
    finally:
        _exporting.active = outer


class _ExporterLogs(logging.Filter):
    """Holds back the OTLP exporters' log lines made inside cw's exporters (cw's `_Health` says the fault once).

    A dead collector makes them log every retry and every failed batch, ~48 lines a minute.
    Only records made on a thread inside one of cw's exporters are held back, so an
    application's own exporters on the same loggers log as before; held-back lines go to
    the ``cw_middleware.export`` logger at DEBUG. The filter sits on the exporters' loggers
    only while a pipeline of cw's uses them (`_hold_exporter_logs`).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(_exporting, "active", False):
            return True
        if _debug.isEnabledFor(logging.DEBUG):
            _debug.debug("%s %s: %s", record.levelname, record.name, record.getMessage())
        return False


_EXPORTER_LOGS = _ExporterLogs()
_held: Tally[str] = Tally()  # exporter logger name -> pipelines of cw's using it
_held_lock = threading.Lock()
_ALWAYS_HELD = ("opentelemetry.exporter.otlp.common.http",)  # the HTTP exporters' shared client


def _hold_exporter_logs(exporters: Iterable[Any]) -> Callable[[], None]:
    """Put the filter on the loggers of these exporters' modules; returns the release."""
    modules = {cls.__module__ for e in exporters for cls in type(e).__mro__}
    names = sorted({m for m in modules if m.startswith("opentelemetry.exporter.")} | (set(_ALWAYS_HELD) if modules else set()))
    with _held_lock:
        for name in names:
            if _held[name] == 0:
                logging.getLogger(name).addFilter(_EXPORTER_LOGS)
            _held[name] += 1
    released = threading.Event()

    def release() -> None:
        with _held_lock:
            if released.is_set():
                return
            released.set()
            for name in names:
                _held[name] -= 1
                if _held[name] <= 0:
                    del _held[name]
                    logging.getLogger(name).removeFilter(_EXPORTER_LOGS)

    return release


class _OffThread:
    """Runs telemetry work (a flush, a shutdown) on a daemon thread; the caller waits at most its timeout.

    A job still running when its caller gave up keeps going; the next job waits behind
    it rather than start a second thread beside a stuck one, so a backend that never
    answers costs one thread, not one per flush.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._busy: Optional[threading.Thread] = None

    def run(self, job: Callable[[], bool], timeout: float) -> Optional[bool]:
        """The job's answer, or None when it did not finish in time."""
        deadline = time.monotonic() + timeout
        outcome: list[bool] = []
        while True:
            with self._lock:
                busy = self._busy
                if busy is None or not busy.is_alive():
                    thread = threading.Thread(target=self._work, args=(job, outcome), name=self._name, daemon=True)
                    self._busy = thread
                    thread.start()
                    break
            busy.join(max(0.0, deadline - time.monotonic()))
            if busy.is_alive():
                return None
        thread.join(max(0.0, deadline - time.monotonic()))
        return None if thread.is_alive() else bool(outcome and outcome[0])

    def _work(self, job: Callable[[], bool], outcome: list[bool]) -> None:
        try:
            outcome.append(job())
        except Exception as exc:  # noqa: BLE001 - an SDK failure in a flush is the telemetry's, never the app's
            _warn(self._name, f"cw_middleware: {self._name} failed ({type(exc).__name__})")
            outcome.append(False)


# ---------------------------------------------------------------- OTLP JSON encoding


def _hex_ids(node: Any) -> None:
    """protobuf's JSON mapping writes bytes as base64; OTLP JSON wants trace and span ids in hex."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_KEYS and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)


def _to_json_line(message: Any) -> bytes:
    from google.protobuf.json_format import MessageToDict

    doc = MessageToDict(message, use_integers_for_enums=True)
    _hex_ids(doc)
    return (json.dumps(doc, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8")


def encode_spans_json(spans: Sequence[ReadableSpan]) -> bytes:
    """One OTLP JSON line ``{"resourceSpans":[...]}`` for a batch of finished spans."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return _to_json_line(encode_spans(spans))


def encode_logs_json(batch: Sequence[Any]) -> bytes:
    """One OTLP JSON line ``{"resourceLogs":[...]}`` (log-based snapshot events)."""
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs

    return _to_json_line(encode_logs(batch))


def encode_metrics_json(data: MetricsData) -> bytes:
    """One OTLP JSON line ``{"resourceMetrics":[...]}``."""
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics

    return _to_json_line(encode_metrics(data))


class _JsonLinesFile:
    """Appends whole lines to one file; shared by the span and the metric exporter.

    The file is opened per write (append mode, one ``write`` per line) so rotation
    and deletion by other tools are harmless and no descriptor leaks at exit. It is
    opened non-blocking, so a FIFO nobody reads fails at once (ENXIO) instead of
    blocking its exporter forever; writes then block as usual (a FIFO whose reader
    stalls, a hung network mount: flush and exit are bounded by `_OffThread`).
    A forked child's copy writes nothing: it has a file of its own (`Pipeline.for_child`).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.health = _Health(path, f"cannot write telemetry to {path}")
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def append(self, line: bytes) -> bool:
        if os.getpid() != self._pid:
            return True  # the parent's pipeline, copied by fork: its batches are the parent's to write
        try:
            with self._lock:
                folder = os.path.dirname(self.path)
                if folder:
                    os.makedirs(folder, exist_ok=True)
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NONBLOCK, 0o644)
                try:
                    if _NONBLOCK:
                        os.set_blocking(fd, True)
                    view = memoryview(line)
                    while view:  # a pipe may take part of a line at a time
                        view = view[os.write(fd, view) :]
                finally:
                    os.close(fd)
        except OSError as exc:
            self.health.failed(f"{type(exc).__name__}: {exc.strerror or exc}")
            return False
        self.health.succeeded()
        return True


_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


class OtlpJsonFileSpanExporter(SpanExporter):
    def __init__(self, path: str, sink: Optional[_JsonLinesFile] = None) -> None:
        self._file = sink or _JsonLinesFile(path)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            line = encode_spans_json(spans)
        except Exception as exc:  # noqa: BLE001 - never into the SDK's worker, never into the app
            _warn("encode", f"cw_middleware: could not encode spans ({type(exc).__name__})")
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS if self._file.append(line) else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class OtlpJsonFileMetricExporter(MetricExporter):
    def __init__(self, path: str, sink: Optional[_JsonLinesFile] = None) -> None:
        super().__init__(preferred_temporality={})
        self._file = sink or _JsonLinesFile(path)

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        try:
            line = encode_metrics_json(metrics_data)
        except Exception as exc:  # noqa: BLE001
            _warn("encode", f"cw_middleware: could not encode metrics ({type(exc).__name__})")
            return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS if self._file.append(line) else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


def _file_log_exporter(sink: _JsonLinesFile) -> Any:
    """A LogRecordExporter writing OTLP JSON lines to the shared file (logs SDK imported only when asked)."""
    from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult

    class OtlpJsonFileLogExporter(LogRecordExporter):
        def export(self, batch: Sequence[Any]) -> LogRecordExportResult:
            try:
                line = encode_logs_json(batch)
            except Exception as exc:  # noqa: BLE001
                _warn("encode", f"cw_middleware: could not encode log events ({type(exc).__name__})")
                return LogRecordExportResult.FAILURE
            return LogRecordExportResult.SUCCESS if sink.append(line) else LogRecordExportResult.FAILURE

        def shutdown(self) -> None:
            pass

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    return OtlpJsonFileLogExporter()


def _otlp_log_exporter() -> Any:
    if otlp_protocol() == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
    else:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter  # type: ignore[assignment]
    return OTLPLogExporter()


class _Guard:
    """What cw's OTLP exporter wrappers share: a destination's health, its logs held back, the owning process."""

    def __init__(self, health: _Health) -> None:
        self.health = health
        self._pid = os.getpid()

    @property
    def forked_copy(self) -> bool:
        return os.getpid() != self._pid  # the parent's exporter, copied by fork: never used in the child

    def export(self, signal: str, send: Callable[[], Any], success: Any) -> bool:
        """Run one export of ``signal`` ("span", "metric", "log"); failures are the destination's (said once), never raised."""
        try:
            with _inside_export():
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
            with _inside_export():
                return call()
        except Exception:  # noqa: BLE001
            return default


class _GuardedSpanExporter(SpanExporter):
    """Wraps a network exporter: exceptions become FAILURE, failures one warning per fault."""

    def __init__(self, inner: SpanExporter, health: _Health) -> None:
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


class _GuardedMetricExporter(MetricExporter):
    def __init__(self, inner: MetricExporter, health: _Health) -> None:
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


def _guarded_log_exporter(inner: Any, health: _Health) -> Any:
    """The same guard for an OTLP LogRecordExporter (logs SDK imported only when asked)."""
    from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult

    class _GuardedLogExporter(LogRecordExporter):
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

    return _GuardedLogExporter()


# ---------------------------------------------------------------- OTLP over the network


def otlp_protocol(environ: Optional[dict[str, str]] = None) -> str:
    env = os.environ if environ is None else environ
    return (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip()


def _otlp_exporters() -> tuple[SpanExporter, MetricExporter, str]:
    """OTLP exporters configured by the standard OTEL_EXPORTER_OTLP_* variables (read by the exporters)."""
    protocol = otlp_protocol()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans

        spans: SpanExporter = GrpcSpans()
        metric: MetricExporter = GrpcMetrics()
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans

        spans, metric = HttpSpans(), HttpMetrics()
    where = f"OTLP ({protocol}) {os.environ.get('OTEL_EXPORTER_OTLP_ENDPOINT', 'default endpoint')}"
    return spans, metric, where


# ---------------------------------------------------------------- the scrape endpoint


class ScrapeEndpoint:
    """Prometheus text format on HOST:PORT, from a PrometheusMetricReader with a registry of its own."""

    def __init__(self, host: str, port: int, reader: MetricReader, registry: Any) -> None:
        from prometheus_client import start_http_server

        self.reader = reader
        # prometheus_client picks the address family from HOST; nothing else is bound.
        self._httpd, self._thread = start_http_server(port, addr=host, registry=registry)
        bound = self._httpd.server_address
        self.address: tuple[str, int] = (str(bound[0]), int(bound[1]))

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}/metrics" if ":" in host else f"http://{host}:{port}/metrics"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5.0)

    def close_inherited(self) -> None:
        """A forked child's copy: its serving thread stayed in the parent, so only the socket is closed."""
        self._httpd.server_close()


def _series_limits(limit: int) -> dict[type, int]:
    """The same cardinality limit for every instrument class (the SDK's default is 2000 each)."""
    return {
        cls: limit
        for cls in (Counter, UpDownCounter, Histogram, Gauge, ObservableCounter, ObservableUpDownCounter, ObservableGauge)
    }


def _scrape_endpoint(config: Config) -> Optional[ScrapeEndpoint]:
    """Start the endpoint of ``metrics="prometheus:HOST:PORT"``; a port that cannot be bound logs and gives None.

    A busy port is not a bad setting (several worker processes of one application share
    one environment): the application runs on, and the other telemetry too.
    """
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry

    assert config.metrics_endpoint is not None
    host, port = config.metrics_endpoint
    registry = CollectorRegistry(auto_describe=True)
    reader = PrometheusMetricReader(registry=registry, cardinality_limits=_series_limits(config.metric_series_limit))
    try:
        endpoint = ScrapeEndpoint(host, port, reader, registry)
    except OSError as exc:
        reader.shutdown()
        _warn(
            "metrics-endpoint",
            f"cw_middleware: cannot serve metrics on {host}:{port} ({type(exc).__name__}: {exc.strerror or exc}); "
            "metrics are not exported from this process, the LLM calls proceed",
        )
        return None
    logger.info("cw_middleware: metrics for Prometheus at %s", endpoint.url)
    return endpoint


# ---------------------------------------------------------------- the file pipeline's span processor


_Record = tuple[Any, ...]  # a finished span as nested tuples of str/int/float/bool/None (see `_compact`)


def _context_record(context: Optional[trace.SpanContext]) -> Optional[tuple[Any, ...]]:
    if context is None:
        return None
    state = tuple(context.trace_state.items()) if context.trace_state else ()
    return (context.trace_id, context.span_id, context.is_remote, int(context.trace_flags), state)


def _context_from(record: Optional[tuple[Any, ...]]) -> Optional[trace.SpanContext]:
    if record is None:
        return None
    trace_id, span_id, is_remote, flags, state = record
    return trace.SpanContext(trace_id, span_id, is_remote, trace.TraceFlags(flags), trace.TraceState(list(state)))


def _attributes_record(attributes: Any, dropped: int) -> tuple[tuple[tuple[str, Any], ...], int]:
    if not attributes:
        return (), dropped
    # BoundedAttributes' own items() goes key by key through a lock in Python (~50x slower on
    # the caller's thread); the dict it wraps holds the same, already validated and immutable.
    return tuple(getattr(attributes, "_dict", attributes).items()), dropped


def _attributes_from(record: tuple[tuple[tuple[str, Any], ...], int]) -> Any:
    items, dropped = record
    if not dropped:
        return dict(items)  # what the encoder reads; BoundedAttributes would validate every value again
    attributes = BoundedAttributes(attributes=dict(items), immutable=True)
    attributes.dropped = dropped
    return attributes


def _bounded(items: list[Any], dropped: int) -> Any:
    if not dropped:
        return items
    bounded = BoundedList.from_seq(None, items)
    bounded.dropped = dropped
    return bounded


class _CompactSpanProcessor(SpanProcessor):
    """The file pipeline's batching span processor: it queues finished spans as tuples, never as SDK objects.

    The SDK's ``BatchSpanProcessor`` keeps each ``ReadableSpan`` (its attribute dicts and
    locks, its events, their attributes) queued until the next export, up to a second and
    hundreds of calls later: long enough for the collector to promote those graphs to its
    oldest generation, and the promotions are what make it run full collections, each a
    walk of the application's whole heap on whichever thread allocates next (issue 11 #4,
    ``benchmarks/gc_pauses.py``). Here ``on_end`` copies the span into nested tuples of
    immutable values (`_compact`), which the collector stops tracking at its first pass,
    so a queue of them costs it nothing, and the span's own objects die with the call.
    The worker thread turns each record back into a ``ReadableSpan`` and encodes it with
    the one encoder (`encode_spans_json`), a span a line: the lines the readers read, as
    the SDK processor's exporter wrote them (a line holds a batch of any size).

    As the SDK's: a bounded queue (full: the span is dropped, counted, said once a minute,
    the caller never waits), a batch leaves at least every ``schedule_delay_millis`` or
    as soon as ``max_export_batch_size`` spans wait. ``force_flush`` exports on the calling
    thread (the pipeline bounds it, `_OffThread`). A forked child's copy queues nothing:
    the child builds a pipeline of its own (`Pipeline.for_child`).
    """

    def __init__(
        self,
        sink: _JsonLinesFile,
        max_queue_size: int,
        schedule_delay_millis: float,
        max_export_batch_size: int,
    ) -> None:
        self._sink = sink
        self._max_queue_size = max_queue_size
        self._delay = schedule_delay_millis / 1000
        self._batch_size = max_export_batch_size
        self._queue: collections.deque[_Record] = collections.deque()
        self._origins: list[tuple[Resource, Optional[InstrumentationScope]]] = []
        self._origins_lock = threading.Lock()  # also guards the drop count
        self._export_lock = threading.Lock()
        self._dropped = 0
        self._closed = False
        self._pid = os.getpid()
        self._wake = threading.Event()
        self._worker = threading.Thread(target=self._work, name="cw-span-export", daemon=True)
        self._worker.start()

    @property
    def dropped(self) -> int:
        """Spans dropped because the queue was full."""
        return self._dropped

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self._closed or os.getpid() != self._pid:
            return  # shut down, or the parent's processor copied by fork (the child has its own)
        if len(self._queue) >= self._max_queue_size:
            with self._origins_lock:
                self._dropped += 1
            _warn(
                "span-queue",
                f"cw_middleware: the telemetry queue is full ({self._max_queue_size} spans waiting for "
                f"{self._sink.path}); spans are dropped ({self._dropped} so far), the LLM calls proceed",
            )
            return
        self._queue.append(self._compact(span))
        if len(self._queue) >= self._batch_size and not self._wake.is_set():
            self._wake.set()

    def _compact(self, span: ReadableSpan) -> _Record:
        """The span as nested tuples of immutable values; resource and scope by their index in `_origins`."""
        events = tuple((e.name, e.timestamp, _attributes_record(e.attributes, e.dropped_attributes)) for e in span.events)
        links = tuple(
            (_context_record(link.context), _attributes_record(link.attributes, link.dropped_attributes)) for link in span.links
        )
        status = span.status
        return (
            self._origin(span.resource, span.instrumentation_scope),
            span.name,
            _context_record(span.context),
            _context_record(span.parent),
            span.kind.value,
            span.start_time,
            span.end_time,
            # ReadableSpan.attributes wraps them in a read-only proxy: items() would be the slow path again.
            _attributes_record(getattr(span, "_attributes", None) or span.attributes, span.dropped_attributes),
            events,
            span.dropped_events,
            links,
            span.dropped_links,
            (status.status_code.value, status.description),
        )

    def _origin(self, resource: Resource, scope: Optional[InstrumentationScope]) -> int:
        for index, (known_resource, known_scope) in enumerate(self._origins):
            if known_resource is resource and known_scope is scope:
                return index
        with self._origins_lock:  # a tracer provider has one resource and a scope per tracer: a short list
            self._origins.append((resource, scope))
            return len(self._origins) - 1

    def _readable(self, record: _Record) -> ReadableSpan:
        origin, name, context, parent, kind, start, end, attributes, events, dropped_events, links, dropped_links, status = record
        resource, scope = self._origins[origin]
        return ReadableSpan(
            name=name,
            context=_context_from(context),
            parent=_context_from(parent),
            resource=resource,
            attributes=_attributes_from(attributes),
            events=_bounded([Event(n, _attributes_from(a), t) for n, t, a in events], dropped_events),
            links=_bounded(
                [trace.Link(_context_from(c) or trace.INVALID_SPAN_CONTEXT, _attributes_from(a)) for c, a in links], dropped_links
            ),
            kind=trace.SpanKind(kind),
            status=Status(StatusCode(status[0]), status[1]),
            start_time=start,
            end_time=end,
            instrumentation_scope=scope,
        )

    def _work(self) -> None:
        while not self._closed:
            self._wake.wait(self._delay)
            self._wake.clear()
            if not self._closed:
                self._export()
        self._export()

    def _export(self) -> bool:
        """Write everything queued, a span a line; False when a line could not be encoded or written."""
        ok = True
        with self._export_lock:
            while self._queue:
                lines = []
                for _ in range(min(self._batch_size, len(self._queue))):
                    # One span at a time: its SDK objects and the encoder's dicts then live for one
                    # span's encoding, too briefly to be promoted (8 spans a line promoted ~1.8x as
                    # many objects per call, 32 ~2.3x: benchmarks/gc_pauses.py, issue 11 #4).
                    try:
                        lines.append(encode_spans_json([self._readable(self._queue.popleft())]))
                    except Exception as exc:  # noqa: BLE001 - never into the worker, never into the app
                        _warn("encode", f"cw_middleware: could not encode spans ({type(exc).__name__})")
                        ok = False
                if lines:
                    ok = self._sink.append(b"".join(lines)) and ok
        return ok

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        if os.getpid() != self._pid:
            return True  # the parent's copy: its spans are the parent's to write, its lock may be held
        if self._closed:
            return False
        return self._export()

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        if self._worker.is_alive() and os.getpid() == self._pid:
            self._worker.join()


# ---------------------------------------------------------------- the pipeline


@dataclass
class Pipeline:
    tracer_provider: trace.TracerProvider  # the API's no-op one with export="none"
    meter_provider: MeterProvider
    flush: Callable[[float], bool]  # bounded by its timeout, whatever the exporter does
    shutdown: Callable[..., None]  # shutdown(timeout=config.exit_timeout), bounded likewise
    span_processor: Optional[SpanProcessor]  # the file pipeline's `_CompactSpanProcessor`, else the SDK's batcher
    logger_provider: Any = None  # only with config.log_events
    metrics_endpoint: Optional[ScrapeEndpoint] = None  # only with metrics="prometheus:..."
    for_child: Callable[[], Pipeline] = lambda: _no_pipeline()  # in a forked child: a pipeline of its own
    health: Optional[_Health] = None  # the destination's, for tests and the Runtime


def _no_pipeline() -> Pipeline:
    raise RuntimeError("this pipeline cannot be rebuilt")


def install(
    config: Config,
    span_exporter: Optional[SpanExporter] = None,
    metric_exporter: Optional[MetricExporter] = None,
) -> Pipeline:
    """Providers with exporters for ``config.export`` and ``config.metrics``; the global providers are left alone."""
    given_spans, given_metrics = span_exporter, metric_exporter
    resource = Resource.create({"service.name": config.service_name})
    sink = _JsonLinesFile(config.export_path) if config.export_path is not None else None
    health: Optional[_Health] = sink.health if sink is not None else None
    otlp_spans: Optional[SpanExporter] = None
    otlp_metrics: Optional[MetricExporter] = None
    wants_export_metrics = config.metrics == "export" and metric_exporter is None
    if config.export == "otlp" and (span_exporter is None or wants_export_metrics or config.log_events):
        otlp_spans, otlp_metrics, where = _otlp_exporters()
        health = _Health(where, f"cannot export telemetry to {where}")
    release_logs = _hold_exporter_logs(e for e in (otlp_spans, otlp_metrics) if e is not None)

    processor: Optional[SpanProcessor] = None
    sdk_tracer: Optional[TracerProvider] = None
    if config.export != "none" or span_exporter is not None:
        if span_exporter is None and sink is not None:
            processor = _CompactSpanProcessor(
                sink,
                max_queue_size=config.export_queue_size,
                max_export_batch_size=min(512, config.export_queue_size),
                schedule_delay_millis=config.export_interval_ms,
            )
        else:
            if span_exporter is None:
                assert otlp_spans is not None and health is not None
                span_exporter = _GuardedSpanExporter(otlp_spans, health)
            processor = BatchSpanProcessor(
                span_exporter,
                max_queue_size=config.export_queue_size,
                max_export_batch_size=min(512, config.export_queue_size),
                schedule_delay_millis=config.export_interval_ms,
            )
        sdk_tracer = TracerProvider(resource=resource, shutdown_on_exit=False)  # the Runtime closes it at exit
        sdk_tracer.add_span_processor(processor)
    tracer_provider: trace.TracerProvider = sdk_tracer if sdk_tracer is not None else trace.NoOpTracerProvider()

    readers: list[MetricReader] = []
    endpoint: Optional[ScrapeEndpoint] = None
    if config.metrics == "export" and (config.export != "none" or metric_exporter is not None):
        if metric_exporter is None:
            if sink is not None:
                metric_exporter = OtlpJsonFileMetricExporter(sink.path, sink)
            else:
                assert otlp_metrics is not None and health is not None
                metric_exporter = _GuardedMetricExporter(otlp_metrics, health)
        readers.append(
            PeriodicExportingMetricReader(
                metric_exporter,
                export_interval_millis=config.metric_interval_ms,
                cardinality_limits=_series_limits(config.metric_series_limit),
            )
        )
    elif config.metrics_endpoint is not None:
        endpoint = _scrape_endpoint(config)
        if endpoint is not None:
            readers.append(endpoint.reader)
    meter_provider = MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)

    logger_provider = None
    if config.log_events and config.export != "none":
        logger_provider, release_log_exporter = _logger_provider(config, resource, sink, health)
    else:
        release_log_exporter = None

    # Only push readers are flushed: a flush of the scrape endpoint's (pull) reader would queue a
    # collection that its next scrape prints as well, every series twice (the OpenTelemetry
    # Prometheus collector emits whatever collections are queued), so MeterProvider.force_flush
    # is not used.
    push_readers = [r for r in readers if endpoint is None or r is not endpoint.reader]
    flusher, stopper = _OffThread("cw-flush"), _OffThread("cw-shutdown")

    def flush_now(timeout: float) -> bool:
        millis = int(timeout * 1000)
        ok = sdk_tracer is None or bool(sdk_tracer.force_flush(millis))
        if logger_provider is not None:
            ok = bool(logger_provider.force_flush(millis)) and ok
        for reader in push_readers:
            ok = bool(reader.force_flush(millis)) and ok
        return ok

    def flush(timeout: float) -> bool:
        """True when everything recorded went out; False (and one warning per fault) otherwise, within ``timeout``."""
        answer = flusher.run(lambda: flush_now(timeout), timeout)
        if answer is None and health is not None:
            health.failed(f"no answer within {timeout:g}s: a backend that does not respond, or a write that blocks")
        return bool(answer) and not (health is not None and health.failing)

    def shutdown_now() -> bool:
        if sdk_tracer is not None:
            sdk_tracer.shutdown()
        meter_provider.shutdown()
        if endpoint is not None:
            endpoint.close()
        if logger_provider is not None:
            logger_provider.shutdown()
        return True

    def shutdown(timeout: Optional[float] = None) -> None:
        stopper.run(shutdown_now, config.exit_timeout if timeout is None else timeout)
        release_logs()
        if release_log_exporter is not None:
            release_log_exporter()

    def for_child() -> Pipeline:
        """In a forked child: leave this pipeline to the parent and build one of the child's own.

        The child's copies of the exporters write and send nothing (they check the process);
        the scrape endpoint's listening socket is the parent's, so the child closes its copy
        and serves no metrics (one port, one process).
        """
        global _held_lock
        _held_lock = threading.Lock()  # another thread of the parent may have held it at the fork
        release_logs()
        if release_log_exporter is not None:
            release_log_exporter()
        if endpoint is not None:
            endpoint.close_inherited()
        child_config = dataclasses.replace(config, metrics="none") if endpoint is not None else config
        return install(child_config, given_spans, given_metrics)

    return Pipeline(tracer_provider, meter_provider, flush, shutdown, processor, logger_provider, endpoint, for_child, health)


def _logger_provider(
    config: Config, resource: Resource, sink: Optional[_JsonLinesFile], health: Optional[_Health]
) -> tuple[Any, Optional[Callable[[], None]]]:
    """Snapshots as log-based events (OTEP 4430 moves span events toward the Logs API); with the release of its logs."""
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

    release: Optional[Callable[[], None]] = None
    if sink is not None:
        exporter = _file_log_exporter(sink)
    else:
        assert health is not None
        inner = _otlp_log_exporter()
        release = _hold_exporter_logs([inner])
        exporter = _guarded_log_exporter(inner, health)
    provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_log_record_processor(
        BatchLogRecordProcessor(
            exporter, max_queue_size=config.export_queue_size, schedule_delay_millis=config.export_interval_ms
        )
    )
    return provider, release


__all__ = [
    "OtlpJsonFileMetricExporter",
    "OtlpJsonFileSpanExporter",
    "Pipeline",
    "ScrapeEndpoint",
    "encode_metrics_json",
    "encode_spans_json",
    "install",
    "otlp_protocol",
]
