"""Whether each export destination works, said once a fault; the OTLP exporters' own lines held back.

A destination that fails (a dead or erroring collector, a full disk, a path that cannot be
written, a FIFO nobody reads) or does not answer gets one warning from cw when it starts
failing and an info line when it works again (`Health`). The OTLP exporters' own retry and
failure lines, and the OTLP encoders' (an attribute they cannot encode), logged while cw's
exporters run (`inside_export`), go to the ``cw_middleware.export`` logger at DEBUG instead
(`ExporterLogs`). Nothing here raises.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from .._kernel.log import RateLimitedLog

logger = logging.getLogger("cw_middleware")
_debug = logging.getLogger("cw_middleware.export")

export_warnings = RateLimitedLog()  # a dead collector must not flood the application's log


def warn(key: str, message: str) -> None:
    """One warning of the embedded pipeline, at most once a minute per ``key``."""
    export_warnings.warning(key, message)


class Health:
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
            warn(
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
def inside_export() -> Iterator[None]:
    """Marks this thread as inside one of cw's exporters: the exporters' log lines made meanwhile are held back."""
    outer = getattr(_exporting, "active", False)
    _exporting.active = True
    if not outer:  # counted once per thread: the filter stays on while any thread is inside
        exporter_logs.entered()
    try:
        yield
    finally:
        _exporting.active = outer
        if not outer:
            exporter_logs.left()


_ALWAYS_HELD = ("opentelemetry.exporter.otlp.common.http",)  # the HTTP exporters' shared client
# The OTLP encoders every exporter of cw's uses (the file's and the network's): an attribute they
# cannot encode costs a traceback per export otherwise.
_ENCODER = "opentelemetry.exporter.otlp.proto.common._internal"
_ENCODERS = (_ENCODER, f"{_ENCODER}.trace_encoder", f"{_ENCODER}.metrics_encoder", f"{_ENCODER}._log_encoder")


class ExporterLogs(logging.Filter):
    """Holds back the OTLP exporters' log lines made inside cw's exporters (cw's `Health` says the fault once).

    A dead collector makes them log every retry and every failed batch, ~48 lines a minute.
    Only records made on a thread inside one of cw's exporters are held back, so an
    application's own exporters on the same loggers log as before; held-back lines go to
    the ``cw_middleware.export`` logger at DEBUG. The filter sits on an exporter's logger only
    while a pipeline of cw's uses it: this object counts the pipelines holding each logger
    (loggers are the process's, so the count is too: one instance, `exporter_logs`). A pipeline
    that stops within its exit timeout leaves a stuck exporter behind, still retrying on its own
    thread: the filter comes off only once no export of cw's is running.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._holders: Counter[str] = Counter()  # exporter logger name -> pipelines of cw's using it
        self._attached: set[str] = set()  # the loggers carrying the filter (held, or released while exports ran)
        self._exports = 0  # exports of cw's running now, on any thread

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(_exporting, "active", False):
            return True
        if _debug.isEnabledFor(logging.DEBUG):
            _debug.debug("%s %s: %s", record.levelname, record.name, record.getMessage())
        return False

    def hold(self, exporters: Iterable[Any], encoders: bool = False) -> Hold:
        """Put the filter on the loggers of these exporters' modules (and, with ``encoders``, of the OTLP
        encoders) until the returned hold is released."""
        modules = {cls.__module__ for e in exporters for cls in type(e).__mro__}
        names = sorted(
            {m for m in modules if m.startswith("opentelemetry.exporter.")}
            | (set(_ALWAYS_HELD) if modules else set())
            | (set(_ENCODERS) if encoders else set())
        )
        with self._lock:
            for name in names:
                if name not in self._attached:
                    logging.getLogger(name).addFilter(self)
                    self._attached.add(name)
                self._holders[name] += 1
        return Hold(self, names)

    def entered(self) -> None:
        with self._lock:
            self._exports += 1

    def left(self) -> None:
        with self._lock:
            self._exports -= 1
            self._detach_unheld()

    def held(self) -> dict[str, int]:
        """Logger name -> pipelines holding it (for tests)."""
        with self._lock:
            return dict(self._holders)

    def _release(self, hold: Hold) -> None:
        with self._lock:
            names, hold.names = hold.names, []  # a second release takes nothing
            for name in names:
                self._holders[name] -= 1
                if self._holders[name] <= 0:
                    del self._holders[name]
            self._detach_unheld()

    def _detach_unheld(self) -> None:
        """Take the filter off the loggers no pipeline holds, unless an export is running (the lock is held)."""
        if self._exports > 0:
            return  # a stuck exporter left behind at a bounded exit still logs its retries: keep them held back
        for name in [n for n in self._attached if n not in self._holders]:
            logging.getLogger(name).removeFilter(self)
            self._attached.discard(name)

    def after_fork_in_child(self) -> None:
        """Another thread of the parent may have held the lock at the fork: the child's copy gets a fresh one.

        The parent's other threads are not in the child, nor are their exports."""
        self._lock = threading.Lock()
        self._exports = 1 if getattr(_exporting, "active", False) else 0


class Hold:
    """One pipeline's hold on some exporters' loggers; `release` (idempotent) takes the filter off the last."""

    def __init__(self, owner: ExporterLogs, names: list[str]) -> None:
        self._owner = owner
        self.names = names  # the loggers still held

    def release(self) -> None:
        self._owner._release(self)


exporter_logs = ExporterLogs()
