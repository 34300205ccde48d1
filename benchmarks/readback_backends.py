"""How long does each reader take on a run of 1,000 stages?

    python benchmarks/readback_backends.py [--stages 1000] [--repeat 5] [--no-phoenix]

One run goes through the real pipeline (`cw.stage` + `cw.completion` with LiteLLM's
``mock_response``): N stages, every tenth a non-agent stage, one model call in each agent
stage, exported to the embedded OTLP JSON file and, when ``.venv-phoenix`` exists, over
OTLP/HTTP to a real Arize Phoenix on loopback. Then each reader answers, median of
``--repeat`` rounds:

- ``stages(run)``: the listing of all N stages;
- ``context_window(run, stage)`` for the newest, the middle and the oldest stage;
- ``runs()``.

Jaeger and Tempo cannot run here: their readers are timed against the stubs of
tests/stubs (serving the same file), each answer asked once and then replayed (`Replay`),
so those figures are our reader's own cost (decoding, folding), not Jaeger's or Tempo's
query time nor the network's.
Ratios are against the file reader in the same run. Readers of other backends add their
own ``*_readers(ctx)`` function beside `trace_readers`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the Jaeger/Tempo stubs and the Phoenix launcher

RUN = "bench-run"


@dataclass
class Context:
    """The generated run, shared by every backend's timing function."""

    path: str  # the OTLP JSON lines file
    run_id: str
    stage_ids: list[str]
    repeat: int
    phoenix: Any = None  # a running tests.servers.phoenix.Phoenix, or None
    generated_in: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def probes(self) -> dict[str, str]:
        """Which stages the single-stage questions ask for."""
        ids = self.stage_ids
        return {"newest": ids[-1], "middle": ids[len(ids) // 2], "oldest": ids[0]}


def generate_run(path: str, stages: int, traces_endpoint: Optional[str] = None) -> tuple[list[str], float]:
    """The run through the real pipeline; also to ``traces_endpoint`` over OTLP/HTTP when given."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from embedded_helpers import exported_to

    import cw_middleware as cw

    system = [cw.segment("You are a coding agent.", "system_prompt"), cw.segment("# AGENTS.md\n" * 20, "memory", "AGENTS.md")]
    messages = [cw.message("system", system), {"role": "user", "content": "Fix the failing test."}]
    stage_ids = []
    started = time.perf_counter()
    with exported_to(path, traces_endpoint, export_queue_size=100_000) as runtime:
        for i in range(stages):
            stage_id = f"stage-{i:04d}@1"
            stage_ids.append(stage_id)
            with cw.stage(RUN, stage_id, kind="agent" if i % 10 else "tool"):
                if i % 10:
                    cw.completion(model="gpt-4o", messages=messages, mock_response="ok")
        runtime.flush(60.0)
    return stage_ids, time.perf_counter() - started


def _median_ms(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


# Query parameters that move with the clock (the search window): not part of a replayed answer's key.
_CLOCK_PARAMS = {"query.start_time_min", "query.start_time_max", "start", "end", "start_time"}


class Replay:
    """An httpx transport that asks the server once per question and replays the answer after.

    Timing a reader through it measures the reader alone (decoding, folding), not the stub
    server standing in for the backend.
    """

    def __init__(self) -> None:
        import httpx

        self._inner = httpx.HTTPTransport()
        self._answers: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[int, bytes, list[tuple[str, str]]]] = {}

    def handle_request(self, request: Any) -> Any:
        import httpx

        key = (request.url.path, tuple(sorted((k, v) for k, v in request.url.params.multi_items() if k not in _CLOCK_PARAMS)))
        if key not in self._answers:
            response = self._inner.handle_request(request)
            self._answers[key] = (response.status_code, response.read(), list(response.headers.items()))
        status, body, headers = self._answers[key]
        return httpx.Response(status, content=body, headers=headers)

    def close(self) -> None:
        self._inner.close()


def time_reader(ctx: Context, url: str, replay: bool = False) -> dict[str, float]:
    """Milliseconds per question for one reader URL; with ``replay``, the reader's own cost only."""
    import httpx

    import cw_middleware as cw

    reader = cw.reader(url, client=httpx.Client(transport=Replay())) if replay else cw.reader(url)
    listed = reader.stages(ctx.run_id)
    assert [s.stage_id for s in listed] == ctx.stage_ids, f"{url}: the listing is not the run's {len(ctx.stage_ids)} stages"
    row = {"stages(run)": _median_ms(lambda: reader.stages(ctx.run_id), ctx.repeat)}
    for label, stage_id in ctx.probes.items():
        row[f"stage: {label}"] = _median_ms(lambda s=stage_id: reader.context_window(ctx.run_id, s), ctx.repeat)
    row["runs()"] = _median_ms(reader.runs, ctx.repeat)
    reader.close()
    return row


def trace_readers(ctx: Context) -> dict[str, dict[str, float]]:
    """The span backends: the file, Phoenix (real), Jaeger and Tempo (stubs)."""
    from stubs import TraceStore, serving
    from stubs.jaeger import JaegerStub
    from stubs.tempo import TempoStub

    rows = {"file": time_reader(ctx, f"file:{ctx.path}")}
    if ctx.phoenix is not None:
        rows["phoenix (real)"] = time_reader(ctx, ctx.phoenix.backend)
    store = TraceStore()
    store.feed_file(ctx.path)
    with serving(JaegerStub(store)) as jaeger, serving(TempoStub(store)) as tempo:
        rows["jaeger (stub, replayed)"] = time_reader(ctx, f"jaeger+{jaeger.url}?search_depth=2000", replay=True)
        rows["tempo (stub, replayed)"] = time_reader(ctx, f"tempo+{tempo.url}", replay=True)
    return rows


def _print(rows: dict[str, dict[str, float]]) -> None:
    columns = list(next(iter(rows.values())))
    base = rows["file"]
    print("| reader | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for name, row in rows.items():
        cells = [f"{row[c]:.1f} ms" + ("" if name == "file" else f" ({row[c] / base[c]:.2f}x)") for c in columns]
        print(f"| {name} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--stages", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-phoenix", action="store_true", help="skip Phoenix even when .venv-phoenix exists")
    args = parser.parse_args()

    from servers.phoenix import phoenix_python, start_phoenix

    phoenix = None
    python = None if args.no_phoenix else phoenix_python()
    if python is not None:
        phoenix = start_phoenix(python)
        print(f"Phoenix ready in {phoenix.started_in:.1f} s")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "telemetry.jsonl")
            stage_ids, took = generate_run(path, args.stages, phoenix.traces_endpoint if phoenix else None)
            print(f"{args.stages} stages exported in {took:.1f} s ({os.path.getsize(path) / 1e6:.1f} MB of OTLP JSON)")
            ctx = Context(path, RUN, stage_ids, args.repeat, phoenix, took)
            if phoenix is not None:
                from stubs import TraceStore

                store = TraceStore()
                store.feed_file(path)
                started = time.perf_counter()
                phoenix.wait_for_run(RUN, store.span_count(RUN), timeout=600)
                print(f"Phoenix ingested the run {time.perf_counter() - started:.1f} s after the export's flush")
            rows = trace_readers(ctx)
            _print(rows)
    finally:
        if phoenix is not None:
            phoenix.stop()


if __name__ == "__main__":
    main()
