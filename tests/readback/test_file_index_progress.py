"""The CLI says when a first query is indexing a file; the library says nothing.

On a terminal the note is one line rewritten in place (carriage returns) and cleared before the
answer; in a log (stderr not a terminal) it is one plain line, and only when the build takes a
while. A warm index prints nothing. The terminal is a real pseudo-terminal (`pty`).
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from embedded_helpers import embedded_runtime

import cw_middleware as cw
from cw_middleware._cli import main as cli
from cw_middleware._cli import reading
from cw_middleware._readback import file_index

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def telemetry(tmp_path_factory) -> Path:
    """A file of some 40 export lines: many chunks once `CHUNK_BYTES` is small."""
    path = tmp_path_factory.mktemp("progress") / "t.jsonl"
    with embedded_runtime(export=f"file:{path}", export_interval_ms=10) as rt:
        for i in range(40):
            with cw.stage("run-p", f"s@{i}"):
                cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="ok")
            rt.flush(5)
    return path


def test_a_log_gets_one_line_saying_the_first_query_is_indexing(telemetry, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CW_INDEX_DIR", str(tmp_path / "index"))
    monkeypatch.setattr(file_index, "CHUNK_BYTES", 2000)
    monkeypatch.setattr(reading, "LOG_AFTER", 0.0)  # as if the build had run for a while
    assert cli.main(["stages", "run-p", "--backend", f"file:{telemetry}"]) == 0
    out, err = capsys.readouterr()
    assert "s@39" in out
    (line,) = err.splitlines()
    size_mb = telemetry.stat().st_size / 1e6  # ~0.5-0.6 MB: how many spans a line the writer puts is its own
    assert line.startswith("indexing ") and line.endswith(f"% of {size_mb:.1f} MB: {telemetry} (the first query on this file)")
    assert "\r" not in err and "\x1b" not in err
    assert cli.main(["show", "run-p", "s@3", "--backend", f"file:{telemetry}"]) == 0
    assert capsys.readouterr().err == ""  # the index exists now: nothing to say


def test_a_quick_build_and_the_library_say_nothing(telemetry, tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(file_index, "CHUNK_BYTES", 2000)
    monkeypatch.setattr(reading, "LOG_AFTER", 600.0)  # quick however loaded the machine (beside 4 busy loops: over 1 s)
    monkeypatch.setenv("CW_INDEX_DIR", str(tmp_path / "index"))
    assert cli.main(["stages", "run-p", "--backend", f"file:{telemetry}"]) == 0  # well under LOG_AFTER
    assert capfd.readouterr().err == ""
    monkeypatch.setenv("CW_INDEX_DIR", str(tmp_path / "other-index"))
    assert len(cw.reader(f"file:{telemetry}").stages("run-p")) == 40
    assert capfd.readouterr().err == ""


CHILD = r"""
import sys
from cw_middleware._cli import main as cli, reading
from cw_middleware._readback import file_index
file_index.CHUNK_BYTES = 2000
reading.TERMINAL_AFTER = 0.0
sys.exit(cli.main(sys.argv[1:]))
"""


def test_a_terminal_sees_the_percentage_rewritten_in_place_and_cleared(telemetry, tmp_path):
    controller, terminal = pty.openpty()
    env = {**os.environ, "CW_INDEX_DIR": str(tmp_path / "index"), "COLUMNS": "60"}
    argv = [sys.executable, "-c", CHILD, "stages", "run-p", "--backend", f"file:{telemetry}"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=terminal, env=env) as child:
        os.close(terminal)
        err = b""
        while True:
            try:
                chunk = os.read(controller, 1 << 16)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            err += chunk
        out = child.stdout.read() if child.stdout else b""
        assert child.wait(timeout=60) == 0
    os.close(controller)
    assert b"s@39" in out
    updates = err.split(b"\r")[1:]
    assert len(updates) > 3 and all(u.startswith(b"indexing ") for u in updates[:-1])
    assert all(len(u) <= 59 + len(b"\x1b[K") for u in updates)  # never wider than the terminal
    percents = [int(u.split(b" ")[1].rstrip(b"%")) for u in updates[:-1]]
    assert percents == sorted(percents) and percents[-1] < 100
    assert updates[-1] == b"\x1b[K"  # cleared before the answer
