"""A stage opened around a framework's run reaches its calls in tasks, to_thread, executors and pools."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import cw_middleware as cw

MSGS = [{"role": "user", "content": "Say hi."}]
RUN = "run-prop"


def _call() -> str:
    cw.completion(model="gpt-4o", messages=MSGS, mock_response="ok")
    return threading.current_thread().name


def _stages() -> list[tuple[object, object]]:
    return [(s.run_id, s.stage_id) for s in cw.snapshots()]


def _call_spans_parented_by_stage(telemetry, stage_id: str) -> bool:
    spans = telemetry.spans.get_finished_spans()
    (stage_span,) = [s for s in spans if s.name.startswith("agent.stage ") and s.attributes["agent.stage.id"] == stage_id]
    calls = [s for s in spans if s.name.startswith("chat ") and s.attributes.get("agent.stage.id") == stage_id]
    return bool(calls) and all(c.parent is not None and c.parent.span_id == stage_span.context.span_id for c in calls)


async def test_tasks_and_to_thread_inherit_the_stage(runtime, telemetry):
    with cw.stage(RUN, "async@1"):
        await asyncio.gather(asyncio.create_task(asyncio.to_thread(_call)), asyncio.to_thread(_call))
        await cw.acompletion(model="gpt-4o", messages=MSGS, mock_response="ok")
    assert set(_stages()) == {(RUN, "async@1")}
    assert len(_stages()) == 6
    assert _call_spans_parented_by_stage(telemetry, "async@1")


async def test_run_in_executor_needs_bind(runtime, telemetry):
    loop = asyncio.get_running_loop()
    with cw.stage(RUN, "executor@1"):
        unbound_thread = await loop.run_in_executor(None, _call)
        bound_thread = await loop.run_in_executor(None, cw.bind(_call))
    assert unbound_thread != threading.current_thread().name and bound_thread != threading.current_thread().name
    unbound, bound = _stages()[:2], _stages()[2:]
    assert (RUN, "executor@1") not in unbound  # an executor thread starts with an empty context
    assert bound == [(RUN, "executor@1")] * 2
    assert _call_spans_parented_by_stage(telemetry, "executor@1")


def test_thread_pool_with_bind_keeps_each_stage(runtime, telemetry):
    with ThreadPoolExecutor(max_workers=4) as pool:
        threads = set()
        with cw.stage(RUN, "pool-a"):
            task = cw.bind(_call)  # one bound function, run in several threads at once
            futures = [pool.submit(task) for _ in range(4)]
            with cw.stage(RUN, "pool-b"):  # a nested stage: its own binding
                futures += [pool.submit(cw.bind(_call)) for _ in range(4)]
            threads |= {f.result() for f in futures}
    assert len(threads) > 1
    stages = _stages()
    assert stages.count((RUN, "pool-a")) == stages.count((RUN, "pool-b")) == 8
    assert _call_spans_parented_by_stage(telemetry, "pool-a")
    assert _call_spans_parented_by_stage(telemetry, "pool-b")


def test_bind_keeps_the_function_interface(runtime):
    def work(a: int, *, b: int = 2) -> int:
        """Adds."""
        return a + b

    bound = cw.bind(work)
    assert bound(1, b=3) == 4
    assert bound.__name__ == "work" and bound.__doc__ == "Adds."
