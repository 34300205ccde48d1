"""cw beside the peers on one agent loop: bare LiteLLM, cw, OpenInference, OpenLLMetry, LiteLLM's otel callback (issue 22 gap 5).

    nice -n 10 /tmp/peersvenv/bin/python benchmarks/peers.py [--calls 5000] [--only bare,cw-file]

The peers are not the project's dependencies: install them into a venv of their own, outside
the repository, beside the project and its locked dependencies (the LiteLLM under test is the
lock's)::

    uv venv /tmp/peersvenv --python python3.11
    uv pip install --python /tmp/peersvenv/bin/python --require-hashes -r requirements.lock
    uv pip install --python /tmp/peersvenv/bin/python --no-deps -e .
    uv pip install --python /tmp/peersvenv/bin/python openinference-instrumentation-litellm opentelemetry-instrumentation-litellm

(OpenLIT pins versions of the OpenTelemetry packages that the others do not share; it is left
out here.) Variants, each in a process of its own, all calling ``litellm.completion`` as a
framework does:

- ``bare``: LiteLLM alone;
- ``cw-file``: ``cw.instrument()`` with the embedded default export (OTLP JSON lines to a file);
- ``cw-off``: ``cw.instrument()`` with ``export="none"``;
- ``openinference``: OpenInference's ``LiteLLMInstrumentor``;
- ``openllmetry``: OpenLLMetry's ``LiteLLMInstrumentor`` (opentelemetry-instrumentation-litellm);
- ``litellm-otel``: LiteLLM's own ``OpenTelemetry`` callback;

the peers with their defaults (all three export the prompt and the completion) and a
TracerProvider whose BatchSpanProcessor hands spans to an exporter that drops them. The loop: a
200-turn agent conversation growing to ~100k tokens with 30 tools (benchmarks/conversation.py,
fresh dicts every turn), ``mock_response``, run again and again until ``--calls``. The processes
take turns a loop at a time, in an order that rotates each round, so every variant meets the
same load. Reported per variant: the median and p99 of a call over the whole loop, the median
at ~90-100k tokens (its last 20 turns) and its ratio to bare's (paired: the same turn of the
same round), the first loop left out (it warms caches); the cold first call of the process; its
RSS and live threads after ``--calls`` calls; and the lines it logged (a peer's warnings).
Ratios only compare within one run: the load average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("bare", "cw-file", "cw-off", "openinference", "openllmetry", "litellm-otel")
TURNS = 200
TAIL = 20  # the last turns of the loop: ~90-100k tokens


def _noop_provider() -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    return provider, Drop


def _set_up(variant: str, folder: str) -> None:
    import litellm

    import cw_middleware as cw

    if variant in ("cw-file", "cw-off"):
        cw.configure(export=f"file:{folder}/telemetry.jsonl" if variant == "cw-file" else "none")
        cw.instrument()
    elif variant == "openinference":
        from openinference.instrumentation.litellm import LiteLLMInstrumentor

        LiteLLMInstrumentor().instrument(tracer_provider=_noop_provider()[0])
    elif variant == "openllmetry":
        from opentelemetry.instrumentation.litellm import LiteLLMInstrumentor as OpenLLMetry

        OpenLLMetry().instrument(tracer_provider=_noop_provider()[0])
    elif variant == "litellm-otel":
        from litellm.integrations.opentelemetry import OpenTelemetry, OpenTelemetryConfig

        _, drop = _noop_provider()
        litellm.callbacks = [OpenTelemetry(config=OpenTelemetryConfig(exporter=drop(), skip_set_global=True))]
    elif variant != "bare":
        raise SystemExit(f"unknown variant {variant}")


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def child(variant: str) -> int:
    """One variant's process: set up, then run a loop per "run" line on stdin, answering with JSON lines."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    from benchmarks.conversation import make_tools, make_turns, request_at

    folder = tempfile.mkdtemp(prefix="cw-peers-")
    _set_up(variant, folder)
    system, turns = make_turns(TURNS)
    tools = make_tools()
    calls = 0
    print(json.dumps({"ready": variant}), flush=True)
    for command in sys.stdin:
        if command.strip() == "stats":
            print(json.dumps({"rss_mb": round(_rss_mb()), "threads": threading.active_count(), "calls": calls}), flush=True)
            continue
        times = []
        for t in range(1, TURNS + 1):
            kwargs = {"model": "gpt-4o", "messages": request_at(system, turns, t), "tools": tools, "mock_response": "ok"}
            start = time.perf_counter()
            litellm.completion(**kwargs)
            times.append(time.perf_counter() - start)
            calls += 1
        print(json.dumps({"times": times}), flush=True)
    return 0


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "child":
        return child(sys.argv[2])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=5000, help="calls per variant (a loop is 200)")
    parser.add_argument("--only", default=",".join(VARIANTS))
    args = parser.parse_args()
    variants = [v for v in args.only.split(",") if v]
    if "bare" not in variants:
        variants.insert(0, "bare")
    started = time.strftime("%Y-%m-%d %H:%M")
    loads = [os.getloadavg()[0]]
    logs = {v: tempfile.TemporaryFile() for v in variants}  # what each process logs (a peer's warnings)
    procs = {
        v: subprocess.Popen(
            [sys.executable, __file__, "child", v],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=logs[v],
            text=True,
            cwd=ROOT,
        )
        for v in variants
    }
    for v, p in procs.items():
        assert p.stdout is not None
        ready = json.loads(p.stdout.readline())
        assert ready == {"ready": v}, ready
    times: dict[str, list[list[float]]] = {v: [] for v in variants}
    rounds = max(1, args.calls // TURNS)
    for r in range(rounds):
        order = variants[r % len(variants) :] + variants[: r % len(variants)]
        for v in order:
            p = procs[v]
            assert p.stdin is not None and p.stdout is not None
            p.stdin.write("run\n")
            p.stdin.flush()
            times[v].append(json.loads(p.stdout.readline())["times"])
        loads.append(os.getloadavg()[0])
    stats = {}
    for v, p in procs.items():
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write("stats\n")
        p.stdin.flush()
        stats[v] = json.loads(p.stdout.readline())
        p.stdin.close()
        p.wait(60)
    print(
        f"{started}, {rounds} rounds of a {TURNS}-turn loop ({rounds * TURNS} calls per variant), "
        f"load average (1 min) {min(loads):.1f}-{max(loads):.1f}"
    )
    print("| variant | median ms | p99 ms | at ~100k tokens | vs bare | cold first call | RSS after | threads | log lines |")
    print("|---|---|---|---|---|---|---|---|---|")
    bare_tail = [loop[-TAIL:] for loop in times["bare"]]
    for v in variants:
        warm = times[v][1:] or times[v]  # the first loop warms caches and lazy imports (its first call: cold)
        every = [t for loop in warm for t in loop[1:]]
        tail = [t for loop in warm for t in loop[-TAIL:]]
        paired = [o / b for loop, base in zip(warm, bare_tail[1:] or bare_tail) for o, b in zip(loop[-TAIL:], base)]
        logs[v].seek(0)
        log_lines = sum(1 for _ in logs[v])
        row = [
            v,
            f"{1000 * statistics.median(every):.2f}",
            f"{1000 * _p(every, 0.99):.2f}",
            f"{1000 * statistics.median(tail):.2f}",
            f"{statistics.median(paired):.2f}",
            f"{1000 * times[v][0][0]:.0f} ms",
            f"{stats[v]['rss_mb']} MB",
            str(stats[v]["threads"]),
            f"{log_lines:,}",
        ]
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
