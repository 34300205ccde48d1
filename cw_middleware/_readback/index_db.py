"""Where a file index is stored, and what becomes of it when that storage fails: never a traceback, never a wait.

One SQLite database per telemetry file, in the index directory (``$CW_INDEX_DIR``, else
the user's cache; ``memory``: none), shared by every process that reads the file:
journal WAL, so a reader never waits on a writer, and ``synchronous=NORMAL`` (a cache,
rebuilt if lost). The index is only a cache, so each failure has a way out:

- damaged (bytes overwritten, a table this module did not make, another format's
  header): the database is deleted and made anew, and the file indexed again;
- locked for longer than `BUSY_TIMEOUT` by another process (a build under way, a
  ``show`` suspended with Ctrl-Z mid-build), unwritable, full or unreadable: this
  process keeps an index of its own in memory from then on, built from the file.

Each says so once, in one warning naming the index and what happened.

Every use of a connection is a section of `SqliteCalls` (`in_sqlite`): SQLite holds process-wide
mutexes (its file system layer's, its allocator's) inside its calls, and a fork while another
thread is inside leaves them held in the child, whose first SQLite call would wait forever (the
exporter's first append in a forked child, 3 forks in 4,000 under load). So a fork waits
until no thread is inside, at most `FORK_WAIT`, and holds new sections back until it is done.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Optional

from .._kernel.log import RateLimitedLog
from .._kernel.process import PROCESS

FORMAT = "cw-middleware file index"
VERSION = "3"  # 2: a stage's parent (a sub-agent's stage); 3: each stage's summary row; another version is made anew
MEMORY = "memory"  # the index directory that keeps every index in memory
BUSY_TIMEOUT = 0.25  # seconds to wait for another process's write lock before indexing in memory instead
# Seconds a fork waits for the threads inside SQLite: a section is a transaction (at most
# BUSY_TIMEOUT of waiting, plus a chunk of the file indexed), so only a stuck disk takes longer.
FORK_WAIT = 5.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lines (n INTEGER PRIMARY KEY, off INTEGER NOT NULL, len INTEGER NOT NULL, crc INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS stages (
    id INTEGER PRIMARY KEY, run TEXT NOT NULL, stage TEXT NOT NULL, listed INTEGER NOT NULL DEFAULT 0,
    kind TEXT, state TEXT, first_ns INTEGER NOT NULL DEFAULT 0, last_ns INTEGER NOT NULL DEFAULT 0, parent TEXT,
    UNIQUE (run, stage));
CREATE TABLE IF NOT EXISTS stage_lines (stage INTEGER NOT NULL, line INTEGER NOT NULL, PRIMARY KEY (stage, line)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS stage_rows (stage INTEGER PRIMARY KEY, newest INTEGER NOT NULL, key TEXT NOT NULL, row BLOB NOT NULL);
"""

# SQLite's primary result codes that say the storage is busy or out of reach, not that the index is damaged.
_BUSY = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED
_OUT_OF_REACH = frozenset({3, 7, 8, 10, 13, 14, 15, 23})  # PERM, NOMEM, READONLY, IOERR, FULL, CANTOPEN, PROTOCOL, AUTH

_log = RateLimitedLog()


class SqliteCalls:
    """The threads inside SQLite (a part of the process state, a `ForkGate`): a fork waits for them."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._inside = 0  # sections in flight, outermost ones
        self._forks = 0  # forks under way, holding new sections back
        self._local = threading.local()  # .depth: this thread's nested sections
        self.usable = True  # False in a child forked while a thread was inside (FORK_WAIT ran out)

    @contextmanager
    def section(self) -> Iterator[None]:
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            with self._cond:
                self._cond.wait_for(lambda: self._forks == 0, timeout=FORK_WAIT)
                self._inside += 1
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth
            if depth == 0:
                with self._cond:
                    self._inside -= 1
                    self._cond.notify_all()

    def before_fork(self) -> None:
        if getattr(self._local, "depth", 0):
            return  # forked from inside a section: waiting for it would wait for itself
        with self._cond:
            self._forks += 1
            if self._cond.wait_for(lambda: self._inside == 0, timeout=FORK_WAIT):
                return
        _log.warning(
            "fork-wait",
            f"cw_middleware: a fork went ahead while another thread was inside SQLite for over {FORK_WAIT:g} s; "
            "the child writes its telemetry without the file index, and reading the file there may not answer",
        )

    def after_fork_in_parent(self) -> None:
        with self._cond:
            self._forks = max(0, self._forks - 1)
            self._cond.notify_all()

    def after_fork_in_child(self) -> None:
        mine = 1 if getattr(self._local, "depth", 0) else 0  # the forking thread's own section, if any, goes on here
        self.usable = self.usable and self._inside == mine
        self._cond = threading.Condition(threading.Lock())
        self._inside, self._forks = mine, 0


def sqlite_usable() -> bool:
    """False in a process forked while another thread was inside SQLite: its mutexes may be held for good."""
    return PROCESS.part(SqliteCalls).usable


def in_sqlite() -> AbstractContextManager[None]:
    """A section around SQLite calls (see the module docstring); nested ones count once."""
    return PROCESS.part(SqliteCalls).section()


class IndexUnusable(Exception):
    """The index's storage failed: ``damaged`` (make it anew) or not (busy, or out of reach: go on in memory)."""

    def __init__(self, reason: str, damaged: bool) -> None:
        super().__init__(reason)
        self.reason, self.damaged = reason, damaged


def index_location(path: str, index_dir: str) -> Optional[str]:
    """The database file of ``path``'s index (one ``<hash of the path>.sqlite``); None for an index in memory."""
    if index_dir == MEMORY:
        return None
    name = hashlib.sha256(os.path.abspath(path).encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return os.path.join(index_dir, f"{name}.sqlite")


def unusable(exc: BaseException) -> IndexUnusable:
    """What a storage error means for the index."""
    if isinstance(exc, OSError):
        return IndexUnusable(type(exc).__name__ + (f" ({exc.strerror})" if exc.strerror else ""), damaged=False)
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    text = str(exc)
    if primary in _BUSY or "locked" in text:
        return IndexUnusable(f"locked by another process for more than {BUSY_TIMEOUT:g} s", damaged=False)
    if primary in _OUT_OF_REACH or isinstance(exc, (sqlite3.ProgrammingError, sqlite3.InterfaceError)):
        return IndexUnusable(text, damaged=False)  # the storage (or this connection) failed, not the index in it
    return IndexUnusable(text, damaged=True)  # corrupt, not a database, a foreign schema or foreign rows


class IndexDatabase:
    """The SQLite connection of one file's index: on disk (shared) until a failure sends it to memory (this process's own)."""

    def __init__(self, path: str, index_dir: str) -> None:
        self.path = path
        self.location = index_location(path, index_dir)
        self.connection = self._connect()

    @property
    def in_memory(self) -> bool:
        return self.location is None

    def _connect(self) -> sqlite3.Connection:
        if self.location is not None:
            try:
                os.makedirs(os.path.dirname(self.location), mode=0o700, exist_ok=True)
                return _open(self.location)
            except (OSError, sqlite3.Error) as exc:
                problem = unusable(exc)
                if problem.damaged:
                    try:
                        self._remove()
                        connection = _open(self.location)
                        self._say(problem, "made anew")
                        return connection
                    except (OSError, sqlite3.Error) as again:
                        problem = unusable(again)
                self._say(problem, "indexing in memory in this process")
                self.location = None
        return _open(":memory:")

    @contextmanager
    def guard(self) -> Iterator[sqlite3.Connection]:
        """The connection, inside a section (`in_sqlite`); a storage error inside as `IndexUnusable`."""
        try:
            with in_sqlite():
                yield self.connection
        except sqlite3.Error as exc:  # not OSError: reading the telemetry file is not the index's failure
            raise unusable(exc) from None

    @contextmanager
    def writing(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, across processes; `IndexUnusable` when another holds the lock past `BUSY_TIMEOUT`."""
        with self.guard() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def recover(self, problem: IndexUnusable) -> None:
        """After a failure: a damaged database on disk is made anew; any other failure, or one in memory, goes to memory."""
        try:
            with in_sqlite():
                self.connection.close()
        except sqlite3.Error:
            pass
        if self.location is not None and problem.damaged:
            try:
                self._remove()
                self.connection = _open(self.location)
                self._say(problem, "made anew")
                return
            except (OSError, sqlite3.Error) as exc:
                problem = unusable(exc)
        if self.location is not None:
            self._say(problem, "indexing in memory in this process")
            self.location = None
        self.connection = _open(":memory:")

    def close(self) -> None:
        with in_sqlite():
            self.connection.close()

    def _remove(self) -> None:
        assert self.location is not None
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.remove(self.location + suffix)
            except FileNotFoundError:
                pass

    def _say(self, problem: IndexUnusable, outcome: str) -> None:
        what = "damaged" if problem.damaged else "unusable"
        _log.warning(
            f"index:{self.location}:{outcome}",
            f"cw_middleware: the index of {self.path} at {self.location} is {what} ({problem.reason}): {outcome}",
        )


def _open(location: str) -> sqlite3.Connection:
    with in_sqlite():
        db = sqlite3.connect(location, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False)
        try:
            if location != ":memory:":
                os.chmod(location, 0o600)
                db.execute("PRAGMA journal_mode=WAL")
                # A rebuildable cache: a commit need not wait for the disk (WAL keeps it consistent;
                # a power cut may lose the last commits, and the next query indexes those lines again).
                db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(SCHEMA)
            header = dict(db.execute("SELECT k, v FROM meta WHERE k IN ('format', 'version')").fetchall())
            if header and header != {"format": FORMAT, "version": VERSION}:
                raise sqlite3.DatabaseError("not an index of this format")
        except BaseException:
            db.close()
            raise
        return db
