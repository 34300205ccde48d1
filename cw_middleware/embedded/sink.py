"""The JSON-lines file sink: whole lines appended to the one file that spans, metrics and log events share.

``export="file:PATH"`` appends OTLP JSON lines to PATH, one export batch a line, the format
of the OpenTelemetry file exporter spec and of the Collector's ``file`` exporter, so one
reader serves both. A write that fails is the file's `Health` (said once), never an error.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from .health import Health

if TYPE_CHECKING:
    from ..readback.otlp_json import Span

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

    def __init__(self, path: str, index_dir: Optional[str] = None) -> None:
        self.path = path
        self.health = Health(path, f"cannot write telemetry to {path}")
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._index: Any = None
        if index_dir is not None and index_dir != "memory":
            from ..readback.index_append import IndexedAppends  # the readers' index, extended as lines are written

            self._index = IndexedAppends(path, index_dir)

    def append(self, line: bytes, spans: Optional[Sequence[Sequence[Span]]] = None) -> bool:
        """Write ``line`` (one or more whole lines) at the end of the file; False when it could not be written.

        ``spans``: for each line, what it holds as the file index reads it (`readback.index_append`);
        None for lines that name no stage (metrics, log events). With an index directory the
        file's index is extended with the lines as they are written.
        """
        if os.getpid() != self._pid:
            return True  # the parent's pipeline, copied by fork: its batches are the parent's to write
        try:
            with self._lock:
                fd = self._open()
                try:
                    if _NONBLOCK:
                        os.set_blocking(fd, True)
                    if self._index is not None:
                        self._index.append(fd, line, spans, _write)
                    else:
                        _write(fd, line)
                finally:
                    os.close(fd)
        except OSError as exc:
            self.health.failed(f"{type(exc).__name__}: {exc.strerror or exc}")
            return False
        self.health.succeeded()
        return True

    def close(self) -> None:
        """Let go of the file's index (its last lines are written: the pipeline shuts down after its exporters)."""
        with self._lock:
            if self._index is not None and os.getpid() == self._pid:
                self._index.close()

    def _open(self) -> int:
        # Read and write when the index is extended: it checks the bytes it covers (a CRC of the file's tail).
        flags = (os.O_RDWR if self._index is not None else os.O_WRONLY) | os.O_APPEND | os.O_CREAT | _NONBLOCK
        try:
            return os.open(self.path, flags, 0o644)
        except FileNotFoundError:  # its folder is missing (made now, not checked on every write: a syscall saved)
            folder = os.path.dirname(self.path)
            if not folder:
                raise
            os.makedirs(folder, exist_ok=True)
            return os.open(self.path, flags, 0o644)
        except PermissionError:
            if self._index is None:
                raise
            self._index = None  # a file this process may write but not read: appended to without its index
            return self._open()


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:  # a pipe may take part of a line at a time
        view = view[os.write(fd, view) :]
