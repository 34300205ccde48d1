"""The read commands' common ground: the reader they open, their exit codes and messages, and notes on a file backend.

A read command (`main`'s ``runs``, ``show``, ``summary``, ``stages``, ``serve``) is a function of its
arguments and an open reader; `read_errors` opens the reader and turns what goes wrong into an exit code
and one line on stderr, never a traceback. A first query on a big telemetry file builds its index: the
note of `indexing_note` says how far on stderr. For a file backend, `file_note` says which file is read and
`file_hint` why it may know nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

EXIT_OK, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_BACKEND = 0, 2, 3, 4


def _open_reader(args: argparse.Namespace) -> Any:
    from .._readback import reader

    return reader(args.backend)


# A first query on a big telemetry file builds its index (_readback/file_index.py): say so on stderr,
# live on a terminal once the build has run `TERMINAL_AFTER` seconds, else in one line after `LOG_AFTER`.
TERMINAL_AFTER, LOG_AFTER = 0.3, 1.0


class _IndexingNote:
    """Tells on stderr how far an index build is: one line, updated in place on a terminal."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.terminal = stream.isatty()
        self.started = time.monotonic()
        self.shown = False

    def __call__(self, path: str, done: int, total: int) -> None:
        waited = time.monotonic() - self.started
        if waited < (TERMINAL_AFTER if self.terminal else LOG_AFTER) or (self.shown and not self.terminal):
            return
        size = f"{total / 1e6:.0f}" if total >= 10e6 else f"{total / 1e6:.1f}"
        line = f"indexing {100 * done // max(total, 1)}% of {size} MB: {path} (the first query on this file)"
        if self.terminal:  # one line, rewritten: never wider than the terminal
            self.stream.write(f"\r{line[: shutil.get_terminal_size().columns - 1]}\x1b[K")
        else:
            self.stream.write(f"{line}\n")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown and self.terminal:
            self.stream.write("\r\x1b[K")  # the answer follows on a clean line
            self.stream.flush()


@contextmanager
def indexing_note() -> Iterator[None]:
    from .._readback.file_index import reporting_progress

    note = _IndexingNote(sys.stderr)
    try:
        with reporting_progress(note):
            yield
    finally:
        note.close()


def read_errors(fn: Any) -> Any:
    """A read command, run on the reader it opens; bad input 2, not found 3, backend failure 4; messages, never tracebacks."""

    def run(args: argparse.Namespace) -> int:
        from .._kernel.errors import BackendError, ConfigError, NotFound

        try:
            reader = _open_reader(args)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        try:
            return int(fn(args, reader) or 0)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except NotFound as exc:
            print(f"not found: {exc}", file=sys.stderr)
            hint = file_hint(reader)
            if hint:
                print(hint, file=sys.stderr)
            return EXIT_NOT_FOUND
        except BackendError as exc:
            print(f"backend error: {exc}", file=sys.stderr)
            return EXIT_BACKEND
        finally:
            reader.close()

    return run


# Where cw_middleware's telemetry goes when this file stays empty (docs/configuration.md).
_ELSEWHERE = (
    "  if your application installs its own TracerProvider, cw_middleware's snapshots go to that provider's\n"
    "  exporters, not to this file: read them back from that backend (--backend)"
)


def file_hint(reader: Any) -> str:
    """Why a file backend may know nothing: no file, an empty one, or one without cw_middleware spans (its index says)."""
    from .._readback.otlp_file import FileContents, OtlpFileReader

    backend = reader.backend
    if not isinstance(backend, OtlpFileReader):
        return ""
    try:
        contents = backend.contents()
    except Exception:  # noqa: BLE001 - the hint is best effort
        return ""
    path = os.path.abspath(backend.path)  # a relative default hides which directory it means
    if contents is FileContents.MISSING:
        return f"  (there is no telemetry file at {path!r} yet: has anything been exported there?)\n{_ELSEWHERE}"
    if contents is FileContents.EMPTY:
        return f"  (the telemetry file {path!r} is empty)\n{_ELSEWHERE}"
    if contents is FileContents.NO_SPANS:
        return f"  (the telemetry file {path!r} holds no cw_middleware spans)\n{_ELSEWHERE}"
    return ""


def file_note(reader: Any) -> str:
    """For a file backend: the absolute path it reads, whether that file exists yet (a relative URL hides both), and
    a warning line when its first non-empty line is not an OTLP JSON export record (``--backend file:README.md``)."""
    from .._readback.otlp_file import _OTLP_LINE, OtlpFileReader

    backend = reader.backend
    if not isinstance(backend, OtlpFileReader):
        return ""
    path = os.path.abspath(backend.path)
    if not os.path.exists(path):
        return (
            f"  reading {path}: the file does not exist yet, so the answers stay empty until something exports there "
            "(the default export of a process started in that directory, or CW_EXPORT=file:PATH)"
        )
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)  # bounded: the first non-empty line's opening decides
    except OSError:
        head = b""
    first = next((line for line in head.split(b"\n") if line.strip()), b"")
    if first and not _OTLP_LINE.match(first):
        return (
            f"  reading {path}\n"
            f"warning: {path} does not look like OTLP JSON lines: its first line is not a "
            '{"resourceSpans": ...}, {"resourceMetrics": ...} or {"resourceLogs": ...} export record, so the API will '
            "find no runs in it (give --backend the file cw exports to: CW_EXPORT=file:PATH)"
        )
    return f"  reading {path}"
