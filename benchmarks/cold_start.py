"""Cold start (issue 11, item 5): the first call of a fresh process, cw.completion vs litellm.completion.

    python benchmarks/cold_start.py [--runs 7] [--models gpt-4o,gpt-4,claude-sonnet-4-5]

Each measurement is a fresh subprocess that imports LiteLLM and cw_middleware (both imports
outside the timing, as an application has them loaded when it serves its first request), then
times its first call with ``mock_response`` (telemetry to a temporary file, the embedded
default). Bare and cw subprocesses alternate, so both see the same machine load; the report is
the median first-call latency of each and their difference, per model. The cw subprocess also
reports how long after the call its ``local_estimate`` snapshot arrived (the estimate runs off
the caller's thread while the tokenizer loads) and checks that it equals a warm estimate.
Two ways in are timed: ``cw.completion`` as the process's first use of cw (the swapped
import, which configures on that call) and ``litellm.completion`` after ``cw.instrument()``
at start-up (set-up moment: the runtime is built there, outside the timing, as an
application does it before serving). Bar: the first call is delayed by at most ~50 ms.

``--sequence`` times what a process's first minute looks like instead (issue 20 item 6): in each
fresh subprocess, the first call for every model of ``--models``, back to back, in that order
(each model's tokenizer is still loading, or another's is, when its first call comes); the report
is each call's median latency, bare and cw, and what cw added. Bar: each adds at most ~50 ms.
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
MESSAGES = [
    {"role": "system", "content": "You are a careful coding agent. Follow AGENTS.md."},
    {"role": "user", "content": "Fix the failing test in tests/test_parser.py, then run the suite."},
]

_CHILD = r"""
import json, os, sys, time
sys.path.insert(0, {root!r})
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import litellm
import cw_middleware as cw
messages, model, mode = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
if mode == "instrument":
    cw.instrument()
fn = cw.completion if mode == "cw" else litellm.completion
start = time.perf_counter()
fn(model=model, messages=messages, mock_response="On it.")
first = time.perf_counter() - start
out = {{"first_ms": first * 1000}}
if mode != "bare":
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not cw.snapshots():
        time.sleep(0.002)
    out["estimate_after_ms"] = (time.perf_counter() - start) * 1000
    snaps = cw.snapshots()
    out["local_tokens"] = snaps[0].input_tokens if snaps else None
    out["warm_tokens"] = cw.estimate(model=model, messages=messages).input_tokens
    out["flushed"] = cw.flush(5.0)
print(json.dumps(out))
"""


_SEQUENCE_CHILD = r"""
import json, os, sys, time
sys.path.insert(0, {root!r})
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import litellm
import cw_middleware as cw
messages, models, mode = json.loads(sys.argv[1]), sys.argv[2].split(","), sys.argv[3]
if mode == "instrument":
    cw.instrument()
fn = cw.completion if mode == "cw" else litellm.completion
times = []
for model in models:
    start = time.perf_counter()
    fn(model=model, messages=messages, mock_response="On it.")
    times.append((time.perf_counter() - start) * 1000)
out = {{"ms": times}}
if mode != "bare":
    out["flushed"] = cw.flush(20.0)
    out["snapshots"] = len(cw.snapshots())
print(json.dumps(out))
"""


def run_sequence(mode: str, models: str, export: str) -> dict[str, object]:
    return _child(_SEQUENCE_CHILD, mode, models, export)


def sequence(runs: int, models: str, export: str) -> None:
    names = models.split(",")
    ms: dict[str, list[list[float]]] = {"bare": [], "cw": [], "instrument": []}
    for _ in range(runs):
        for mode in ms:  # alternating: every side sees the same machine load
            result = run_sequence(mode, models, export)
            if mode != "bare" and not (result["flushed"] and result["snapshots"] == 2 * len(names)):
                raise RuntimeError(f"{mode}: estimates missing after the sequence: {result}")
            ms[mode].append(result["ms"])  # type: ignore[arg-type]
    print(f"first calls back to back, median of {runs} fresh processes")
    print(f"{'call':<28} {'bare ms':>8} {'cw ms':>8} {'added':>8} {'instrument ms':>14} {'added':>8}")
    for i, model in enumerate(names):
        b, c, n = (statistics.median(run[i] for run in ms[mode]) for mode in ("bare", "cw", "instrument"))
        print(f"{i + 1}. {model:<25} {b:8.1f} {c:8.1f} {c - b:+8.1f} {n:14.1f} {n - b:+8.1f}")


def run_child(mode: str, model: str, export: str) -> dict[str, float]:
    return _child(_CHILD, mode, model, export)  # type: ignore[return-value]


def _child(template: str, mode: str, models: str, export: str) -> dict[str, object]:
    env = {**os.environ, "CW_EXPORT": export}
    code = template.format(root=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(MESSAGES), models, mode], capture_output=True, text=True, env=env, timeout=180
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} {models} child failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--models", default="gpt-4o,gpt-4,claude-sonnet-4-5")
    parser.add_argument("--sequence", action="store_true", help="the first call of every model, back to back, per process")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        export = f"file:{Path(tmp) / 'cold.jsonl'}"
        if args.sequence:
            sequence(args.runs, args.models, export)
            return
        print(f"{'model':<20} {'way in':<12} {'bare ms':>8} {'cw ms':>8} {'added':>8} {'estimate at':>12}  same numbers")
        for model in args.models.split(","):
            bare: list[float] = []
            ours: dict[str, list[float]] = {"cw": [], "instrument": []}
            after: dict[str, list[float]] = {"cw": [], "instrument": []}
            same = {"cw": True, "instrument": True}
            for _ in range(args.runs):
                bare.append(run_child("bare", model, export)["first_ms"])
                for mode in ours:
                    result = run_child(mode, model, export)
                    ours[mode].append(result["first_ms"])
                    after[mode].append(result["estimate_after_ms"])
                    same[mode] &= result["local_tokens"] == result["warm_tokens"] and result["flushed"]
            b = statistics.median(bare)
            for mode, label in (("cw", "swap import"), ("instrument", "instrument()")):
                o = statistics.median(ours[mode])
                line = f"{model:<20} {label:<12} {b:8.1f} {o:8.1f} {o - b:+8.1f} {statistics.median(after[mode]):10.1f}ms"
                print(f"{line}  {same[mode]}")


if __name__ == "__main__":
    main()
