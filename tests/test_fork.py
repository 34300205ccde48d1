"""Fork under load: a child forked while other threads are inside cw makes its call, exports and exits.

Gunicorn, Celery prefork and multiprocessing fork a process whose threads may hold any
of cw's locks (the estimator's, the telemetry file's, the SDK's metric locks) at that
instant. Each child here makes a call in a stage of its own and flushes; none may hang,
each call returns what LiteLLM returns, and each child's snapshot is read back from the
file, so its telemetry pipeline (its own, built after the fork) works. One process of
fork_load.py per mode (~10 s each, most of it importing LiteLLM).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import cw_middleware as cw

SCRIPT = Path(__file__).with_name("fork_load.py")


@pytest.mark.parametrize(("mode", "children"), [("fork", 40), ("multiprocessing", 12)])
def test_children_forked_under_load_neither_hang_nor_lose_telemetry(tmp_path, mode, children):
    path = tmp_path / "telemetry.jsonl"
    # stderr to a file, not a pipe: the children's copies of the parent's event loops are garbage
    # there, and asyncio logs each pending task it collects (LiteLLM's logging worker: thousands
    # of lines) -- a pipe read by one reader would block them on their writes.
    with open(tmp_path / "stderr.txt", "w") as errors:
        proc = subprocess.run(
            [sys.executable, str(SCRIPT), str(path), str(children), mode],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            timeout=120,
            env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin"},
        )
    assert proc.returncode == 0, (tmp_path / "stderr.txt").read_text()[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"\n{mode}: {report}")
    assert report["hung"] == [], report
    assert report["failed"] == {}, report
    assert report["calls_during_forks"] >= children  # the threads kept calling through cw while it forked
    reader = cw.reader(f"file:{path}")
    missing = [i for i in range(children) if not reader.context_window("forked", f"child-{i}").available]
    assert missing == []
