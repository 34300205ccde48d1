"""The JSON-lines file sink: whole lines appended to the one file that spans, metrics and log events share.

``export="file:PATH"`` appends OTLP JSON lines to PATH, one export batch a line, the format
of the OpenTelemetry file exporter spec and of the Collector's ``file`` exporter, so one
reader serves both. A write that fails is the file's `Health` (said once), never an error.
A write cut short (SIGKILL, a full disk) leaves a fragment with no line end: the next line
written after it starts a line of its own, so only the fragment is lost (`JsonLinesFile`).
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from .health import Health

if TYPE_CHECKING:
    from .._readback.otlp_json import Span

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


class JsonLinesFile:
    """Appends whole lines to one file; shared by the span, metric and log exporters.

    The file is opened per write (append mode, one ``write`` per line) so rotation
    and deletion by other tools are harmless and no descriptor leaks at exit. It is
    opened non-blocking, so a FIFO nobody reads fails at once (ENXIO) instead of
    blocking its exporter forever; writes then block as usual (a FIFO whose reader
    stalls, a hung network mount: flush and exit are bounded by the pipeline's workers).
    A forked child's copy writes nothing: it has a file of its own (`Pipeline.for_child`).

    Before this process's first write and after a failed one, the file's last byte is read:
    when it is not a line end (another process died mid-write, a disk filled up mid-line),
    the write starts with one, so the fragment stays a damaged line of its own and the next
    line is whole instead of glued onto it.
    """

    def __init__(self, path: str, index_dir: Optional[str] = None) -> None:
        self.path = path
        self.health = Health(path, f"cannot write telemetry to {path}")
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._ends_whole = False  # the file is known to end with a line end: after a write of ours that succeeded
        self._index: Any = None
        if index_dir is not None and index_dir != "memory":
            from .._readback.index_append import IndexedAppends  # the readers' index, extended as lines are written

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
                    if not self._ends_whole and _ends_in_fragment(self.path, fd):
                        _write(fd, b"\n")  # the fragment ends here, a damaged line of its own
                    self._ends_whole = False  # until this write has gone through whole
                    if self._index is not None:
                        self._index.append(fd, line, spans, _write)
                    else:
                        _write(fd, line)
                    self._ends_whole = True
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


def _ends_in_fragment(path: str, fd: int) -> bool:
    """Whether the regular file open as ``fd`` (write-only) ends with bytes after its last line end."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            return False  # a FIFO, a device: nothing to read back; an empty file: nothing to end
        reader = os.open(path, os.O_RDONLY | _NONBLOCK)
        try:
            same = os.fstat(reader)
            if (same.st_dev, same.st_ino) != (st.st_dev, st.st_ino):
                return False  # rotated meanwhile: the new file is another's to check
            return os.pread(reader, 1, same.st_size - 1) not in (b"\n", b"")
        finally:
            os.close(reader)
    except OSError:
        return False  # unreadable (a write-only file): append as before
