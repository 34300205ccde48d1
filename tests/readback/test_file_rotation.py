"""The file reader while the file is truncated, replaced or edited under it.

No SIGBUS, ever; answers come from what the file holds now.

`copytruncate` log rotation empties the file in place while the writer goes on appending. The
reader used to memory-map the file: touching a page past the new end killed `show` and `serve`
with SIGBUS. The end-to-end tests truncate the file from a thread of the process under test at
the moment it is scanning (the file is memory-mapped, or read past 8 MB through a descriptor),
then append fresh lines as a writer would.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from embedded_helpers import embedded_runtime

import cw_middleware as cw
from cw_middleware._readback import file_index
from cw_middleware._readback.otlp_file import OtlpFileReader

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
NON_ASCII_RUN = "rün-k1-3-ü"  # a run of the large file's second copy (see the `large_file` fixture)

# Runs inside the process under test: truncates the file once that process scans it, then appends
# `refill` (the writer going on after copytruncate), and leaves a marker file saying it did.
HARNESS = r"""
import os, sys, threading, time
path, refill, trigger = os.path.realpath(sys.argv[1]), sys.argv[2], int(sys.argv[3])

def scanning():
    with open("/proc/self/maps") as maps:
        if any(line.rstrip().endswith(path) for line in maps):
            return True  # memory-mapped
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == path:
                with open(f"/proc/self/fdinfo/{fd}") as info:
                    if int(info.readline().split()[1]) >= trigger:
                        return True  # read past `trigger` bytes
        except (OSError, ValueError):
            pass
    return False

def rotate():
    while not scanning():
        time.sleep(0.0005)
    os.truncate(path, 0)
    with open(refill, "rb") as src, open(path, "ab") as dst:
        dst.write(src.read())
    open(path + ".truncated", "w").close()

sys.setswitchinterval(1e-4)  # the watcher gets its turn between the scan's steps
watcher = threading.Thread(target=rotate, daemon=True)
watcher.start()
from cw_middleware._cli.main import main
code = main(sys.argv[4:])
watcher.join(30)  # the refill finishes before the process ends
sys.exit(code)
"""


def _work_copy(large_file, tmp_path) -> Path:
    work = tmp_path / "telemetry.jsonl"
    shutil.copyfile(large_file["path"], work)
    return work


def _harness(work: Path, refill: str, *argv: str, env: dict[str, str] | None = None) -> list[str]:
    return [sys.executable, "-c", HARNESS, str(work), refill, str(8 << 20), *argv]


@pytest.mark.system
def test_show_survives_copytruncate_during_a_scan(large_file, tmp_path):
    work = _work_copy(large_file, tmp_path)
    argv = _harness(work, large_file["refill"], "show", NON_ASCII_RUN, "stage-3@1", "--backend", f"file:{work}")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode != -signal.SIGBUS and done.returncode >= 0, f"killed by signal {-done.returncode}"
    assert os.path.exists(str(work) + ".truncated")  # the truncation did land during the scan
    assert "Traceback" not in done.stderr
    # Started again on what the file holds now: the refill holds the stage, unless the scan looked
    # before the writer had put it back (not found: the run, or with a span a line the run's first
    # lines but not yet the stage's); or one clear line naming the file.
    if done.returncode == 0:
        assert "stage-3@1" in done.stdout and NON_ASCII_RUN in done.stdout
    elif done.returncode == 3:
        assert done.stdout == ""
        assert done.stderr.startswith(
            (f"not found: run {NON_ASCII_RUN!r} not found", f"not found: stage 'stage-3@1' not found in run {NON_ASCII_RUN!r}")
        ), done.stderr
    else:
        assert done.returncode == 4 and done.stdout == "", done.stderr
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("backend error:") and str(work) in done.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.system
def test_serve_stays_up_when_the_file_is_truncated_during_a_scan(large_file, tmp_path):
    work = _work_copy(large_file, tmp_path)
    port = _free_port()
    argv = _harness(work, large_file["refill"], "serve", "--backend", f"file:{work}", "--port", str(port))
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                assert _get(f"{base}/healthz")[0] == 200
                break
            except (urllib.error.URLError, ConnectionError):
                assert server.poll() is None and time.monotonic() < deadline, server.stderr.read() if server.stderr else ""
                time.sleep(0.1)
        run = urllib.parse.quote(NON_ASCII_RUN, safe="")
        try:
            status, body = _get(f"{base}/api/v1/runs/{run}/stages")
        except (urllib.error.URLError, ConnectionError) as exc:
            time.sleep(0.5)
            pytest.fail(f"the server died during the scan (exit {server.poll()}): {exc}")
        # Answered from what the file held then (the run, once the writer put it back), or a JSON error.
        assert status == 200 and body["run_id"] == NON_ASCII_RUN or status in (404, 503) and "error" in body, (status, body)
        deadline = time.monotonic() + 30
        while not os.path.exists(str(work) + ".truncated"):  # the truncation landed during that scan
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert _get(f"{base}/healthz")[0] == 200 and server.poll() is None
        assert _get(f"{base}/api/v1/runs/{run}/stages")[0] == 200  # the file as rotated and refilled
        assert _get(f"{base}/api/v1/runs/{run}/stages/no-such-stage/context-window")[0] == 404
    finally:
        server.terminate()
        server.wait(timeout=30)


# ---------------------------------------------------------------- in process, step by step


def _export(path: Path, stages: list[tuple[str, str]]) -> None:
    with embedded_runtime(export=f"file:{path}", export_interval_ms=10, index_writes=False) as rt:  # the readers index it
        for run_id, stage_id in stages:
            with cw.stage(run_id, stage_id):
                cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="ok")
            rt.flush(5)


def test_a_truncation_during_the_index_build_starts_it_again_on_the_new_content(tmp_path, monkeypatch):
    old, new, path = tmp_path / "old.jsonl", tmp_path / "new.jsonl", tmp_path / "t.jsonl"
    _export(old, [(f"run-{i}", "s@1") for i in range(6)])
    _export(new, [("run-after", "s@1")])
    path.write_bytes(old.read_bytes())
    monkeypatch.setattr(file_index, "CHUNK_BYTES", 1)  # one line a transaction: many chances to change
    calls = {"n": 0}
    store = file_index.store_lines

    def store_then_rotate(*args):
        store(*args)
        calls["n"] += 1
        if calls["n"] == 2:  # the scan is under way: copytruncate, and the writer goes on
            os.truncate(path, 0)
            with open(path, "ab") as f:
                f.write(new.read_bytes())

    monkeypatch.setattr(file_index, "store_lines", store_then_rotate)
    reader = cw.reader(f"file:{path}")
    assert [r.run_id for r in reader.runs()] == ["run-after"]
    assert reader.context_window("run-after", "s@1").available
    with pytest.raises(cw.NotFound):
        reader.stages("run-0")


def test_a_file_that_keeps_changing_is_a_backend_error_naming_the_file(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    _export(path, [(f"run-{i}", "s@1") for i in range(4)])
    content = path.read_bytes()
    monkeypatch.setattr(file_index, "CHUNK_BYTES", 1)
    store = file_index.store_lines

    rewrites = iter(range(1000))

    def store_then_rewrite(*args):
        store(*args)
        os.truncate(path, 0)  # a different file every time we look
        path.write_bytes(b'{"resourceMetrics":[],"n":%d}\n' % next(rewrites) + content.replace(b'"run-', b'"ren-'))

    monkeypatch.setattr(file_index, "store_lines", store_then_rewrite)
    with pytest.raises(cw.BackendUnavailable) as caught:
        cw.reader(f"file:{path}").runs()
    message = str(caught.value)
    assert str(path) in message and "truncated or replaced" in message
    assert "run-" not in message and "ren-" not in message  # names the file, never what it holds


def test_a_warm_index_follows_copytruncate_and_rotation(tmp_path):
    path, other = tmp_path / "t.jsonl", tmp_path / "other.jsonl"
    _export(path, [("run-a", "s@1"), ("run-a", "s@2")])
    reader = cw.reader(f"file:{path}")
    assert [s.stage_id for s in reader.stages("run-a")] == ["s@1", "s@2"]
    # copytruncate, then more lines than before: same inode, a larger size, other content.
    _export(other, [("run-b", f"s@{i}") for i in range(4)])
    assert other.stat().st_size > path.stat().st_size
    os.truncate(path, 0)
    with open(path, "ab") as f:
        f.write(other.read_bytes())
    assert [r.run_id for r in reader.runs()] == ["run-b"]
    with pytest.raises(cw.NotFound):
        reader.stages("run-a")
    # Rotation by rename: a new file (new inode) at the path.
    os.rename(path, tmp_path / "t.jsonl.1")
    _export(path, [("run-c", "s@1")])
    assert [r.run_id for r in reader.runs()] == ["run-c"]
    assert reader.context_window("run-c", "s@1").available
    os.remove(path)  # rotated away, nothing written yet
    assert reader.runs() == []
    with pytest.raises(cw.NotFound):
        reader.stages("run-c")


def test_a_file_rewritten_in_place_is_indexed_again(tmp_path, monkeypatch):
    monkeypatch.setattr(file_index, "WINDOW", 64)  # the head and tail checksums cover the first and last 64 bytes
    path = tmp_path / "t.jsonl"
    _export(path, [("run-a", "s@1"), ("run-a", "s@2"), ("run-a", "s@3")])
    reader = cw.reader(f"file:{path}")
    assert reader.context_window("run-a", "s@2").available
    # The same size, head and tail; a new modification time: rewritten in place.
    path.write_bytes(path.read_bytes().replace(b'"s@2"', b'"s@8"'))
    assert [s.stage_id for s in reader.stages("run-a")] == ["s@1", "s@8", "s@3"]
    # Edited in the middle *and* grown: only the edited line's checksum can tell, when it is read.
    path.write_bytes(path.read_bytes().replace(b'"s@8"', b'"s@9"'))
    _export(path, [("run-a", "s@4")])
    with pytest.raises(cw.NotFound):
        reader.context_window("run-a", "s@8")  # the index named a line that no longer says s@8: rebuilt
    assert reader.context_window("run-a", "s@9").available
    assert [s.stage_id for s in reader.stages("run-a")] == ["s@1", "s@9", "s@3", "s@4"]


def test_the_index_is_reused_extended_and_never_trusted_blindly(tmp_path, monkeypatch, file_index_dir):
    path = tmp_path / "t.jsonl"
    _export(path, [("run-a", "s@1")])
    scans: list[int] = []
    scan = file_index.FileIndex._scan

    def counting_scan(self, f, upto, *args):
        scans.append(upto)
        return scan(self, f, upto, *args)

    monkeypatch.setattr(file_index.FileIndex, "_scan", counting_scan)
    first = OtlpFileReader(str(path)).latest("run-a", "s@1")
    assert scans == [0]
    # A new process (a new reader) uses the index on disk: no scan at all.
    assert OtlpFileReader(str(path)).latest("run-a", "s@1") == first and scans == [0]
    # Lines appended: only they are read.
    size = path.stat().st_size
    _export(path, [("run-a", "s@2")])
    assert [s.stage_id for s in OtlpFileReader(str(path)).stages("run-a") or []] == ["s@1", "s@2"]
    assert scans[1:] == [size]
    # A damaged index file is rebuilt, not believed.
    (db,) = [p for p in Path(file_index_dir).glob("*.sqlite") if _indexed_path(p) == str(path)]
    db.write_bytes(b"not a database at all" * 100)
    assert [s.stage_id for s in OtlpFileReader(str(path)).stages("run-a") or []] == ["s@1", "s@2"]
    assert scans[2:] == [0]


def _indexed_path(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT v FROM meta WHERE k = 'path'").fetchone()
    return row[0] if row else ""


def test_the_index_holds_ids_offsets_counts_and_times_only(tmp_path, file_index_dir):
    canary = "CANARY-7f3e-in-the-prompt"
    path = tmp_path / "t.jsonl"
    with embedded_runtime(export=f"file:{path}", export_interval_ms=10):
        with cw.stage("run-a", "s@1"):
            messages = [{"role": "system", "content": canary}, {"role": "user", "content": canary}]
            cw.completion(model="gpt-4o", messages=messages, mock_response=canary)
    assert cw.reader(f"file:{path}").context_window("run-a", "s@1").available
    assert cw.reader(f"file:{path}").summary("run-a").totals.calls == 1  # the stage's summary row is kept too
    (db,) = [p for p in Path(file_index_dir).glob("*.sqlite") if _indexed_path(p) == str(path)]
    with sqlite3.connect(db) as conn:
        stage_texts = {v for row in conn.execute("SELECT * FROM stages") for v in row if isinstance(v, str)}
        line_rows = [*conn.execute("SELECT * FROM lines"), *conn.execute("SELECT * FROM stage_lines")]
        line_texts = [v for row in line_rows for v in row if isinstance(v, str)]
        meta = dict(conn.execute("SELECT k, v FROM meta").fetchall())
        kept_rows = conn.execute("SELECT COUNT(*) FROM stage_rows").fetchone()[0]
    assert kept_rows == 1
    assert stage_texts == {"run-a", "s@1", "agent", "stored"} and line_texts == []
    generation = meta.pop("generation")
    assert len(generation) == 16 and int(generation, 16) >= 0
    assert {v for v in meta.values() if isinstance(v, str)} == {"cw-middleware file index", "3", str(path)}
    assert canary.encode() not in db.read_bytes()


def test_an_unwritable_index_directory_keeps_the_index_in_memory(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    _export(path, [("run-a", "s@1")])
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("CW_INDEX_DIR", str(blocker / "index"))
    assert cw.reader(f"file:{path}").context_window("run-a", "s@1").available
    monkeypatch.setenv("CW_INDEX_DIR", "memory")
    assert [s.stage_id for s in cw.reader(f"file:{path}").stages("run-a")] == ["s@1"]
