"""Memory over many calls (issue 11): RSS of cw.completion vs litellm.completion, and what cw's caches hold.

    python benchmarks/memory.py [--calls 100000] [--checkpoints 1000,10000,50000,100000]

Each side runs in a fresh subprocess: an agent worker of mocked calls (``mock_response``)
over conversations of 20 turns whose every text is new (so every content-addressed cache
fills to its cap), 30 tools, a new stage every conversation, telemetry to a temporary
OTLP JSON file (cw's embedded default). Reported at each checkpoint: the RSS of each side
(from /proc/self/statm) and their difference, and for cw the size of each cache.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, os, random, sys
sys.path.insert(0, {root!r})
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import litellm
import cw_middleware as cw
from benchmarks.conversation import WORDS, make_tools
mode, calls, checkpoints = sys.argv[1], int(sys.argv[2]), [int(c) for c in sys.argv[3].split(",")]
fn = cw.completion if mode == "cw" else litellm.completion
tools = make_tools()
rng = random.Random(5)
page = os.sysconf("SC_PAGE_SIZE")
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page / 2**20
def text(n):
    return " ".join(rng.choice(WORDS) for _ in range(n)) + f" #{{rng.random()}}"
out = []
messages = []
for i in range(1, calls + 1):
    turn = i % 20
    if turn == 1 or not messages:
        messages = [{{"role": "system", "content": text(200)}}]
        stage_ids = (f"run-{{i // 1000}}", f"task-{{i}}")
    messages = [dict(m) for m in messages] + [{{"role": "user", "content": text(40)}}]
    with cw.stage(run_id=stage_ids[0], stage_id=stage_ids[1]):
        fn(model="gpt-4o", messages=messages, tools=tools, mock_response="ok")
    messages.append({{"role": "assistant", "content": text(30)}})
    if i in checkpoints:
        row = {{"calls": i, "rss_mb": rss_mb()}}
        if mode == "cw":
            from cw_middleware._capture.runtime import get_runtime
            rt = get_runtime()
            est = rt.estimator
            row["caches"] = {{
                "text counts": len(est._young) + len(est._old),
                "conversations": est._n_conversations,
                "tool sets": sum(len(v) for v in est._tools.values()),
                "dumps": len(est._dumps),
                "snapshot history": len(rt._history),
                "breakdown items": len(rt.parts._breakdown),
                "detail items": len(rt.parts._details),
                "newest-call map": len(rt._newest_call),
            }}
        out.append(row)
if mode == "cw":
    cw.flush(10)
print(json.dumps(out))
"""


def run_child(mode: str, calls: int, checkpoints: str, export: str) -> list[dict]:
    env = {**os.environ, "CW_EXPORT": export}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD.format(root=str(ROOT)), mode, str(calls), checkpoints],
        capture_output=True,
        text=True,
        env=env,
        timeout=6 * 3600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} child failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--checkpoints", default="1000,10000,50000,100000")
    args = parser.parse_args()
    checkpoints = ",".join(c for c in args.checkpoints.split(",") if int(c) <= args.calls)
    with tempfile.TemporaryDirectory() as tmp:
        export = f"file:{Path(tmp) / 'mem.jsonl'}"
        bare = run_child("bare", args.calls, checkpoints, export)
        ours = run_child("cw", args.calls, checkpoints, export)
    print(f"{'calls':>8} {'bare RSS MB':>12} {'cw RSS MB':>10} {'cw - bare':>10}  cw caches")
    for b, o in zip(bare, ours):
        caches = ", ".join(f"{k} {v}" for k, v in o["caches"].items())
        print(f"{o['calls']:>8} {b['rss_mb']:12.1f} {o['rss_mb']:10.1f} {o['rss_mb'] - b['rss_mb']:+10.1f}  {caches}")


if __name__ == "__main__":
    main()
