"""A torn last line costs only itself (issue 20 item 1): the next process's first line is read back whole.

A writer killed mid-line (SIGKILL, a disk that filled up) leaves a fragment with no line end
at the end of the telemetry file. A fresh process then exports to the same file through the
embedded default: every line it wrote is read back (its first is a stage's start marker), the
fragment alone is lost.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cw_middleware as cw

ROOT = Path(__file__).resolve().parents[1]
FRAGMENT = b'{"resourceSpans":[{"resource":{},"scopeSpans":[{"spans":[{"traceId":"ab'  # a line cut short

_WRITER = r"""
import sys
import cw_middleware as cw
for i in range(int(sys.argv[1])):
    with cw.stage("after-torn", f"s{i}"):
        cw.completion(model="gpt-4o", messages=[{"role": "user", "content": f"question {i}"}], mock_response="ok")
assert cw.flush(10.0)
"""


def _span_names(line: bytes) -> list[str]:
    doc = json.loads(line)
    return [s["name"] for rs in doc.get("resourceSpans", []) for ss in rs["scopeSpans"] for s in ss["spans"]]


@pytest.mark.system
def test_a_process_writing_after_a_torn_fragment_loses_none_of_its_lines(tmp_path):
    path = tmp_path / "telemetry.jsonl"
    path.write_bytes(FRAGMENT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CW_EXPORT": f"file:{path}", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    calls = 4
    proc = subprocess.run([sys.executable, "-c", _WRITER, str(calls)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, *written = path.read_bytes().split(b"\n")
    assert first == FRAGMENT and written[-1] == b""  # only the fragment is damaged, the file ends whole
    names = [name for line in written[:-1] for name in _span_names(line)]  # each line decodes
    assert names.count("agent.stage.start") == calls  # the process's first line among them
    assert len([n for n in names if n.startswith("chat ")]) == calls
    reader = cw.reader(f"file:{path}")
    assert sorted((s.stage_id, s.kind) for s in reader.stages("after-torn")) == [(f"s{i}", "agent") for i in range(calls)]
