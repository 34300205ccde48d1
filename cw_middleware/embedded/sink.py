"""The JSON-lines file sink: whole lines appended to the one file that spans, metrics and log events share.

``export="file:PATH"`` appends OTLP JSON lines to PATH, one export batch a line, the format
of the OpenTelemetry file exporter spec and of the Collector's ``file`` exporter, so one
reader serves both. A write that fails is the file's `Health` (said once), never an error.
"""

from __future__ import annotations

import os
import threading

from .health import Health

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


class JsonLinesFile:
    """Appends whole lines to one file; shared by the span, metric and log exporters.

    The file is opened per write (append mode, one ``write`` per line) so rotation
    and deletion by other tools are harmless and no descriptor leaks at exit. It is
    opened non-blocking, so a FIFO nobody reads fails at once (ENXIO) instead of
    blocking its exporter forever; writes then block as usual (a FIFO whose reader
    stalls, a hung network mount: flush and exit are bounded by the pipeline's workers).
    A forked child's copy writes nothing: it has a file of its own (`Pipeline.for_child`).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.health = Health(path, f"cannot write telemetry to {path}")
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def append(self, line: bytes) -> bool:
        """Write ``line`` (one or more whole lines) at the end of the file; False when it could not be written."""
        if os.getpid() != self._pid:
            return True  # the parent's pipeline, copied by fork: its batches are the parent's to write
        try:
            with self._lock:
                fd = self._open()
                try:
                    if _NONBLOCK:
                        os.set_blocking(fd, True)
                    _write(fd, line)
                finally:
                    os.close(fd)
        except OSError as exc:
            self.health.failed(f"{type(exc).__name__}: {exc.strerror or exc}")
            return False
        self.health.succeeded()
        return True

    def _open(self) -> int:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NONBLOCK
        try:
            return os.open(self.path, flags, 0o644)
        except FileNotFoundError:  # its folder is missing (made now, not checked on every write: a syscall saved)
            folder = os.path.dirname(self.path)
            if not folder:
                raise
            os.makedirs(folder, exist_ok=True)
            return os.open(self.path, flags, 0o644)


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:  # a pipe may take part of a line at a time
        view = view[os.write(fd, view) :]
