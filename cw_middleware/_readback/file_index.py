"""A content-free index of one OTLP JSON lines file: which lines name which stage, and each stage's listing state.

The file reader answers from it instead of scanning the file: ``stages`` and
``runs`` come from the index alone, and ``latest`` reads only the newest lines
that name the stage. cw's own exporter extends the index as it appends
(`index_append`); for what it does not cover (a Collector's file, another
program's lines) the index is built on the first query and then kept up to
date incrementally: each query folds in only the lines appended since the last
one (a ``stat`` call when nothing changed).

The first build reads the file once, 4 MB at a time, splitting lines itself
(`file_lines`: a line that straddles two blocks is the only copy made), and decodes each line narrowly
(`otlp_json.index_spans`: span names, times and the attributes `fold.INDEX_KEYS`
names; every other attribute value is skipped undecoded, trace and span ids are
not read); metrics and logs lines are recognised by their first bytes and never
decoded. A differential test holds that narrow read equal to the full decode on
every shape writers use (tests/readback/test_file_index_fast_path.py). On a 1 GB
file of our writer's output that is ~2x faster than the full decode, and still
~50x the time of reading the file (`benchmarks/readback_1gb.py` reports both):
the cost is msgspec building the attribute lists, which the index cannot skip
because every span names its stage there. It commits every `CHUNK_BYTES`
(journal WAL, ``synchronous=NORMAL``: a cache, rebuilt if lost), and tells a
`reporting_progress` callback how far it is (the CLI shows it; the library says
nothing).

What it holds (SQLite, one database per telemetry file): for each line that
names a stage, its offset, length and CRC-32; for each (run id, stage id), the
lines that name it and what a stage listing shows (kind, live/stored, first and
last activity time); and, once a run's summary has read a stage, the stage's row of
it (its totals and suggestions, as of its newest line: `stage_lines`), so that the
next summary reads only the stages a line has named since. Ids, offsets, counts, times
and those rows' numbers and source names (all of them in the file already): never prompt
text or any other content.

Where it lives (`index_db`): ``$CW_INDEX_DIR``, else ``$XDG_CACHE_HOME/cw-middleware/file-index``,
else ``~/.cache/cw-middleware/file-index`` (one ``<hash of the path>.sqlite``);
``CW_INDEX_DIR=memory`` keeps it in memory, rebuilt by each process. Never beside the
telemetry file: rotation tools match ``file.jsonl*``. A query never waits on another
process: it first checks the index against the file without a lock (WAL readers never
wait) and takes the write lock only when there are lines to add, waiting at most
`index_db.BUSY_TIMEOUT`; a lock held longer, an unwritable or full cache directory
sends this process to an index of its own in memory; a damaged index is made anew.
Either says so in one warning, on whichever query meets it.

Never trusted blindly: before use, its header (format and version), the file's
device and inode, its size (never smaller than what was indexed) and the CRC-32
of the file's first and last indexed 64 KiB must match, and every line read is
checked against its stored length and CRC. Anything else (``copytruncate``
rotation, a file replaced) rebuilds it from the start.

The file may shrink or be replaced at any moment: it is read with plain reads
(never memory-mapped, so a truncation cannot raise SIGBUS), a short read or a
changed head means it changed under the scan, and the scan starts again; after
`RESTARTS` tries the query fails with a `BackendUnavailable` that names the file.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import zlib
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import IO, Any, Optional

from .._kernel.config import resolve_read
from .._kernel.contract import Staleness
from .._kernel.errors import BackendUnavailable
from . import file_lines, stop
from .fold import (
    INDEX_KEYS,
    Horizon,
    RunsFold,
    RunSummary,
    StageState,
    StageSummary,
    stage_pairs,
    summarize_runs,
    summarize_stages,
)
from .index_db import FORMAT, VERSION, IndexDatabase, IndexUnusable
from .otlp_json import index_spans

RESTARTS = 3  # scans started again when the file changes under them, before the query fails
WINDOW = 1 << 16  # bytes of the file's head and of the indexed tail whose CRC-32 must match
CHUNK_BYTES = 32 << 20  # committed a chunk at a time: progress survives, other processes interleave
# (path, bytes indexed so far, the file's size): told after each chunk a refresh indexes. Unset in the
# library (it says nothing); the CLI sets it around a query to say that a first query is indexing.
Progress = Callable[[str, int, int], None]
_progress: ContextVar[Optional[Progress]] = ContextVar("cw_middleware_index_progress", default=None)


@contextmanager
def reporting_progress(callback: Progress) -> Iterator[None]:
    """Within the block (this thread or task), index builds tell ``callback`` how far they are."""
    token = _progress.set(callback)
    try:
        yield
    finally:
        _progress.reset(token)


@dataclass(frozen=True)
class LineRef:
    """Where one indexed line sits in the file."""

    n: int
    offset: int
    length: int
    crc: int


class FileChanged(Exception):
    """The file shrank, was replaced or no longer matches the index: start again."""


class FileIndex:
    """The index of one telemetry file. Thread-safe; several processes may share one on disk."""

    def __init__(self, path: str, index_dir: Optional[str] = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._seen: Optional[tuple[int, int, int, int]] = None  # (dev, ino, size, mtime) at the last refresh
        self.generation = ""  # a new value each time the index is rebuilt (line numbers start again)
        self._upto = 0  # bytes of the file indexed, as of the last chunk
        self._database = IndexDatabase(path, resolve_read().index_dir if index_dir is None else index_dir)

    # ------------------------------------------------------------ storage

    @property
    def _db(self) -> sqlite3.Connection:
        return self._database.connection

    def close(self) -> None:
        with self._lock:
            self._database.close()

    @contextmanager
    def _query(self) -> Iterator[sqlite3.Connection]:
        """The database for one query, under the lock. A storage failure is recovered from (`index_db`) and
        the query told to start again (FileChanged): the next refresh indexes the file anew."""
        with self._lock:
            try:
                with self._database.guard() as db:
                    yield db
            except IndexUnusable as problem:
                self._database.recover(problem)
                self._seen = None
                raise FileChanged from None

    def _meta(self) -> dict[str, Any]:
        return dict(self._db.execute("SELECT k, v FROM meta").fetchall())

    # ------------------------------------------------------------ keeping up with the file

    def refresh(self) -> bool:
        """Fold in what the file gained since the last call; False when there is no file."""
        with self._lock:
            restarts = recoveries = 0
            while True:
                try:
                    return self._catch_up()
                except FileChanged:
                    self._seen = None
                    restarts += 1
                    if restarts >= RESTARTS:
                        raise BackendUnavailable(
                            f"the telemetry file {self.path} kept changing while it was read (truncated or replaced during "
                            "the scan); try again"
                        ) from None
                except IndexUnusable as problem:
                    recoveries += 1
                    if recoveries > 2:  # made anew, then in memory: a third failure is not the storage's
                        raise BackendUnavailable(f"the index of {self.path} cannot be used ({problem.reason})") from None
                    self._database.recover(problem)
                    self._seen = None

    def _catch_up(self) -> bool:
        try:
            f = open(self.path, "rb", buffering=1 << 20)
        except FileNotFoundError:
            self._seen = None
            return False
        except OSError as exc:
            raise BackendUnavailable(f"cannot read telemetry file {self.path}: {exc.strerror}") from None
        with f:
            st = os.fstat(f.fileno())
            seen = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            if seen == self._seen:
                return True
            report = _progress.get()
            # A guard (a section a fork waits for) per step, not around the whole build: each chunk is one.
            with self._database.guard():
                # Read-only first: the write lock is taken only when there is something to add.
                held = self._holds(f, st.st_size)
            while not held and self._index_chunk(f, st.st_size):
                stop.check()  # between chunks: each one is committed, the next query goes on from it
                if report is not None:
                    report(self.path, self._upto, st.st_size)
            with self._database.guard():
                self.generation = str(self._meta().get("generation", ""))
            self._seen = seen
        return True

    def _holds(self, f: IO[bytes], size: int) -> bool:
        """Whether the index describes this file up to ``size`` already (no lock taken: WAL readers never wait)."""
        meta = self._meta()
        if not self._matches(meta, f) or meta["upto"] < size:
            return False
        self._upto = meta["upto"]
        return True

    def _index_chunk(self, f: IO[bytes], size: int) -> bool:
        """Index up to `CHUNK_BYTES` more of the file (up to ``size``) in one transaction; False when done."""
        with self._database.writing() as db:
            meta = self._meta()
            if not self._matches(meta, f):
                reset_index(db, self.path, os.fstat(f.fileno()))
                meta = self._meta()
            upto = self._upto = int(meta["upto"])
            if upto >= size:
                return False
            start = upto
            head = os.pread(f.fileno(), WINDOW, 0)
            upto, fold, pairs, line_refs = self._scan(f, upto, min(size, upto + CHUNK_BYTES), size)
            store_lines(db, fold, pairs, line_refs)
            # Truncated and written again while we read (copytruncate, then the writer's next lines)?
            # Then the head changed, or the file is now shorter than what we read.
            st = os.fstat(f.fileno())
            head_now = os.pread(f.fileno(), WINDOW, 0)
            same = min(len(head), len(head_now))
            if st.st_size < upto or head[:same] != head_now[:same]:
                raise FileChanged
            db.executemany(
                "INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)",
                [
                    ("upto", upto),
                    ("size", st.st_size),
                    ("mtime_ns", st.st_mtime_ns),
                    ("head_crc", crc_at(f.fileno(), 0, min(upto, WINDOW))),
                    ("tail_crc", tail_crc(f.fileno(), upto)),
                ],
            )
            self._upto = upto
            return start < upto < size  # more to do, unless only an unfinished last line is left

    def _matches(self, meta: dict[str, Any], f: IO[bytes]) -> bool:
        """Whether the index describes this file: header, identity, size, head and tail checksums."""
        st = os.fstat(f.fileno())
        if meta.get("format") != FORMAT or meta.get("version") != VERSION:
            return False
        if (meta.get("dev"), meta.get("ino")) != (st.st_dev, st.st_ino):
            return False
        upto = meta.get("upto")
        if not isinstance(upto, int):
            return False  # none yet, or a value this module never writes
        if st.st_size < upto:
            return False
        if st.st_size == meta.get("size") and st.st_mtime_ns != meta.get("mtime_ns"):
            return False  # written to without growing: rewritten in place, not appended to
        fd = f.fileno()
        return crc_at(fd, 0, min(upto, WINDOW)) == meta.get("head_crc") and tail_crc(fd, upto) == meta.get("tail_crc")

    def _scan(
        self, f: IO[bytes], upto: int, stop: int, size: int
    ) -> tuple[int, RunsFold, dict[int, set[tuple[str, str]]], list[tuple[int, int, int]]]:
        """Decode the lines that start in [upto, stop); (new upto, their fold, pairs by line offset, line refs)."""
        fold = RunsFold()
        pairs: dict[int, set[tuple[str, str]]] = {}
        refs: list[tuple[int, int, int]] = []
        end = upto
        for offset, body, length, ended in file_lines.lines(f, upto, stop):
            if not ended and offset + length < size:
                raise FileChanged  # the end of the file came before the size it had: it shrank
            if not length:
                break
            spans_inside = body is not None and length <= file_lines.MAX_LINE and file_lines.looks_like_spans(body[:24])
            found = _line_spans(body) if spans_inside else None
            if not ended and not found:
                break  # the last line has no newline yet: indexed once it is a whole export batch, else next time
            named: set[tuple[str, str]] = set()
            for span in found or ():
                fold.add(span)
                named |= stage_pairs(span)
            if named and body is not None:
                pairs[offset] = named
                refs.append((offset, len(body), zlib.crc32(body)))
            end = offset + length
        return end, fold, pairs, refs

    # ------------------------------------------------------------ queries (call refresh() first)

    # Each query reads the database under `_query`: if its storage fails there, the query raises
    # FileChanged and starts again on an index made anew (or in memory).

    def newest_line(self, run_id: str, stage_id: str) -> Optional[int]:
        """The number of the newest line naming the stage (None: no line does)."""
        with self._query() as db:
            row = db.execute(
                "SELECT MAX(sl.line) FROM stage_lines sl JOIN stages s ON s.id = sl.stage WHERE s.run = ? AND s.stage = ?",
                (run_id, stage_id),
            ).fetchone()
        return row[0] if row else None

    def lines_newest_first(self, run_id: str, stage_id: str, page: int = 16) -> Iterator[LineRef]:
        """The lines that name the stage, newest first, fetched a page at a time."""
        before = 1 << 62
        while True:
            with self._query() as db:
                rows = db.execute(
                    "SELECT l.n, l.off, l.len, l.crc FROM stages s JOIN stage_lines sl ON sl.stage = s.id"
                    " JOIN lines l ON l.n = sl.line WHERE s.run = ? AND s.stage = ? AND sl.line < ?"
                    " ORDER BY sl.line DESC LIMIT ?",
                    (run_id, stage_id, before, page),
                ).fetchall()
            yield from (LineRef(*row) for row in rows)
            if len(rows) < page:
                return
            before = rows[-1][0]

    def run_lines_newest_first(self, run_id: str) -> Iterator[LineRef]:
        """The lines that name any stage of the run, each once, newest first.

        In one query: paged like `lines_newest_first`, each page sorted the run's every line again
        (10,000 stages: 780 pages of ~14 ms). The rows are packed, 32 bytes a line."""
        with self._query() as db:
            rows = db.execute(
                "SELECT DISTINCT l.n, l.off, l.len, l.crc FROM stages s JOIN stage_lines sl ON sl.stage = s.id"
                " JOIN lines l ON l.n = sl.line WHERE s.run = ? ORDER BY l.n DESC",
                (run_id,),
            )
            packed = array("q", (field for row in rows for field in row))
        for at in range(0, len(packed), 4):
            yield LineRef(*packed[at : at + 4])

    def stage_lines(self, run_id: str, key: str) -> dict[str, tuple[int, int, Optional[bytes]]]:
        """Each stage of the run: its oldest and newest line, and its row kept under ``key`` (`keep_stage_rows`)
        when no line has named the stage since (else None)."""
        with self._query() as db:
            rows = db.execute(
                "SELECT s.stage, MIN(sl.line), MAX(sl.line), r.newest, r.row FROM stages s"
                " JOIN stage_lines sl ON sl.stage = s.id LEFT JOIN stage_rows r ON r.stage = s.id AND r.key = ?"
                " WHERE s.run = ? GROUP BY s.id",
                (key, run_id),
            ).fetchall()
        return {stage: (oldest, newest, row if kept == newest else None) for stage, oldest, newest, kept, row in rows}

    def keep_stage_rows(self, run_id: str, key: str, rows: list[tuple[str, int, bytes]]) -> None:
        """Keep each (stage, its newest line then, its row): valid until a line names the stage again. Best effort:
        a busy or failing index keeps none (a cache of what the lines say; the next query recovers the storage)."""
        try:
            with self._lock, self._database.writing() as db:
                db.executemany(
                    "INSERT OR REPLACE INTO stage_rows (stage, newest, key, row)"
                    " SELECT id, ?, ?, ? FROM stages WHERE run = ? AND stage = ?",
                    [(newest, key, row, run_id, stage) for stage, newest, row in rows],
                )
        except IndexUnusable:
            pass

    def read_line(self, ref: LineRef) -> bytes:
        """The line's bytes, checked against the index (FileChanged when they differ)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            raise FileChanged from None
        except OSError as exc:
            raise BackendUnavailable(f"cannot read telemetry file {self.path}: {exc.strerror}") from None
        try:
            data = os.pread(fd, ref.length, ref.offset)
        finally:
            os.close(fd)
        if len(data) != ref.length or zlib.crc32(data) != ref.crc:
            raise FileChanged
        return data

    def stages(self, run_id: str, horizon: Horizon) -> Optional[list[StageSummary]]:
        """The run's stage listing, from the index alone."""
        with self._query() as db:
            rows = db.execute(
                "SELECT stage, kind, state, first_ns, last_ns, parent FROM stages WHERE run = ? AND listed = 1", (run_id,)
            ).fetchall()
            states = [(stage, _state(*rest)) for stage, *rest in rows]
        return summarize_stages(states, horizon)

    def holds_run(self, run_id: str) -> bool:
        """Whether any line names the run (what a run's listing would show)."""
        with self._query() as db:
            return db.execute("SELECT 1 FROM stages WHERE run = ? AND listed = 1 LIMIT 1", (run_id,)).fetchone() is not None

    def holds_stages(self) -> bool:
        """Whether any line of the file names a stage (our writer's spans always do)."""
        with self._query() as db:
            return db.execute("SELECT 1 FROM stages LIMIT 1").fetchone() is not None

    def runs(self, horizon: Horizon) -> list[RunSummary]:
        """Every run, from the index alone; the rows are streamed, so memory grows with the runs, not the stages."""
        with self._query() as db:
            cursor = db.execute("SELECT run, stage, kind, state, first_ns, last_ns, parent FROM stages WHERE listed = 1")
            rows = (row for page in iter(lambda: cursor.fetchmany(4096), []) for row in page)
            return summarize_runs(((run, stage, _state(*rest)) for run, stage, *rest in rows), horizon)

    def forget(self) -> None:
        """Make the next refresh check the file against the index in full (a line read did not match)."""
        with self._lock:
            self._seen = None
            try:
                with self._database.writing() as db:
                    db.execute("DELETE FROM meta WHERE k = 'upto'")  # fails `_matches`: rebuilt on the next refresh
            except IndexUnusable as problem:
                self._database.recover(problem)  # a database made anew (or in memory) holds nothing to forget


def crc_at(fd: int, offset: int, length: int) -> int:
    """The CRC-32 of ``length`` bytes of the file at ``offset`` (FileChanged when fewer are there)."""
    data = os.pread(fd, length, offset) if length else b""
    if len(data) != length:
        raise FileChanged
    return zlib.crc32(data)


def tail_crc(fd: int, upto: int) -> int:
    """The CRC-32 of the `WINDOW` bytes before ``upto`` (fewer near the start)."""
    start = max(0, upto - WINDOW)
    return crc_at(fd, start, upto - start)


def reset_index(db: sqlite3.Connection, path: str, st: os.stat_result) -> None:
    """Empty the index and describe the file anew (a new generation: line numbers start again)."""
    db.execute("DELETE FROM stage_rows")
    db.execute("DELETE FROM stage_lines")
    db.execute("DELETE FROM stages")
    db.execute("DELETE FROM lines")
    db.execute("DELETE FROM meta")
    db.executemany(
        "INSERT INTO meta (k, v) VALUES (?, ?)",
        [
            ("format", FORMAT),
            ("version", VERSION),
            ("path", os.path.abspath(path)),
            ("dev", st.st_dev),
            ("ino", st.st_ino),
            ("upto", 0),
            ("head_crc", zlib.crc32(b"")),
            ("tail_crc", zlib.crc32(b"")),
            ("generation", os.urandom(8).hex()),
        ],
    )


def store_lines(
    db: sqlite3.Connection,
    fold: RunsFold,
    pairs: dict[int, set[tuple[str, str]]],
    refs: list[tuple[int, int, int]],
) -> None:
    """Add lines to the index: ``refs`` (offset, length, CRC-32) in file order, the stages each names
    (``pairs`` by offset) and what their spans say of each stage (``fold``)."""
    ids: dict[tuple[str, str], int] = {}

    def stage_row(run_id: str, stage_id: str) -> int:
        key = (run_id, stage_id)
        if key not in ids:
            db.execute("INSERT OR IGNORE INTO stages (run, stage) VALUES (?, ?)", key)
            ids[key] = db.execute("SELECT id FROM stages WHERE run = ? AND stage = ?", key).fetchone()[0]
        return ids[key]

    for run_id, stage_id, later in fold.states():
        row_id = stage_row(run_id, stage_id)
        row = db.execute("SELECT kind, state, first_ns, last_ns, parent FROM stages WHERE id = ?", (row_id,)).fetchone()
        st = _state(*row)
        st.merge(later)
        db.execute(
            "UPDATE stages SET listed = 1, kind = ?, state = ?, first_ns = ?, last_ns = ?, parent = ? WHERE id = ?",
            (st.kind, st.state.value if st.state else None, _to_db(st.first_ns), _to_db(st.last_ns), st.parent, row_id),
        )
    next_n = (db.execute("SELECT MAX(n) FROM lines").fetchone()[0] or 0) + 1
    for offset, length, crc in refs:
        db.execute("INSERT INTO lines (n, off, len, crc) VALUES (?, ?, ?, ?)", (next_n, offset, length, crc))
        db.executemany(
            "INSERT OR IGNORE INTO stage_lines (stage, line) VALUES (?, ?)",
            [(stage_row(r, s), next_n) for r, s in pairs[offset]],
        )
        next_n += 1


_INT64 = (1 << 63) - 1
_BEYOND = 10**30  # a damaged time no datetime can hold: what the fold sees for one stored as _INT64


def _to_db(time_ns: int) -> int:
    return max(-_INT64, min(_INT64, time_ns))


def _from_db(time_ns: int) -> int:
    return _BEYOND if time_ns == _INT64 else time_ns


def _state(kind: Optional[str], state: Optional[str], first_ns: int, last_ns: int, parent: Optional[str] = None) -> StageState:
    try:
        if not isinstance(first_ns, int) or not isinstance(last_ns, int) or not isinstance(kind, (str, type(None))):
            raise TypeError
        if not isinstance(parent, (str, type(None))):
            raise TypeError
        return StageState(kind, Staleness(state) if state else None, _from_db(first_ns), _from_db(last_ns), parent)
    except (ValueError, TypeError):
        raise sqlite3.DatabaseError("a stage row this index never writes") from None  # damaged: made anew


def _line_spans(body: Any) -> Optional[list[Any]]:
    """The spans of a line with the attributes the index needs; None for a broken line."""
    try:
        return index_spans(body, INDEX_KEYS)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None  # a line being written right now, or a damaged one
