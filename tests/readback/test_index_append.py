"""The embedded exporter extends the file's index as it appends (cw_middleware/_readback/index_append.py, issue 22 gap 4).

A query on a file cw wrote reads no line it does not need: the seam counts the lines the
reader's index decodes (`file_index._line_spans`). What the writer stored must be what the
readers' own path stores for the same file (an index built from the file in another index
directory), with several writer processes on one file, after a writer died between its write and
the index's commit, and after copytruncate. A file written by another program keeps the readers'
path. Writers run in child processes where the point is several processes or a crash.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from embedded_helpers import embedded_runtime

import cw_middleware as cw
from cw_middleware._readback import file_index
from cw_middleware._readback.index_db import index_location

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
ROOT = Path(__file__).resolve().parents[2]
TABLES = {
    "stages": "SELECT run, stage, listed, kind, state, first_ns, last_ns FROM stages ORDER BY run, stage",
    "lines": "SELECT n, off, len, crc FROM lines ORDER BY n",
    "stage_lines": "SELECT s.run, s.stage, sl.line FROM stage_lines sl JOIN stages s ON s.id = sl.stage ORDER BY 1, 2, 3",
    "meta": "SELECT k, v FROM meta WHERE k NOT IN ('generation') ORDER BY k",
}


@pytest.fixture
def decoded(monkeypatch) -> list[int]:
    """One entry per line the readers' index decodes from the file."""
    seen: list[int] = []
    real = file_index._line_spans

    def counting(body):
        seen.append(len(body))
        return real(body)

    monkeypatch.setattr(file_index, "_line_spans", counting)
    return seen


def _export(path: Path, run_id: str, stages: int, calls: int = 2, **settings) -> None:
    with embedded_runtime(export=f"file:{path}", export_interval_ms=10, **settings) as rt:
        for s in range(stages):
            with cw.stage(run_id, f"s@{s}"):
                for i in range(calls):
                    cw.completion(model="gpt-4o", messages=[*MESSAGES, {"role": "user", "content": str(i)}], mock_response="ok")
            rt.flush(5)


def _answers(path: Path, runs: list[str]) -> dict:
    with cw.reader(f"file:{path}") as reader:
        out: dict = {"runs": sorted((r.run_id, r.stages) for r in reader.runs())}
        for run_id in runs:
            stages = reader.stages(run_id)
            out[run_id] = [(s.stage_id, s.kind, s.staleness) for s in stages]
            out[run_id, "latest"] = [reader.context_window(run_id, s.stage_id).input_tokens for s in stages]
        return out


def _tables(path: Path, index_dir: str) -> dict:
    location = index_location(str(path), index_dir)
    assert location is not None and os.path.exists(location)
    with sqlite3.connect(location) as db:
        return {name: db.execute(sql).fetchall() for name, sql in TABLES.items()}


def _rebuilt(path: Path, tmp_path: Path, monkeypatch, runs: list[str]) -> tuple[dict, dict]:
    """The answers and index tables of the readers' own path: the file indexed anew in another directory."""
    other = str(tmp_path / "rebuilt-index")
    with monkeypatch.context() as m:
        m.setenv("CW_INDEX_DIR", other)
        answers = _answers(path, runs)
    return answers, _tables(path, other)


def _span_lines(path: Path) -> int:
    return sum(1 for line in path.read_bytes().splitlines() if line.startswith(b'{"resourceSpans"'))


def test_the_first_query_on_a_file_cw_wrote_reads_none_of_its_lines(tmp_path, monkeypatch, decoded, file_index_dir):
    path = tmp_path / "t.jsonl"
    _export(path, "run-a", stages=6)
    _export(path, "run-b", stages=3)  # a second writer process's turn, later: still contiguous
    assert _span_lines(path) >= 9 * 3
    answers = _answers(path, ["run-a", "run-b"])
    assert decoded == []  # every line was indexed as it was written
    assert answers["runs"] == [("run-a", 6), ("run-b", 3)]
    assert all(tokens and tokens > 0 for tokens in answers["run-a", "latest"])
    rebuilt_answers, rebuilt_tables = _rebuilt(path, tmp_path, monkeypatch, ["run-a", "run-b"])
    assert len(decoded) >= _span_lines(path)  # the readers' path read them all
    assert answers == rebuilt_answers
    assert _tables(path, file_index_dir) == rebuilt_tables


def test_a_file_written_by_another_program_is_indexed_by_the_first_query(tmp_path, decoded):
    path = tmp_path / "t.jsonl"
    _export(path, "run-a", stages=2, index_writes=False)
    assert [s.stage_id for s in cw.reader(f"file:{path}").stages("run-a")] == ["s@0", "s@1"]
    assert len(decoded) == _span_lines(path)


def test_lines_appended_after_foreign_ones_are_indexed_again_once_a_query_caught_up(tmp_path, decoded):
    path = tmp_path / "t.jsonl"
    _export(path, "run-a", stages=1)
    with open(path, "ab") as f:
        f.write(b'{"resourceMetrics":[]}\n')  # another program's line: the index does not cover the file any more
    _export(path, "run-a", stages=2)  # s@0 and s@1 again, appended behind it: left to the readers
    assert [s.stage_id for s in cw.reader(f"file:{path}").stages("run-a")] == ["s@0", "s@1"]
    read = len(decoded)
    assert 0 < read < _span_lines(path)  # only what follows the foreign line
    _export(path, "run-b", stages=1)  # the index covers the file again: extended as it is written
    assert [s.stage_id for s in cw.reader(f"file:{path}").stages("run-b")] == ["s@0"]
    assert len(decoded) == read


def test_a_copytruncated_file_gets_a_new_index_from_its_writer(tmp_path, monkeypatch, decoded, file_index_dir):
    path = tmp_path / "t.jsonl"
    _export(path, "run-old", stages=2)
    assert [r.run_id for r in cw.reader(f"file:{path}").runs()] == ["run-old"]
    os.truncate(path, 0)
    _export(path, "run-new", stages=2)
    answers = _answers(path, ["run-new"])
    assert answers["runs"] == [("run-new", 2)] and decoded == []
    assert (answers, _tables(path, file_index_dir)) == _rebuilt(path, tmp_path, monkeypatch, ["run-new"])


WRITER = textwrap.dedent(
    r"""
    import os, sys, time
    sys.path[:0] = [{root!r}, {tests!r}]
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import cw_middleware as cw
    from cw_middleware._readback import index_append, index_db
    from embedded_helpers import embedded_runtime
    path, run_id, stages, crash_after = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    index_db.BUSY_TIMEOUT = 60  # writers wait for each other's turn here (a test on a loaded machine)
    if crash_after >= 0:
        stored = [0]
        real = index_append.store_lines
        def store_or_die(*args):
            stored[0] += 1
            if stored[0] > crash_after:
                os._exit(7)  # killed between the file write and the index's commit
            real(*args)
        index_append.store_lines = store_or_die
    open(path + "." + run_id + ".ready", "w").close()
    while not os.path.exists(path + ".go"):
        time.sleep(0.005)
    with embedded_runtime(export="file:" + path, export_interval_ms=10) as rt:
        for s in range(stages):
            with cw.stage(run_id, "s@%d" % s):
                for i in range(2):
                    cw.completion(model="gpt-4o", messages=[{{"role": "user", "content": "%s %d" % (run_id, i)}}],
                                  mock_response="ok")
            rt.flush(30)
    """
)


def _writers(path: Path, *jobs: tuple[str, int, int]) -> list[subprocess.Popen]:
    script = WRITER.format(root=str(ROOT), tests=str(ROOT / "tests"))
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(path), run_id, str(stages), str(crash_after)], env=os.environ.copy())
        for run_id, stages, crash_after in jobs
    ]
    for run_id, _, _ in jobs:
        marker = Path(f"{path}.{run_id}.ready")
        while not marker.exists():  # each imported, ready to write: they start together
            assert all(p.poll() is None for p in procs), "a writer ended before it wrote"
            time.sleep(0.005)
    Path(f"{path}.go").touch()
    return procs


@pytest.mark.system  # three fresh interpreters: other processes are the system tier
def test_several_writer_processes_on_one_file_keep_one_index(tmp_path, monkeypatch, decoded, file_index_dir):
    path = tmp_path / "t.jsonl"
    runs = ["run-p1", "run-p2", "run-p3"]
    procs = _writers(path, *((run_id, 4, -1) for run_id in runs))
    assert [p.wait(300) for p in procs] == [0, 0, 0]
    answers = _answers(path, runs)
    assert decoded == []  # their lines interleave in the file, and the index holds every one
    assert answers["runs"] == [(run_id, 4) for run_id in runs]
    assert (answers, _tables(path, file_index_dir)) == _rebuilt(path, tmp_path, monkeypatch, runs)


@pytest.mark.system  # a fresh interpreter killed mid-write
def test_a_writer_killed_between_its_write_and_the_commit_leaves_an_index_the_reader_repairs(
    tmp_path, monkeypatch, decoded, file_index_dir
):
    path = tmp_path / "t.jsonl"
    (proc,) = _writers(path, ("run-c", 3, 1))  # its second indexed append dies before the commit
    assert proc.wait(300) == 7
    lines = _span_lines(path)
    answers = _answers(path, ["run-c"])
    assert 0 < len(decoded) < lines  # only the lines the index missed
    assert answers["run-c"] and answers["run-c"][0][0] == "s@0"  # what it wrote before it died is answered
    assert (answers, _tables(path, file_index_dir)) == _rebuilt(path, tmp_path, monkeypatch, ["run-c"])
    read = len(decoded)
    _export(path, "run-d", stages=1)  # the index covers the file again: the next writer extends it
    assert [s.stage_id for s in cw.reader(f"file:{path}").stages("run-d")] == ["s@0"]
    assert len(decoded) == read
