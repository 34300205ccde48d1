"""One owner for process state: every cache of the call path and the provider counter belong to a Runtime."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import litellm
import pytest
from providers import ANTHROPIC, provider  # noqa: F401 - the fixture

import cw_middleware as cw
from cw_middleware._capture.runtime import Runtime, set_runtime
from cw_middleware._counting.estimator import Estimator
from cw_middleware._counting.provider_count import ProviderCounter
from cw_middleware._kernel.config import resolve
from cw_middleware._kernel.contract import CountMethod

MSGS = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]


def test_counter_is_injected_and_made_only_when_a_count_is_needed(telemetry, provider, monkeypatch):  # noqa: F811
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    seen: list[httpx.Request] = []
    made = []

    def factory(config):
        client = httpx.Client(event_hooks={"request": [seen.append]})
        made.append(client)
        return ProviderCounter(timeout=config.provider_count_timeout, client=client)

    rt = Runtime(resolve(export="none", environ={}), telemetry.tracer_provider, telemetry.meter_provider, counter_factory=factory)
    previous = set_runtime(rt)
    try:
        cw.completion(model="gpt-4o", messages=MSGS, mock_response="ok")  # OpenAI is counted exactly: no count
        assert made == []
        claude = {"model": "anthropic/claude-sonnet-4-5", "messages": MSGS, "mock_response": "ok"}
        cw.completion(**claude, api_base=provider.url, api_key="sk-ant-test", cw_provider_count="always")
        assert rt.flush(5)
        assert len(made) == 1 and [r.url.path for r in seen] == ["/v1/messages/count_tokens"]
        assert [s.input_tokens for s in cw.snapshots() if s.count_method is CountMethod.PROVIDER_API_SCALED_BREAKDOWN] == [
            provider[ANTHROPIC].tokens
        ]
    finally:
        set_runtime(previous)
        rt.shutdown()
        for client in made:
            client.close()


def test_each_runtime_numbers_its_own_snapshots(telemetry):
    runtimes = [Runtime(resolve(export="none", environ={}), telemetry.tracer_provider, telemetry.meter_provider) for _ in "ab"]
    previous = set_runtime(runtimes[0])
    try:
        for _ in range(3):
            cw.completion(model="gpt-4o", messages=MSGS, mock_response="ok")
        set_runtime(runtimes[1])
        cw.completion(model="gpt-4o", messages=MSGS, mock_response="ok")
        assert [s.event_seq for s in runtimes[0].snapshots()] == [1, 2, 3, 4, 5, 6]
        assert [s.event_seq for s in runtimes[1].snapshots()] == [1, 2]
    finally:
        set_runtime(previous)


def test_the_reply_dump_cache_is_the_estimators_own_and_bounded():
    reply = litellm.completion(model="gpt-4o", messages=MSGS, mock_response="a reply").choices[0].message
    small, other = Estimator(max_dumps=2), Estimator()
    history = [*MSGS, reply, {"role": "user", "content": "More."}]
    first = small.estimate("gpt-4o", history).total
    assert len(small._dumps) == 1 and len(other._dumps) == 0  # noqa: SLF001 - the cache's owner is the point
    replies = [litellm.completion(model="gpt-4o", messages=MSGS, mock_response=f"r{i}").choices[0].message for i in range(5)]
    for r in replies:
        small.estimate("gpt-4o", [*MSGS, r])
    assert len(small._dumps) <= 2  # noqa: SLF001
    assert small.estimate("gpt-4o", history).total == first == other.estimate("gpt-4o", history).total


def test_late_count_failures_are_kept_for_a_bounded_number_of_stages():
    """A provider count failing after its call ended rides on the stage's next snapshot; stages never called again fall out."""
    from cw_middleware._capture.runtime import MAX_TRACKED_STAGES
    from cw_middleware._kernel.contract import StageInfo, WarningCode

    rt = Runtime(resolve(export="none", environ={}))
    stages = [StageInfo("run-many", f"stage-{i}") for i in range(MAX_TRACKED_STAGES + 5_000)]
    for stage in stages:
        rt.hold_late_warning(stage, WarningCode.PROVIDER_COUNT_TIMEOUT)
    assert len(rt._late_warnings) == MAX_TRACKED_STAGES  # noqa: SLF001 - the bound is the point
    assert rt.take_late_warnings(stages[0]) == set()  # the oldest stage's warning was dropped
    assert rt.take_late_warnings(stages[-1]) == {WarningCode.PROVIDER_COUNT_TIMEOUT}
    # A stage that failed again moves to the young end and is kept.
    rt.hold_late_warning(stages[5_001], WarningCode.PROVIDER_COUNT_FAILED)
    for stage in stages[:4_000]:
        rt.hold_late_warning(stage, WarningCode.PROVIDER_COUNT_TIMEOUT)
    assert rt.take_late_warnings(stages[5_001]) == {WarningCode.PROVIDER_COUNT_TIMEOUT, WarningCode.PROVIDER_COUNT_FAILED}


_FIRST_CALLS = r"""
import json, threading
import cw_middleware as cw

THREADS = 8
barrier = threading.Barrier(THREADS)
errors = []

def first_call(i):
    barrier.wait()  # every thread's first call at once: none finds a runtime configured
    try:
        with cw.stage("first-use", f"stage-{i}"):
            cw.completion(model="gpt-4o", messages=[{"role": "user", "content": f"hello {i}"}], mock_response="ok")
    except BaseException as exc:
        errors.append(type(exc).__name__)

threads = [threading.Thread(target=first_call, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({"flushed": cw.flush(10.0), "errors": errors}))
"""


@pytest.mark.system
def test_concurrent_first_calls_configure_one_runtime_and_lose_no_stage(tmp_path):
    """Two first calls each configuring a runtime closed one under the other's calls: stages went missing."""
    path = tmp_path / "telemetry.jsonl"
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "CW_EXPORT": f"file:{path}", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = subprocess.run([sys.executable, "-c", _FIRST_CALLS], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"flushed": True, "errors": []}
    reader = cw.reader(f"file:{path}")
    found = [s.stage_id for s in reader.stages("first-use")]
    assert sorted(found) == [f"stage-{i}" for i in range(8)]
    assert all(reader.context_window("first-use", f"stage-{i}").available for i in range(8))


_ASYNC_IN_A_RUNNER = r"""
import asyncio
import cw_middleware as cw

async def calls():
    with cw.stage("async-exit", "runner"):
        for i in range(3):
            await cw.acompletion(model="gpt-4o", messages=[{"role": "user", "content": f"hello {i}"}], mock_response="ok")

with asyncio.Runner() as runner:
    runner.run(calls())
print("returned")
"""


@pytest.mark.system
def test_async_calls_in_a_runner_exit_cleanly_with_their_snapshots_exported(tmp_path):
    """docs/troubleshooting.md: a Runner (or asyncio.run) cancels LiteLLM's async logging worker on close; a bare
    loop closed under it crashed the interpreter at exit on CPython 3.11. Through cw, with the default file export
    and its exit hook, the process ends with 0 and the calls' snapshots are in the file."""
    path = tmp_path / "telemetry.jsonl"
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "CW_EXPORT": f"file:{path}", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = subprocess.run([sys.executable, "-c", _ASYNC_IN_A_RUNNER], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "returned"
    window = cw.reader(f"file:{path}").context_window("async-exit", "runner")
    assert window.available
    assert window.stage_totals is not None and window.stage_totals.calls == 3
