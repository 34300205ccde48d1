"""Garbage-collector pauses on the caller (issue 11, item 4): cw.completion vs litellm.completion.

    python benchmarks/gc_pauses.py [--calls 1500] [--rounds 2] [--export file|none]

An agent loop of ``--calls`` mocked calls (``mock_response``): conversations of 50 turns
(fresh dicts every turn, ~500 tokens a turn, 30 tools), one after the other, as a worker
serving tasks does. Each side runs in a fresh subprocess (bare and cw alternate, ``--rounds``
times), so neither inherits the other's heap; cw exports to a temporary OTLP JSON file (the
embedded default) unless ``--export none``. Reported per side: full (generation-2)
collections during the calls and the longest of them, and the per-call latency (median,
p99.9, max). The host's collector is left as it is: no ``gc.freeze()``, no thresholds changed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import gc, json, os, sys, time
sys.path.insert(0, {root!r})
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import litellm
import cw_middleware as cw
from benchmarks.conversation import make_tools, make_turns, request_at
mode, calls = sys.argv[1], int(sys.argv[2])
fn = cw.completion if mode == "cw" else litellm.completion
system, turns = make_turns(50)
tools = make_tools()
pauses = []
started = [0.0]
def on_gc(phase, info):
    if info["generation"] != 2:
        return
    if phase == "start":
        started[0] = time.perf_counter()
    else:
        pauses.append((time.perf_counter() - started[0]) * 1000)
# Warm up: the first calls load tokenizers and LiteLLM's lazy modules.
for t in range(1, 6):
    fn(model="gpt-4o", messages=request_at(system, turns, t), tools=tools, mock_response="ok")
if mode == "cw":
    cw.flush(10)
gc.collect()
gc.callbacks.append(on_gc)
latencies = []
for i in range(calls):
    messages = request_at(system, turns, 1 + i % 50)
    start = time.perf_counter()
    fn(model="gpt-4o", messages=messages, tools=tools, mock_response="ok")
    latencies.append((time.perf_counter() - start) * 1000)
gc.callbacks.remove(on_gc)
if mode == "cw":
    cw.flush(10)
latencies.sort()
print(json.dumps({{
    "full_collections": len(pauses), "max_pause_ms": max(pauses, default=0.0),
    "median_ms": latencies[len(latencies) // 2], "p999_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.999))],
    "max_ms": latencies[-1], "tracked_objects": len(gc.get_objects()),
}}))
"""


def run_child(mode: str, calls: int, export: str) -> dict[str, float]:
    env = {**os.environ, "CW_EXPORT": export}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD.format(root=str(ROOT)), mode, str(calls)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} child failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--export", choices=["file", "none"], default="file")
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"bare": [], "cw": []}
    with tempfile.TemporaryDirectory() as tmp:
        export = f"file:{Path(tmp) / 'gc.jsonl'}" if args.export == "file" else "none"
        for _ in range(args.rounds):
            for mode in ("bare", "cw"):
                results[mode].append(run_child(mode, args.calls, export))
    print(f"{args.calls} mocked calls per run, {args.rounds} runs per side, export={args.export}")
    print(
        f"{'side':<6} {'full GCs':>9} {'longest GC ms':>14} {'median ms':>10} {'p99.9 ms':>9} {'max ms':>8} {'tracked objs':>13}"
    )
    for mode, runs in results.items():
        print(
            f"{mode:<6} {'/'.join(str(r['full_collections']) for r in runs):>9}"
            f" {max(r['max_pause_ms'] for r in runs):14.1f}"
            f" {statistics.median(r['median_ms'] for r in runs):10.2f}"
            f" {statistics.median(r['p999_ms'] for r in runs):9.2f}"
            f" {max(r['max_ms'] for r in runs):8.1f}"
            f" {int(statistics.median(r['tracked_objects'] for r in runs)):>13}"
        )


if __name__ == "__main__":
    main()
