"""How fast does the file reader answer as the telemetry file grows?

    python benchmarks/readback.py [--snapshots 100000] [--file PATH] [--keep]

Writes N snapshots through the real embedded pipeline (Telemetry -> BatchSpanProcessor
-> OTLP JSON lines file), two snapshots per call, spread over runs and stages, then
times `reader.context_window` for the newest stage, an old stage near the start of
the file, one long-lived stage that spans the whole file, the stage listing, and
`cw-middleware show` as a fresh process (start-up included).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from typing import Any


def writer(path: str) -> tuple[Any, Any, Any, dict[Any, int]]:
    """The real embedded pipeline writing to ``path``: (pipeline, telemetry, snapshot parts, a request's sources)."""
    from cw_middleware._embedded import install
    from cw_middleware._kernel.config import resolve
    from cw_middleware._kernel.contract import Category
    from cw_middleware._snapshots.build import SnapshotParts
    from cw_middleware._snapshots.telemetry import Telemetry

    cfg = resolve(export=f"file:{path}", environ={}, export_queue_size=1_000_000)
    pipeline = install(cfg)
    by_source = {
        (Category.SYSTEM_PROMPT, "system"): 1200,
        (Category.TOOLS, "native"): 3400,
        (Category.MCP_TOOLS, "mcp:github"): 900,
        (Category.MEMORY, "AGENTS.md"): 700,
        (Category.CONVERSATION, "user"): 5000,
        (Category.SKILLS, "skill:pdf"): 300,
    }
    return pipeline, Telemetry(cfg, pipeline.tracer_provider, pipeline.meter_provider), SnapshotParts(), by_source


def generate(path: str, snapshots: int) -> tuple[float, list[tuple[str, str]]]:
    from cw_middleware._counting.model_facts import RequestMeta
    from cw_middleware._kernel.contract import CountMethod, StageInfo
    from cw_middleware._snapshots.build import build_snapshot

    pipeline, tel, parts, by_source = writer(path)
    started = time.perf_counter()
    calls = snapshots // 2
    stages_per_run, calls_per_stage = 10, 50
    order: list[tuple[str, str]] = []
    long_stage = StageInfo("run-long", "watch@1")
    long_cm = tel.stage_span(long_stage)
    long_cm.__enter__()
    done = 0
    run = 0
    while done < calls:
        for s in range(stages_per_run):
            info = StageInfo(f"run-{run}", f"stage-{s}@1", "agent" if s % 5 else "tool")
            order.append((info.run_id, info.stage_id))
            with tel.stage_span(info):
                if info.kind != "agent":
                    continue
                for c in range(calls_per_stage):
                    stage = long_stage if c == 0 else info  # the long stage gets a call now and then
                    meta = RequestMeta(stage.run_id, stage.stage_id, "openai", "gpt-4o", 128000)
                    call = tel.start_call("chat", "openai", "gpt-4o", stage)
                    call.record(build_snapshot(by_source, meta, CountMethod.LOCAL_ESTIMATE, parts=parts))
                    call.record(
                        build_snapshot(by_source, meta, CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN, total=11000 + c, parts=parts)
                    )
                    call.end(input_tokens=11000 + c, output_tokens=10)
                    done += 1
                    if done >= calls:
                        break
            if done >= calls:
                break
        run += 1
    long_cm.__exit__(None, None, None)
    pipeline.flush(600)
    pipeline.shutdown()
    return time.perf_counter() - started, order


def plan(snapshots: int) -> list[tuple[str, str]]:
    """The (run, stage) order `generate` writes for this many snapshots."""
    order, done, run = [], 0, 0
    while done < snapshots // 2:
        for s in range(10):
            order.append((f"run-{run}", f"stage-{s}@1"))
            if s % 5:
                done += 50
            if done >= snapshots // 2:
                return order
        run += 1
    return order


def timed(fn, repeat: int = 5) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--snapshots", type=int, default=100_000)
    parser.add_argument("--file")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    path = args.file or os.path.join(tempfile.mkdtemp(prefix="cw-bench-"), "telemetry.jsonl")
    if not os.path.exists(path):
        gen, order = generate(path, args.snapshots)
        print(f"wrote {args.snapshots:,} snapshots in {gen:.1f}s: {os.path.getsize(path) / 1e6:.0f} MB, {path}")
    else:
        order = plan(args.snapshots)
        print(f"reusing {path} ({os.path.getsize(path) / 1e6:.0f} MB)")

    import cw_middleware as cw

    reader = cw.reader(f"file:{path}")
    newest = order[-1] if order else ("run-0", "stage-1@1")
    oldest_agent = next((o for o in order if not o[1].startswith("stage-0")), ("run-0", "stage-1@1"))
    cases = [
        ("newest stage", newest),
        ("oldest stage (start of file)", oldest_agent),
        ("long stage (whole file)", ("run-long", "watch@1")),
    ]
    for label, (run_id, stage_id) in cases:
        seconds, answer = timed(lambda r=run_id, s=stage_id: reader.context_window(r, s))
        print(
            f"latest, {label:<30} {seconds * 1000:8.1f} ms"
            f"  ({answer.staleness.value}, {getattr(answer.count_method, 'value', None)})"
        )
    seconds, _ = timed(lambda: reader.stages(newest[0]))
    print(f"stages listing of one run               {seconds * 1000:8.1f} ms")
    seconds, _ = timed(lambda: _missing(reader), repeat=3)
    print(f"missing stage (full scan, NotFound)     {seconds * 1000:8.1f} ms")
    cmd = [sys.executable, "-m", "cw_middleware", "show", newest[0], newest[1], "--backend", f"file:{path}"]
    seconds, _ = timed(lambda: subprocess.run(cmd, capture_output=True, check=True), repeat=3)
    print(f"`cw-middleware show` (new process)      {seconds * 1000:8.1f} ms")
    if not args.keep and not args.file:
        os.remove(path)
    print(f"at {datetime.now(UTC).isoformat(timespec='seconds')}")
    return 0


def _missing(reader) -> None:
    import cw_middleware as cw

    try:
        reader.context_window("run-0", "no-such-stage")
    except cw.NotFound:
        pass


if __name__ == "__main__":
    sys.exit(main())
