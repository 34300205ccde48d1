"""A run's summary from the rows the file index keeps (issue 36 item 5): each stage's row as of its newest line, read
again once a line names the stage, and every number equal to the stage's own answer, whoever asks."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from embedded_helpers import embedded_runtime

import cw_middleware as cw
from cw_middleware._readback import otlp_file


def _calls(path: Path, stage_calls: dict[str, int]) -> None:
    with embedded_runtime(export=f"file:{path}", export_interval_ms=10):
        for stage_id, calls in stage_calls.items():
            with cw.stage("run-rows", stage_id):
                for i in range(calls):
                    words = " ".join(["word"] * (20 * (i + 1)))
                    cw.completion(model="gpt-4o", messages=[{"role": "user", "content": words}], mock_response="ok")


def _index_of(file_index_dir: str, path: Path) -> Path:
    """The index database of this telemetry file (the directory is the session's: other files' indexes are there too)."""
    for db in Path(file_index_dir).glob("*.sqlite"):
        with sqlite3.connect(db) as conn:
            row = conn.execute("SELECT v FROM meta WHERE k = 'path'").fetchone()
        if row and row[0] == str(path):
            return db
    raise AssertionError(f"no index of {path}")


def _kept(file_index_dir: str, path: Path) -> int:
    with sqlite3.connect(_index_of(file_index_dir, path)) as conn:
        return conn.execute("SELECT COUNT(*) FROM stage_rows").fetchone()[0]


def _agrees(reader, report) -> None:
    """Each row's totals are the stage's own answer's; the run's are their sum."""
    for row in report.stages:
        assert row.stage_totals == reader.context_window("run-rows", row.stage_id).stage_totals
    assert report.totals.calls == sum(row.stage_totals.calls for row in report.stages)
    assert report.totals.input_tokens == sum(row.stage_totals.input_tokens for row in report.stages)


def test_rows_are_kept_and_read_again_only_for_stages_a_new_line_names(tmp_path, file_index_dir, monkeypatch):
    path = tmp_path / "t.jsonl"
    _calls(path, {"a@1": 1, "b@1": 2, "c@1": 1})
    first = cw.reader(f"file:{path}").summary("run-rows")
    assert [r.stage_totals.calls for r in first.stages] == [1, 2, 1]
    assert _kept(file_index_dir, path) == 3

    read: list[list[str]] = []
    one_pass = otlp_file.OtlpFileReader.run_calls

    def recording(self, run_id, wanted, key, each):
        read.append(sorted(wanted))
        return one_pass(self, run_id, wanted, key, each)

    monkeypatch.setattr(otlp_file.OtlpFileReader, "run_calls", recording)
    again = cw.reader(f"file:{path}").summary("run-rows")  # a new reader: the rows come from the index
    assert read == [] and again == first

    _calls(path, {"b@1": 1})  # another process's call in stage b: its row no longer holds
    reader = cw.reader(f"file:{path}")
    after = reader.summary("run-rows")
    assert read == [["b@1"]]
    assert [r.stage_totals.calls for r in after.stages] == [1, 3, 1]
    assert after.totals.calls == 5
    _agrees(reader, after)
    assert cw.reader(f"file:{path}").summary("run-rows") == after and read == [["b@1"]]


def test_a_row_kept_by_other_code_is_not_read(tmp_path, file_index_dir, monkeypatch):
    path = tmp_path / "t.jsonl"
    _calls(path, {"a@1": 2})
    first = cw.reader(f"file:{path}").summary("run-rows")
    with sqlite3.connect(_index_of(file_index_dir, path)) as conn:  # the right key, another shape (another release's)
        conn.execute("UPDATE stage_rows SET row = ?", (b'{"not": "a part"}',))
    assert cw.reader(f"file:{path}").summary("run-rows") == first
