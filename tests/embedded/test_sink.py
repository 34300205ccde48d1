"""The JSON-lines file sink (cw_middleware/_embedded/sink.py): whole lines appended, faults said once, never raised."""

from __future__ import annotations

import logging
import os
import threading

import pytest

from cw_middleware._embedded import health
from cw_middleware._embedded.sink import JsonLinesFile
from cw_middleware._kernel.log import RateLimitedLog


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(health, "export_warnings", RateLimitedLog())


def test_lines_are_appended_whole_in_order_and_the_folder_is_made(tmp_path):
    path = tmp_path / "deeper" / "t.jsonl"
    sink = JsonLinesFile(str(path))
    assert sink.append(b'{"resourceSpans":[1]}\n')
    assert sink.append('{"resourceMetrics":["ü"]}\n{"resourceSpans":[2]}\n'.encode())
    assert path.read_bytes().decode().splitlines() == [
        '{"resourceSpans":[1]}',
        '{"resourceMetrics":["ü"]}',
        '{"resourceSpans":[2]}',
    ]


def test_a_file_removed_or_rotated_between_writes_is_made_again(tmp_path):
    path = tmp_path / "t.jsonl"
    sink = JsonLinesFile(str(path))
    assert sink.append(b"one\n")
    os.rename(path, tmp_path / "t.jsonl.1")  # logrotate's default
    assert sink.append(b"two\n")
    assert path.read_bytes() == b"two\n" and (tmp_path / "t.jsonl.1").read_bytes() == b"one\n"


def test_an_unwritable_path_fails_with_one_warning_and_an_info_line_when_it_works_again(tmp_path, caplog):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    path = blocker / "t.jsonl"
    sink = JsonLinesFile(str(path))
    with caplog.at_level(logging.INFO, logger="cw_middleware"):
        assert [sink.append(b"x\n") for _ in range(5)] == [False] * 5
        assert sink.health.failing
        blocker.unlink()
        assert sink.append(b"x\n")
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and f"cannot write telemetry to {path}" in warnings[0], warnings
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("works again (5 exports failed)" in m for m in infos), infos
    assert not sink.health.failing


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_a_fifo_nobody_reads_fails_at_once_instead_of_blocking(tmp_path):
    fifo = tmp_path / "t.fifo"
    os.mkfifo(fifo)
    sink = JsonLinesFile(str(fifo))
    answers: list[bool] = []
    writer = threading.Thread(target=lambda: answers.append(sink.append(b"x\n")), daemon=True)
    writer.start()
    writer.join(30)  # a hang guard, not a time bound: a blocking open would never return
    assert answers == [False]
    assert sink.health.failing


def test_a_torn_last_line_costs_only_itself_not_the_next_writers_first_line(tmp_path):
    # A writer killed mid-line (or a full disk) left a fragment: no line end after it.
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"resourceSpans":[0]}\n{"resourceSpans":[{"torn')
    sink = JsonLinesFile(str(path))  # the next process's sink: its first write
    assert sink.append(b'{"resourceSpans":[1]}\n')
    assert sink.append(b'{"resourceSpans":[2]}\n')
    assert path.read_bytes().decode().splitlines() == [
        '{"resourceSpans":[0]}',
        '{"resourceSpans":[{"torn',  # only the fragment is lost
        '{"resourceSpans":[1]}',
        '{"resourceSpans":[2]}',
    ]


def test_a_file_that_ends_whole_gets_no_extra_line_end(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"resourceSpans":[0]}\n')
    assert JsonLinesFile(str(path)).append(b'{"resourceSpans":[1]}\n')
    assert JsonLinesFile(str(tmp_path / "new.jsonl")).append(b'{"resourceSpans":[2]}\n')
    assert path.read_bytes() == b'{"resourceSpans":[0]}\n{"resourceSpans":[1]}\n'
    assert (tmp_path / "new.jsonl").read_bytes() == b'{"resourceSpans":[2]}\n'


_CUT_SHORT = r"""
import resource, signal, sys
from cw_middleware._embedded.sink import JsonLinesFile
path = sys.argv[1]
sink = JsonLinesFile(path)
assert sink.append(b'{"resourceSpans":[1]}\n')
# The disk fills up mid-line: the file may grow 10 bytes more, a longer write is cut short (EFBIG).
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (len(open(path, "rb").read()) + 10, hard))
print(sink.append(b'{"resourceSpans":[{"name":"cut short"}]}\n'))
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space again
print(sink.append(b'{"resourceSpans":[3]}\n'))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="RLIMIT_FSIZE is POSIX")
def test_after_a_write_cut_short_the_next_line_starts_a_line_of_its_own(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "t.jsonl"
    proc = subprocess.run([sys.executable, "-c", _CUT_SHORT, str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["False", "True"]
    assert path.read_bytes().decode().splitlines() == [
        '{"resourceSpans":[1]}',
        '{"resource',  # the 10 bytes the full disk took
        '{"resourceSpans":[3]}',
    ]
