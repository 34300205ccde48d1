"""A damaged or a locked file index: made anew or bypassed, with one warning; never a traceback, never a wait.

The index is a cache (readback/index_db.py). Damage (bytes overwritten, a table another
program made) is met on whichever query path reads the broken part: each must answer
from the file. A lock another process holds (a `show` suspended with Ctrl-Z in the middle
of a build) must not make a query wait: the lock holder here is a process that keeps the
index's write lock until the test releases it, after its assertions.
"""

from __future__ import annotations

import json
import logging
import os
import random
import sqlite3
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from embedded_helpers import embedded_runtime

import cw_middleware as cw
from cw_middleware._cli import main as cli
from cw_middleware._readback.index_db import index_location
from cw_middleware._serve.server import Limits, make_server

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
RUN = "run-a"


def _export(path: Path, stages: list[str]) -> None:
    with embedded_runtime(export=f"file:{path}", export_interval_ms=10, index_writes=False) as rt:  # the readers index it
        for stage_id in stages:
            with cw.stage(RUN, stage_id):
                cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="ok")
            rt.flush(5)


def _indexed(tmp_path: Path, stages: list[str]) -> tuple[Path, Path]:
    """A telemetry file and its index on disk, built by a reader that is closed again."""
    path = tmp_path / "t.jsonl"
    _export(path, stages)
    with cw.reader(f"file:{path}") as reader:
        assert [s.stage_id for s in reader.stages(RUN)] == stages
    location = index_location(str(path), os.environ["CW_INDEX_DIR"])
    assert location is not None and os.path.exists(location)
    return path, Path(location)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "index" in r.getMessage()]


QUERIES: dict[str, Callable[[cw.Reader], Any]] = {
    "show": lambda r: r.context_window(RUN, "s@1").available,
    "stages": lambda r: [s.stage_id for s in r.stages(RUN)],
    "runs": lambda r: [(run.run_id, run.stages) for run in r.runs()],
}
EXPECTED = {"show": True, "stages": ["s@1", "s@2"], "runs": [(RUN, 2)]}


@pytest.mark.parametrize("query", QUERIES)
def test_random_bytes_over_the_index_are_met_on_any_query_path_and_rebuilt_once(tmp_path, caplog, query):
    path, location = _indexed(tmp_path, ["s@1", "s@2"])
    data = bytearray(location.read_bytes())
    noise = random.Random(7)
    for i in range(2 * 4096, len(data)):  # all but the schema page and the first table's (meta): opening still works
        data[i] = noise.randrange(256)
    location.write_bytes(bytes(data))
    caplog.set_level(logging.WARNING, logger="cw_middleware")
    with cw.reader(f"file:{path}") as reader:
        assert QUERIES[query](reader) == EXPECTED[query]
        assert QUERIES[query](reader) == EXPECTED[query]  # and the index made anew serves the next query
    assert len(_warnings(caplog)) == 1 and "damaged" in _warnings(caplog)[0]


# A table this index did not make, in place of its own: each breaks one query path.
FOREIGN = {
    "stage_lines": ("show", "a stage's newest line"),
    "stages": ("stages", "a run's listing"),
    "lines": ("catch_up", "lines appended since the last query"),
}


@pytest.mark.parametrize("table", FOREIGN)
def test_a_foreign_table_is_met_where_it_is_read_and_the_index_made_anew(tmp_path, caplog, table):
    path, location = _indexed(tmp_path, ["s@1", "s@2"])
    with sqlite3.connect(location) as db:
        db.execute(f"DROP TABLE {table}")
        db.execute(f"CREATE TABLE {table} (something TEXT)")
    path_kind, _ = FOREIGN[table]
    if path_kind == "catch_up":
        _export(path, ["s@3"])
    caplog.set_level(logging.WARNING, logger="cw_middleware")
    with cw.reader(f"file:{path}") as reader:
        if path_kind == "show":
            assert reader.context_window(RUN, "s@2").available
        elif path_kind == "stages":
            assert [s.stage_id for s in reader.stages(RUN)] == ["s@1", "s@2"]
        else:
            assert reader.context_window(RUN, "s@3").available
    assert len(_warnings(caplog)) == 1 and "damaged" in _warnings(caplog)[0]


def test_the_cli_on_a_damaged_index_answers_without_a_traceback(tmp_path, capsys):
    path, location = _indexed(tmp_path, ["s@1", "s@2"])
    with sqlite3.connect(location) as db:
        db.execute("DROP TABLE stage_lines")
        db.execute("CREATE TABLE stage_lines (x)")
    assert cli.main(["show", RUN, "s@1", "--backend", f"file:{path}", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["available"] is True and "Traceback" not in captured.err


# ---------------------------------------------------------------- a lock another process holds

HOLDER = r"""
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")  # the write lock, as a build in progress holds it
print("locked", flush=True)
sys.stdin.read()  # until the test releases it
"""


@contextmanager
def _write_lock_held(location: Path) -> Iterator[None]:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(location)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        yield
    finally:
        assert holder.stdin is not None
        holder.stdin.close()  # released only now, after the test's assertions
        holder.wait(10)


def _while_locked(fn: Callable[[], Any]) -> Any:
    """``fn()`` on another thread; its answer, which must come while the lock is still held."""
    out: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: out.update(answer=fn()), daemon=True)
    worker.start()
    worker.join(20)  # the old busy timeout was 60 s: a query that waits on the lock is still here
    assert not worker.is_alive(), "the query waited on the other process's lock"
    return out["answer"]


def test_an_unchanged_file_is_answered_from_the_locked_index_without_taking_the_lock(tmp_path, caplog):
    path, location = _indexed(tmp_path, ["s@1", "s@2"])
    caplog.set_level(logging.WARNING, logger="cw_middleware")
    with _write_lock_held(location):
        with cw.reader(f"file:{path}") as reader:
            assert _while_locked(lambda: reader.context_window(RUN, "s@2").available)
            assert _while_locked(lambda: [s.stage_id for s in reader.stages(RUN)]) == ["s@1", "s@2"]
    assert _warnings(caplog) == []  # nothing to add, so the lock was never needed


def test_new_lines_behind_a_locked_index_are_read_from_the_file_with_one_warning(tmp_path, caplog):
    path, location = _indexed(tmp_path, ["s@1", "s@2"])
    _export(path, ["s@3"])
    caplog.set_level(logging.WARNING, logger="cw_middleware")
    with _write_lock_held(location):
        with cw.reader(f"file:{path}") as reader:
            assert _while_locked(lambda: reader.context_window(RUN, "s@3").available)
            assert _while_locked(lambda: [s.stage_id for s in reader.stages(RUN)]) == ["s@1", "s@2", "s@3"]
    assert len(_warnings(caplog)) == 1 and "locked" in _warnings(caplog)[0]


def test_serve_answers_every_request_while_another_process_holds_the_index_lock(tmp_path):
    path, location = _indexed(tmp_path, ["s@1", "s@2"])
    _export(path, ["s@3"])
    limits = Limits(max_queries=2)
    with _write_lock_held(location):
        server = make_server(cw.reader(f"file:{path}"), "127.0.0.1", 0, limits=limits)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:

            def ask() -> list[int]:
                statuses = []
                for stage in ["s@1", "s@2", "s@3"] * 2:  # more requests than query slots, one after another
                    url = f"{server.url}/api/v1/runs/{RUN}/stages/{stage.replace('@', '%40')}/context-window"
                    with urllib.request.urlopen(url, timeout=10) as response:
                        statuses.append(response.status)
                return statuses

            assert _while_locked(ask) == [200] * 6
        finally:
            server.shutdown()
            server.server_close()
