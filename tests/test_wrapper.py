"""The drop-in wrapper with real LiteLLM (mock_response): same results, snapshots in order."""

from __future__ import annotations

import asyncio

import litellm
import pytest

import cw_middleware as cw
from cw_middleware._kernel.contract import CountMethod, WarningCode

MSGS = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]


def test_completion_returns_what_litellm_returns(runtime):
    ours = cw.completion(model="gpt-4o", messages=MSGS, mock_response="hello")
    theirs = litellm.completion(model="gpt-4o", messages=MSGS, mock_response="hello")
    assert type(ours) is type(theirs)
    assert ours.choices[0].message.content == theirs.choices[0].message.content == "hello"


def test_positional_arguments_work_like_litellm(runtime):
    resp = cw.completion("gpt-4o", MSGS, mock_response="pos")
    assert resp.choices[0].message.content == "pos"
    assert cw.snapshots()[-1].input_tokens == cw.estimate(model="gpt-4o", messages=MSGS).input_tokens


def test_each_call_publishes_a_local_snapshot_then_a_final_one(runtime):
    with cw.stage(run_id="run-1", stage_id="implement@1"):
        cw.completion(model="gpt-4o", messages=MSGS, mock_response="ok")
    first, last = cw.snapshots()[-2:]
    assert first.count_method is CountMethod.LOCAL_ESTIMATE
    assert first.event_seq < last.event_seq
    assert (first.run_id, first.stage_id) == (last.run_id, last.stage_id) == ("run-1", "implement@1")
    # mock usage is synthetic (LiteLLM reports a fixed prompt count): never reconciled to
    assert last.count_method is CountMethod.LOCAL_ESTIMATE
    assert WarningCode.MOCK_USAGE_NOT_RECONCILED.value in last.warning_codes()
    assert last.input_tokens == first.input_tokens


def test_stream_chunks_are_those_of_litellm(runtime):
    ours = cw.completion(model="gpt-4o", messages=MSGS, stream=True, mock_response="one two three")
    assert isinstance(ours, litellm.CustomStreamWrapper)
    got = [c.choices[0].delta.content for c in ours]
    want = [
        c.choices[0].delta.content
        for c in litellm.completion(model="gpt-4o", messages=MSGS, stream=True, mock_response="one two three")
    ]
    assert got == want
    assert WarningCode.MOCK_USAGE_NOT_RECONCILED.value in cw.snapshots()[-1].warning_codes()


async def test_async_calls_and_streams(runtime):
    resp = await cw.acompletion(model="gpt-4o", messages=MSGS, mock_response="async")
    assert resp.choices[0].message.content == "async"
    stream = await cw.acompletion(model="gpt-4o", messages=MSGS, stream=True, mock_response="a b")
    got = [c.choices[0].delta.content async for c in stream]
    plain = await litellm.acompletion(model="gpt-4o", messages=MSGS, stream=True, mock_response="a b")
    assert got == [c.choices[0].delta.content async for c in plain]
    assert len(cw.snapshots()) == 4


async def test_concurrent_stages_keep_their_own_ids(runtime):
    async def agent(stage_id: str, text: str) -> None:
        with cw.stage(run_id="run-c", stage_id=stage_id):
            for _ in range(3):
                await cw.acompletion(model="gpt-4o", messages=[{"role": "user", "content": text}], mock_response="ok")
                await asyncio.sleep(0)

    await asyncio.gather(agent("a", "short"), agent("b", "a much longer question " * 20))
    by_stage = {}
    for s in cw.snapshots():
        by_stage.setdefault(s.stage_id, set()).add(s.input_tokens)
    assert set(by_stage) == {"a", "b"}
    assert max(by_stage["a"]) < min(by_stage["b"])


def test_outside_a_stage_calls_land_in_the_default_run(runtime):
    from datetime import UTC, datetime

    cw.completion(model="gpt-4o", messages=MSGS, mock_response="ok")
    last = cw.snapshots()[-1]
    assert (last.run_id, last.stage_id) == ("default:cw-middleware", datetime.now(UTC).strftime("%Y-%m-%d"))


def test_bad_stage_ids_are_refused():
    with pytest.raises(cw.ConfigError, match="run_id"):
        with cw.stage(run_id="", stage_id="s"):
            pass


def test_errors_from_litellm_reach_the_caller_unchanged(runtime):
    with pytest.raises(litellm.exceptions.BadRequestError) as ours:
        cw.completion(model="gpt-4o", messages=MSGS, mock_response=litellm.exceptions.BadRequestError("nope", "gpt-4o", "openai"))
    assert "nope" in str(ours.value)


def test_snapshot_history_is_bounded(telemetry):
    from cw_middleware._capture.runtime import Runtime, set_runtime
    from cw_middleware._kernel.config import resolve

    rt = Runtime(resolve(export="none", snapshot_history=5, environ={}), telemetry.tracer_provider, telemetry.meter_provider)
    previous = set_runtime(rt)
    try:
        for i in range(10):
            cw.completion(model="gpt-4o", messages=[{"role": "user", "content": f"q{i}"}], mock_response="ok")
        seqs = [s.event_seq for s in cw.snapshots()]
        assert len(seqs) == 5 and seqs == sorted(seqs)
    finally:
        set_runtime(previous)


def test_a_stream_dropped_before_its_end_still_ends_its_call(runtime, telemetry):
    import gc
    import time

    stream = cw.completion(model="gpt-4o", messages=MSGS, stream=True, mock_response="one two three four")
    next(iter(stream))  # read one chunk, then walk away
    assert not [s for s in telemetry.spans.get_finished_spans() if s.name.startswith("chat")]
    del stream
    deadline = time.monotonic() + 10  # LiteLLM's logging pool holds the stream until its queued work ran
    while not [s for s in telemetry.spans.get_finished_spans() if s.name.startswith("chat")]:
        assert time.monotonic() < deadline, "the dropped stream's call never ended"
        gc.collect()
        time.sleep(0.05)
    ended = [s for s in telemetry.spans.get_finished_spans() if s.name.startswith("chat")]
    assert len(ended) == 1
    assert len(cw.snapshots()) == 2  # the local estimate, then the call's last word


def test_a_bad_environment_never_breaks_the_call(monkeypatch, caplog):
    from cw_middleware._capture.runtime import set_runtime

    monkeypatch.setenv("CW_PROVIDER_COUNT", "sometimes")
    previous = set_runtime(None)  # as in a fresh process: the first call configures from the environment
    try:
        with cw.stage(run_id="run-env", stage_id="s"):
            resp = cw.completion(model="gpt-4o", messages=MSGS, mock_response="still fine")
        assert resp.choices[0].message.content == "still fine"
        assert cw.snapshots()[-1].input_tokens > 0  # snapshots still made, telemetry off
        assert "configuration failed" in caplog.text and "sometimes" in caplog.text
    finally:
        set_runtime(previous)


def test_stage_ids_follow_the_readers_rules():
    with pytest.raises(cw.ConfigError, match="control characters"):
        with cw.stage(run_id="run", stage_id="impl\t1"):
            pass


def test_the_fallback_after_a_bad_environment_sends_nothing_upstream(monkeypatch):
    from cw_middleware._capture.runtime import get_runtime, set_runtime
    from cw_middleware._kernel.values import ProviderCountPolicy

    monkeypatch.setenv("CW_PROVIDER_COUNT_TIMEOUT", "5s")
    previous = set_runtime(None)
    try:
        runtime = get_runtime()
        assert runtime.config.provider_count is ProviderCountPolicy.NEVER and runtime.config.export == "none"
    finally:
        set_runtime(previous)


def test_ids_that_cannot_be_exported_or_nested_reentry_are_refused(runtime):
    with pytest.raises(cw.ConfigError, match="surrogates"):
        with cw.stage(run_id="run", stage_id="a\ud800b"):
            pass
    with cw.stage(run_id="run", stage_id="outer"):
        with pytest.raises(cw.ConfigError, match="already open"):
            with cw.stage(run_id="run", stage_id="outer"):
                pass
        with cw.stage(run_id="run", stage_id="inner"):  # another id is fine
            pass


def test_an_input_over_the_window_is_flagged_and_utilization_exceeds_one(runtime, telemetry):
    import cw_middleware as cw

    big = "lorem ipsum dolor " * 700  # ~2,100 tokens against a 1,000-token window
    messages = [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "c1", "content": big}]
    with cw.stage(run_id="r-overflow", stage_id="s"):
        cw.completion(model="gpt-4o", messages=messages, mock_response="ok", cw_context_window=1000)
    snap = cw.snapshots()[-1]
    assert snap.input_tokens > 1000
    assert "context_window_exceeded" in snap.warning_codes()
    events = [e for s in telemetry.spans.get_finished_spans() for e in s.events if e.name == "agent.context_window.snapshot"]
    assert events and events[-1].attributes["agent.context_window.utilization"] > 1.0
    assert "context_window_exceeded" in events[-1].attributes["agent.context_window.warnings"]
