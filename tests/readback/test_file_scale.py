"""Read-back on a large file: memory follows the answer, not the file; warm queries answer in about a second.

Each query runs in a fresh process (`benchmarks/readback_1gb.py query`) so its peak RSS is its own.
On the `large_file` fixture's file (~250 MB, 1 GB in CI) the reader before the index needed ~540 MB
and 30-40 s on 250 MB for the first two queries below (it held every line naming the run, and parsed every trace
line for a non-ASCII run id); the index answers them in ~60 MB, and in milliseconds once built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

MEMORY_LIMIT_MB = 200  # the pre-index reader: ~540 MB on this file; the index: ~60 MB
WARM_SECONDS = 5.0  # generous for a loaded CI machine: ~0.01-0.3 s idle
COLD_SECONDS = 300.0  # the first query indexes the whole file: ~5-40 s depending on the machine's load


def _query(large_file, index_dir, *call: str) -> dict:
    env = {**os.environ, "CW_INDEX_DIR": str(index_dir)}
    argv = [sys.executable, large_file["script"], "query", large_file["path"], json.dumps(list(call)), "--repeat", "1"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=COLD_SECONDS + 60)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.system
def test_queries_on_a_large_file_stay_within_memory_and_time_bounds(large_file, tmp_path):
    assert large_file["bytes"] > 200_000_000
    copies = int(large_file["copies"])
    index_dir = tmp_path / "index"
    # The first query builds the index: the whole file is read once.
    cold = _query(large_file, index_dir, "stages", "run-long")
    assert cold["answer"] == f"{copies} items"  # run-long has one stage per copy: present throughout
    assert cold["peak_rss_mb"] < MEMORY_LIMIT_MB and cold["seconds"][0] < COLD_SECONDS, cold
    mid = copies // 2
    warm = {
        "stages of the run present throughout": ("stages", "run-long"),
        "missing stage, non-ASCII run": ("context_window", f"rün-k{mid}-3-ü", "no-such-stage"),
        "missing stage": ("context_window", f"run-k{mid}-2", "no-such-stage"),
        "one stage": ("context_window", f"run-k{mid}-2", "stage-3@1"),
        "runs": ("runs",),
    }
    answers = {}
    for label, call in warm.items():
        found = _query(large_file, index_dir, *call)
        assert found["peak_rss_mb"] < MEMORY_LIMIT_MB and found["seconds"][0] < WARM_SECONDS, (label, found)
        answers[label] = found["answer"]
    assert answers["missing stage, non-ASCII run"] == answers["missing stage"] == "not found"
    assert answers["one stage"] == "response_usage_scaled_breakdown"
    assert answers["runs"] == f"{copies * int(large_file['runs_per_copy']) + 1} items"  # and run-long
