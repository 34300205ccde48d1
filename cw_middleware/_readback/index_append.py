"""The writer's side of the file index: lines appended, and the index extended with them in the same step.

cw's embedded exporter knows what each line it appends names (its spans' run and stage
ids, what a stage listing shows), so it extends the file's index (`file_index`, the same
SQLite database the readers use) as it writes, and the first query on a file cw wrote
reads no line it did not need, whatever the file's size (issue 22 gap 4).

One append is one write transaction of the index (``BEGIN IMMEDIATE``: writer processes on
one file take turns): the index is read, the lines are written (``O_APPEND``, one ``write``),
and where they landed is taken from the descriptor's offset. The index is extended only when
it covers the file up to exactly where the lines start: an index made for this file (device,
inode), up to its last byte, not written to since (size and mtime as recorded). Anything else,
bytes another program appended, a line a crashed writer left behind, a file indexed by no one
yet, leaves the index as it is for the readers' own path, which indexes what it does not cover
when it is queried (an empty file gets a new index: rotation, or a new file). A crash between
the write and the commit leaves the index as it was before the append: the reader indexes the
lines it misses. A lock held past `index_db.BUSY_TIMEOUT` (a reader building the index of a
large file), or an index that cannot be used, and the lines are appended without it; the line
is written whatever happens to the index, and nothing about the index ever raises.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import zlib
from collections.abc import Callable, Sequence
from typing import Optional

from .file_index import WINDOW, FileChanged, crc_at, reset_index, store_lines, tail_crc
from .fold import RunsFold, stage_pairs
from .index_db import FORMAT, VERSION, IndexDatabase, IndexUnusable, sqlite_usable
from .otlp_json import Span


class IndexedAppends:
    """Appends lines to one telemetry file and extends its index with them; one per file, per process."""

    def __init__(self, path: str, index_dir: str) -> None:
        self.path = path
        self._index_dir = index_dir
        self._database: Optional[IndexDatabase] = None
        self._off = False  # the index cannot be kept on disk: lines are appended without it

    def append(
        self, fd: int, data: bytes, spans: Optional[Sequence[Sequence[Span]]], write: Callable[[int, bytes], None]
    ) -> None:
        """``write(fd, data)`` (whole lines, at the end: ``fd`` is in append mode); extend the index where it covers the file.

        ``spans``: for each line of ``data``, the spans it holds as the index reads them (names, times
        and `fold.INDEX_KEYS` attributes); None for lines that hold none (metrics, log events).
        What ``write`` raises is raised; the index never raises.
        """
        try:
            database = self._open() if stat.S_ISREG(os.fstat(fd).st_mode) else None
        except (OSError, sqlite3.Error):
            database = None
        if database is None:
            write(fd, data)
            return
        written = False
        try:
            with database.writing() as db:
                meta = dict(db.execute("SELECT k, v FROM meta").fetchall())
                st = os.fstat(fd)
                covered = _covers(meta, st)
                written = True
                try:
                    write(fd, data)
                except OSError as exc:
                    raise _WriteFailed(exc) from None
                end = os.lseek(fd, 0, os.SEEK_CUR)
                if end - len(data) != st.st_size or not (covered or st.st_size == 0):
                    return  # not contiguous with what the index covers: the readers index it
                if not covered:
                    reset_index(db, self.path, st)  # an empty file: a new one, or one rotated by truncation
                self._extend(db, fd, st.st_size, data, spans)
        except _WriteFailed as failed:
            raise failed.error from None
        except IndexUnusable as problem:
            database.recover(problem)  # made anew, or in memory from now on (then: no more extending)
            if database.in_memory:
                self._off = True
            if not written:
                write(fd, data)
        except (FileChanged, sqlite3.Error, OSError):
            if not written:
                write(fd, data)

    def _open(self) -> Optional[IndexDatabase]:
        if not sqlite_usable():
            return None  # forked while a thread was inside SQLite: the line goes out, without the index
        if self._database is None and not self._off:
            database = IndexDatabase(self.path, self._index_dir)
            if database.in_memory:  # an index only this process would see: not worth extending
                database.close()
                self._off = True
                return None
            self._database = database
        return self._database

    def _extend(
        self, db: sqlite3.Connection, fd: int, start: int, data: bytes, spans: Optional[Sequence[Sequence[Span]]]
    ) -> None:
        fold = RunsFold()
        pairs: dict[int, set[tuple[str, str]]] = {}
        refs: list[tuple[int, int, int]] = []
        if spans is not None:
            offset, at = start, 0
            for line_spans in spans:
                nl = data.find(b"\n", at)
                if nl < 0:
                    raise FileChanged  # fewer lines than their spans say: leave them to the readers
                named: set[tuple[str, str]] = set()
                for span in line_spans:
                    fold.add(span)
                    named |= stage_pairs(span)
                if named:
                    pairs[offset] = named
                    refs.append((offset, nl - at, zlib.crc32(memoryview(data)[at:nl])))
                offset += nl + 1 - at
                at = nl + 1
        store_lines(db, fold, pairs, refs)
        end = start + len(data)
        st = os.fstat(fd)
        rows = [("upto", end), ("size", end), ("mtime_ns", st.st_mtime_ns), ("tail_crc", tail_crc(fd, end))]
        if start < WINDOW:  # the head the readers check grew too
            rows.append(("head_crc", crc_at(fd, 0, min(end, WINDOW))))
        db.executemany("INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)", rows)

    def close(self) -> None:
        if self._database is not None:
            self._database.close()
            self._database = None


def _covers(meta: dict[str, object], st: os.stat_result) -> bool:
    """Whether the index describes this file to its last byte, and nothing wrote to it since."""
    return (
        meta.get("format") == FORMAT
        and meta.get("version") == VERSION
        and (meta.get("dev"), meta.get("ino")) == (st.st_dev, st.st_ino)
        and meta.get("upto") == meta.get("size") == st.st_size
        and meta.get("mtime_ns") == st.st_mtime_ns
    )


class _WriteFailed(Exception):
    """The write itself failed (raised to the caller as it is); any other failure is the index's."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error
