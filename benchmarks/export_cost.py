"""What the embedded default export costs (issue 22 gap 1): CPU per span, and the call against bare LiteLLM.

    nice -n 10 python benchmarks/export_cost.py [--calls 60] [--spans 200]

1. export CPU a span: ``--spans`` cw calls (a 200-turn conversation, ~100k tokens at the end,
   30 tools) queue their spans with the export delayed; then the file processor's export
   (what its worker does: encode every queued span and append the lines) runs on this thread,
   timed with ``time.thread_time``. Beside it the SDK's encoder path on the same spans
   (``encode_spans`` → protobuf → ``MessageToDict`` → hex ids → JSON), which the export used
   to take, and whether both wrote the same bytes.
2. the call against bare LiteLLM at ~100k tokens, sync (``cw.completion`` vs ``litellm.completion``)
   and async (``cw.acompletion`` vs ``litellm.acompletion``), ``mock_response``, in one process:
   ``--calls`` rounds of one bare call, one through cw with telemetry off and one with the default
   file export, in an order that rotates each round. A call with the export is followed by the
   span processor's flush on the calling thread, whose CPU time (``time.thread_time``) is added
   to the call's: all the export work the call caused, a batch a call (conservative: the worker
   writes a batch a second). CPU time, not wall time: right after a call LiteLLM's own logging
   threads are still running its success handlers, and a flush's syscalls would wait for the GIL
   behind them. Reported for the calling thread's CPU time (``time.thread_time``: what the load
   of a shared machine moves least; LiteLLM's logging threads are left out on every side) and
   for wall time: medians against bare, and what the export adds, the paired median of default
   export / telemetry off. The bar is read on CPU time. Beside it, the call alone (its flush left
   out, paired against telemetry off) and the flush itself: what the export costs the call's own
   thread, and what a batch of one span costs the export worker (which writes a batch a second).
   Bar: the export <= 1.05x (~0.3-0.5 ms on a ~10 ms call). Where cw owns the pipeline a call's end
   is recorded on the call-end worker (runtime.py): after each call its CPU time there is read
   (``pthread_getcpuclockid``) once the worker is idle, and reported added to the caller's.
   Last, the batched reading: the call alone plus part 1's export CPU a span (a batch of many, as
   the worker writes one a second under back-to-back calls), against telemetry off, on the calling
   thread and with each side's call-end worker added.

Other work on the machine moves every figure: the load average is printed; compare ratios
from one run only.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

import cw_middleware as cw  # noqa: E402
from benchmarks.call_ends import cpu_since, worker_cpu  # noqa: E402
from benchmarks.conversation import make_tools, make_turns, request_at  # noqa: E402
from cw_middleware._capture.runtime import Runtime, set_runtime  # noqa: E402
from cw_middleware._embedded.encode import to_json_line  # noqa: E402

MODEL = "gpt-4o"


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _file_runtime(path: str, **settings: Any) -> Runtime:
    """A runtime with the default file export, installed as configure() installs it."""
    return cw.configure(export=f"file:{path}", **settings)


def _span_processor(runtime: Runtime) -> Any:
    pipeline = runtime._flush.__self__  # type: ignore[union-attr]  # the embedded Pipeline whose flush the runtime calls
    return pipeline.span_processor


def _sdk_line(span: Any) -> bytes:
    """The SDK's encoder path for one span: protobuf, MessageToDict, base64 ids rewritten to hex, compact JSON."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return to_json_line(encode_spans([span]))


def bench_export_cpu(n_spans: int) -> dict[str, Any]:
    system, turns = make_turns(200)
    tools = make_tools()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "t.jsonl")
        runtime = _file_runtime(path, export_interval_ms=3_600_000, export_queue_size=4096)
        processor = _span_processor(runtime)
        seen = InMemorySpanExporter()
        runtime._flush.__self__.tracer_provider.add_span_processor(SimpleSpanProcessor(seen))  # type: ignore[union-attr]
        with cw.stage(run_id="bench", stage_id="impl@1"):
            cw.completion(model=MODEL, messages=request_at(system, turns, 1), tools=tools, mock_response="ok")
            runtime.snapshots()
            processor.force_flush()  # the first export imports the encoder: not a span's cost
            seen.clear()
            for i in range(n_spans):
                upto = 1 + (i * 199) // max(1, n_spans - 1)
                cw.completion(model=MODEL, messages=request_at(system, turns, upto), tools=tools, mock_response="ok")
        runtime.snapshots()  # background estimates done
        queued = processor.queued
        gc.collect()
        start = time.thread_time()
        processor.force_flush()
        ours = time.thread_time() - start
        spans = seen.get_finished_spans()
        gc.collect()
        start = time.thread_time()
        expected = [_sdk_line(span) for span in spans]
        sdk = time.thread_time() - start
        with open(path, "rb") as f:
            written = [line for line in f if line.startswith(b'{"resourceSpans"')][-len(expected) :]
        cw.configure(export="none")
    return {
        "spans": queued,
        "export_us": 1e6 * ours / max(1, queued),
        "sdk_us": 1e6 * sdk / max(1, len(spans)),
        "identical": written == expected,
        "bytes_per_span": sum(map(len, written)) / max(1, len(written)),
    }


def _request(system: str, turns: Any, tools: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": request_at(system, turns, 200), "tools": tools, "mock_response": "ok"}


def bench_calls(calls: int, mode: str, span_cpu_s: float) -> dict[str, Any]:
    """``calls`` rounds of three calls, bare, cw off and cw with the file export, in a rotating order; ``mode``: sync or async.

    ``span_cpu_s``: the export worker's CPU a span in a batch of many (part 1), for the batched reading.
    """
    system, turns = make_turns(200)
    tools = make_tools()
    folder = tempfile.mkdtemp()
    file_runtime = _file_runtime(os.path.join(folder, "t.jsonl"))
    set_runtime(None)  # keep it: the next configure() would close the runtime it replaces
    off_runtime = cw.configure(export="none")
    processor = _span_processor(file_runtime)
    if mode == "sync":
        fns: dict[str, Callable[..., Any]] = {"bare": litellm.completion, "off": cw.completion, "file": cw.completion}
    else:
        fns = {"bare": litellm.acompletion, "off": cw.acompletion, "file": cw.acompletion}
    runtimes = {"bare": off_runtime, "off": off_runtime, "file": file_runtime}
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    cpu_all: dict[str, list[float]] = {k: [] for k in fns}  # with the call-end worker's CPU for the call
    flushes: list[float] = []  # the file export's flush after each of its calls, CPU of the calling thread
    order = list(fns)

    async def one(fn: Callable[..., Awaitable[Any]], kwargs: dict[str, Any]) -> None:
        await fn(**kwargs)

    def timed(name: str, runner: asyncio.Runner) -> tuple[float, float, float]:
        runtime = runtimes[name]
        set_runtime(runtime)
        kwargs = _request(system, turns, tools)
        gc.collect()  # collections land on whichever call allocates: keep them out of every side
        ends_before = worker_cpu(runtime)
        start, start_cpu = time.perf_counter(), time.thread_time()
        if mode == "sync":
            fns[name](**kwargs)
        else:
            runner.run(one(fns[name], kwargs))
        took, took_cpu = time.perf_counter() - start, time.thread_time() - start_cpu
        # The call's end is recorded on the call-end worker, not this thread: its CPU is the call's too.
        end_cpu = cpu_since(runtime, ends_before) if name != "bare" else 0.0
        if name == "file":
            # The export this call caused, on this thread, as CPU time: a wall-clock flush would also wait
            # for the GIL while LiteLLM's own logging threads finish the call's success handlers.
            flush_cpu = time.thread_time()
            processor.force_flush()
            flush_cpu = time.thread_time() - flush_cpu
            flushes.append(flush_cpu)
            took, took_cpu = took + flush_cpu, took_cpu + flush_cpu
        return took, took_cpu, end_cpu

    # A Runner, not a bare loop: its close cancels LiteLLM's async logging worker, which a closed loop leaves
    # pending, and whose collection at exit crashed the interpreter (SIGSEGV on CPython 3.11, bare LiteLLM too).
    runner = asyncio.Runner()
    try:
        for i in range(calls + 3):
            turn = order[i % 3 :] + order[: i % 3]
            took = {name: timed(name, runner) for name in turn}
            if i >= 3:  # the first rounds load tokenizers, LiteLLM's lazy imports, the estimator's caches
                for name, (w, c, e) in took.items():
                    wall[name].append(w)
                    cpu[name].append(c)
                    cpu_all[name].append(c + e)
    finally:
        runner.close()
        set_runtime(file_runtime)
        cw.configure(export="none")
    out: dict[str, Any] = {"mode": mode}
    # The call alone, its flush taken out: what the export costs the call's own thread while the calls run
    # (the export's encoding and append are the export worker's, a batch a second by default).
    flush_of_round = flushes[3:]
    alone = [c - f for c, f in zip(cpu["file"], flush_of_round)]
    out["call_alone"] = statistics.median(a / o for a, o in zip(alone, cpu["off"]))
    out["flush_ms"] = 1000 * statistics.median(flush_of_round)
    # As the default export runs under back-to-back calls: the call alone plus its span's share of a batch
    # of many (part 1), on the calling thread and with each side's call-end worker CPU added.
    out["batched"] = statistics.median((a + span_cpu_s) / o for a, o in zip(alone, cpu["off"]))
    ends = {k: [all_ - own for all_, own in zip(cpu_all[k], cpu[k])] for k in ("off", "file")}
    out["batched_all"] = statistics.median(
        (a + e + span_cpu_s) / (o + eo) for a, e, o, eo in zip(alone, ends["file"], cpu["off"], ends["off"])
    )
    for clock, times in (("wall", wall), ("cpu", cpu), ("cpu_all", cpu_all)):
        med = {k: statistics.median(v) for k, v in times.items()}
        out[clock] = {
            "bare_ms": 1000 * med["bare"],
            "off": med["off"] / med["bare"],
            "file": med["file"] / med["bare"],
            "export": statistics.median(f / o for f, o in zip(times["file"], times["off"])),
            "export_ms": 1000 * (med["file"] - med["off"]),
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=60, help="rounds of one call of each kind")
    parser.add_argument("--spans", type=int, default=200)
    args = parser.parse_args()
    print(f"{time.strftime('%Y-%m-%d %H:%M')}  {_load()}  (2-core machine shared with other work)")
    cpu = bench_export_cpu(args.spans)
    print(f"1. export CPU a span ({cpu['spans']} spans, {cpu['bytes_per_span']:.0f} bytes a line):")
    print(f"   the file export (encode + append):   {cpu['export_us']:7.1f} us")
    print(f"   the SDK's encoder path (encode only): {cpu['sdk_us']:7.1f} us")
    print(f"   the same bytes as the SDK's encoder:  {cpu['identical']}")
    ok = cpu["identical"]
    for mode in ("sync", "async"):
        res = bench_calls(args.calls, mode, cpu["export_us"] / 1e6)
        print(f"2. {mode}, ~100k tokens, {args.calls} rounds  ({_load()})")
        for clock, label in (
            ("cpu", "CPU time of the calling thread"),
            ("cpu_all", "with the call-end worker's (the call's end, recorded off its thread)"),
            ("wall", "wall time"),
        ):
            r = res[clock]
            verdict = "PASS" if r["export"] <= 1.05 else "FAIL"
            print(
                f"   {label}: bare median {r['bare_ms']:.2f} ms; cw off {r['off']:.3f}x, default export {r['file']:.3f}x;"
                f" the export itself (export / off, paired) {r['export']:.3f}x, {r['export_ms']:+.2f} ms  (bar <= 1.05) {verdict}"
            )
        print(
            f"   of which the call itself (export / off, paired, CPU of the calling thread, its flush left out):"
            f" {res['call_alone']:.3f}x; the flush, a batch of one span: {res['flush_ms']:.2f} ms  (reported)"
        )
        print(
            f"   batched, as the default export runs under back-to-back calls (the call alone and its span's share"
            f" of a batch of many, part 1): {res['batched']:.3f}x; with each side's call-end worker:"
            f" {res['batched_all']:.3f}x  (reported)"
        )
        ok = ok and res["cpu"]["export"] <= 1.05
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
