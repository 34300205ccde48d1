"""How fast is the summary of a run with many stages (issue 36: 10,000 stages, goal <= 2 s warm, memory flat)?

    python benchmarks/run_summary.py [--stages 10000] [--calls 3] [--file PATH] [--keep]

Writes one run of ``--stages`` stages with ``--calls`` calls each through the real embedded pipeline
(Telemetry -> BatchSpanProcessor -> OTLP JSON lines file, two snapshots a call), then times, each in a
fresh process so that nothing is warm but what the backend keeps (the file's index): the first
summary (it builds the index), the summary again in a new process (warm), the stage listing, and
``cw-middleware summary RUN --json``; with each process's peak RSS. The load is printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RUN = "run-wide"


def generate(path: str, stages: int, calls: int) -> float:
    from benchmarks.readback import writer
    from cw_middleware._counting.model_facts import RequestMeta
    from cw_middleware._kernel.contract import CountMethod, StageInfo
    from cw_middleware._snapshots.build import build_snapshot

    pipeline, tel, parts, by_source = writer(path)
    started = time.perf_counter()
    for s in range(stages):
        info = StageInfo(RUN, f"stage-{s}@1", "agent")
        with tel.stage_span(info):
            for c in range(calls):
                meta = RequestMeta(RUN, info.stage_id, "openai", "gpt-4o", 128000)
                call = tel.start_call("chat", "openai", "gpt-4o", info)
                call.record(build_snapshot(by_source, meta, CountMethod.LOCAL_ESTIMATE, parts=parts))
                total = 11000 + 500 * c + s % 7
                call.record(
                    build_snapshot(by_source, meta, CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN, total=total, parts=parts)
                )
                call.end(input_tokens=total, output_tokens=10)
    pipeline.flush(600)
    pipeline.shutdown()
    return time.perf_counter() - started


_PROBE = r"""
import json, resource, sys, time
import cw_middleware as cw
start = time.perf_counter()
with cw.reader(f"file:{sys.argv[1]}") as r:
    answer = r.summary(sys.argv[2]) if sys.argv[3] == "summary" else r.stages(sys.argv[2])
seconds = time.perf_counter() - start
rows = len(answer.stages) if sys.argv[3] == "summary" else len(answer)
calls = answer.totals.calls if sys.argv[3] == "summary" else None
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "rows": rows, "calls": calls, "peak_mb": peak}))
"""


def probe(path: str, what: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _PROBE, path, RUN, what], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    return json.loads(done.stdout)


def cli(path: str) -> tuple[float, float]:
    cmd = [
        sys.executable,
        "-c",
        "import resource, sys, runpy; sys.argv = sys.argv[1:]; "
        "code = 0\ntry:\n    runpy.run_module('cw_middleware', run_name='__main__')\n"
        "except SystemExit as e:\n    code = e.code or 0\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, file=sys.stderr); sys.exit(code)",
        "cw-middleware",
        "summary",
        RUN,
        "--backend",
        f"file:{path}",
        "--json",
    ]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    return seconds, float(done.stderr.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--file")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    path = args.file or os.path.join(tempfile.mkdtemp(), "telemetry.jsonl")
    if not os.path.exists(path):
        seconds = generate(path, args.stages, args.calls)
        print(f"wrote {args.stages:,} stages x {args.calls} calls in {seconds:.0f} s: {os.path.getsize(path) / 2**20:.0f} MB")
    print(f"load before: {os.getloadavg()[0]:.2f}")
    first = probe(path, "summary")
    print(
        f"summary, first (reads every stage){first['seconds']:7.2f} s  peak RSS {first['peak_mb']:.0f} MB"
        f"  ({first['rows']:,} stages)"
    )
    warm = [probe(path, "summary") for _ in range(3)]
    best = min(warm, key=lambda w: w["seconds"])
    print(
        f"summary, warm (new process)        {best['seconds']:7.2f} s  peak RSS {best['peak_mb']:.0f} MB"
        f"  ({best['calls']:,} calls)"
    )
    listing = probe(path, "stages")
    print(f"stages listing, warm               {listing['seconds']:7.2f} s  peak RSS {listing['peak_mb']:.0f} MB")
    seconds, peak = cli(path)
    print(f"cw-middleware summary --json       {seconds:7.2f} s  peak RSS {peak:.0f} MB  (a fresh process, start-up included)")
    print(f"load after: {os.getloadavg()[0]:.2f}")
    if not args.keep and not args.file:
        os.remove(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
