"""A call's end (its response-usage snapshot, stage totals, span end) is recorded off the caller's thread
where the telemetry pipeline is cw's own: the caller never waits for it, a stage's snapshots keep their
order, and the span and its events carry the call's own times. With the application's providers the
call's span is finished when the call returns, as before."""

from __future__ import annotations

import threading
import time

import pytest
from embedded_helpers import embedded_runtime
from gates import HANG_GUARD
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from providers import ANTHROPIC, CHAT, MESSAGES, provider  # noqa: F401 - the fixture

import cw_middleware as cw
from cw_middleware._capture.runtime import Runtime, set_runtime
from cw_middleware._counting.rules._tiktoken import calls_in_flight
from cw_middleware._kernel.config import resolve


@pytest.fixture
def own_pipeline(telemetry):
    """A Runtime whose call ends go to its call-end worker (as with cw's own pipeline), recording in memory."""
    rt = Runtime(resolve(export="none", environ={}), telemetry.tracer_provider, telemetry.meter_provider, ends_off_thread=True)
    previous = set_runtime(rt)
    yield rt
    rt.shutdown()
    set_runtime(previous)


def _hold(worker) -> threading.Event:
    """A job that keeps ``worker`` busy until the returned event is set."""
    release, started = threading.Event(), threading.Event()

    def held() -> None:
        started.set()
        release.wait(30)

    assert worker.submit(held)
    assert started.wait(10)
    return release


def _call(content: str) -> None:
    cw.completion(model="gpt-4o", messages=[{"role": "user", "content": content}], mock_response="ok")


def test_the_caller_does_not_wait_for_its_calls_end(own_pipeline, telemetry):
    release = _hold(own_pipeline.call_ends)
    try:
        with cw.stage("ends", "one"):
            _call("a question that ends while the worker is held")  # returns: nothing waits for the held worker
        assert own_pipeline.call_ends.pending == 1  # its local estimate and its end, in one job (behind the held one)
        assert not any(s.name.startswith("chat") for s in telemetry.spans.get_finished_spans())
    finally:
        release.set()
    assert own_pipeline.flush(10)
    (span,) = [s for s in telemetry.spans.get_finished_spans() if s.name.startswith("chat")]
    events = [e for e in span.events if e.name == "agent.context_window.snapshot"]
    assert [e.attributes["agent.context_window.count_method"] for e in events] == ["local_estimate", "local_estimate"]
    assert "mock_usage_not_reconciled" in events[-1].attributes["agent.context_window.warnings"]
    # recorded late, stamped with the call's own end: no event after its span ends
    assert all(span.start_time <= e.timestamp <= span.end_time for e in events)


def _held_call(provider, stage_id: str) -> threading.Thread:  # noqa: F811
    """A call in flight: sent to the local provider, which holds its answer until the test releases it."""

    def call() -> None:
        with cw.stage("ends", stage_id):
            cw.completion(
                model="openai/gpt-4o",
                messages=[{"role": "user", "content": "a question the provider takes its time to answer"}],
                api_base=f"{provider.url}/v1",
                api_key="sk-test",
            )

    thread = threading.Thread(target=call)
    thread.start()
    assert provider.wait_for_hits(CHAT, 1, timeout=HANG_GUARD)  # sent: its estimate is made, its first snapshot queued
    return thread


def test_a_calls_first_snapshot_waits_until_its_request_is_sent(own_pipeline, provider, monkeypatch):  # noqa: F811
    # no deadline here: only the call's own send holds its first snapshot back
    monkeypatch.setattr("cw_middleware._capture.call.LIVE_AFTER", 60.0)
    answer = provider.hold(CHAT)
    thread = _held_call(provider, "held-back")
    try:
        assert [s for s in own_pipeline.snapshots(wait=0) if s.stage_id == "held-back"] == []
    finally:
        answer.set()
        thread.join(HANG_GUARD)
    assert own_pipeline.flush(10)
    first, last = [s for s in own_pipeline.snapshots() if s.stage_id == "held-back"]
    assert first.count_method.value == "local_estimate"
    assert last.count_method.value == "response_usage_scaled_breakdown"
    assert first.generated_at <= last.generated_at  # stamped when it was made, not when it was recorded


def test_a_calls_first_snapshot_does_not_wait_for_other_calls_in_flight(own_pipeline, monkeypatch):
    # Back-to-back calls of an agent beside others (a proxy, a pool): each call's first snapshot is
    # recorded once its own send is over, never held (nor its request kept) until all calls pause.
    monkeypatch.setattr("cw_middleware._capture.call.LIVE_AFTER", 60.0)
    with calls_in_flight():  # another call of the process, still in flight throughout
        with cw.stage("ends", "beside-others"):
            _call("first")
            _call("second")
        assert own_pipeline.flush(10)
        snaps = [s for s in own_pipeline.snapshots(wait=0) if s.stage_id == "beside-others"]
    assert [s.count_method.value for s in snaps] == ["local_estimate"] * 4


def test_a_long_calls_first_snapshot_is_there_while_the_call_runs(own_pipeline, provider):  # noqa: F811
    answer = provider.hold(CHAT)
    thread = _held_call(provider, "long")
    try:
        assert own_pipeline.flush(10)  # waits for the call-end worker: the first snapshot, past its hold-back
        (first,) = [s for s in own_pipeline.snapshots(wait=0) if s.stage_id == "long"]
        assert first.count_method.value == "local_estimate"
        assert thread.is_alive()  # the provider has not answered yet
    finally:
        answer.set()
        thread.join(HANG_GUARD)


def test_a_slow_calls_first_snapshot_reaches_the_file_while_it_runs_and_counts_once(tmp_path, provider):  # noqa: F811
    """Issue 36 item 1: a span is exported only when it ends, so a call still waiting for its provider has its
    first snapshot carried out on a short span of its own; read back while the call runs, and one call after."""
    path = tmp_path / "live.jsonl"
    with embedded_runtime(export=f"file:{path}", ends_off_thread=True) as runtime:
        answer = provider.hold(CHAT)
        thread = _held_call(provider, "live")
        sent = time.monotonic()
        try:
            reader = cw.reader(f"file:{path}")
            window = None
            while window is None and time.monotonic() - sent < HANG_GUARD:
                try:
                    found = reader.context_window("ends", "live")
                    window = found if found.available else None
                except cw.NotFound:
                    pass
                time.sleep(0.05)
            print(f"\nfirst snapshot read back {time.monotonic() - sent:.2f} s after the send")
            assert window is not None and window.count_method.value == "local_estimate"
            assert thread.is_alive()  # the provider has not answered yet
        finally:
            answer.set()
            thread.join(HANG_GUARD)
        assert runtime.flush(10)
    reader = cw.reader(f"file:{path}")
    assert reader.context_window("ends", "live").count_method.value == "response_usage_scaled_breakdown"
    (point,) = reader.history("ends", "live")  # the call, once: its snapshot on the carrier and on the call span
    assert point.input_tokens == provider[CHAT].tokens


def test_a_provider_count_starts_while_the_call_runs(own_pipeline, provider, monkeypatch):  # noqa: F811
    # The local snapshot may wait for the send; the count does not: it may answer while a long call runs.
    monkeypatch.setattr("cw_middleware._capture.call.LIVE_AFTER", 60.0)
    answer = provider.hold(MESSAGES)

    def call() -> None:
        with cw.stage("ends", "counted"):
            cw.completion(
                model="anthropic/claude-3-5-sonnet-20241022",
                messages=[{"role": "user", "content": "a question counted by the provider while it is answered"}],
                api_base=provider.url,
                api_key="sk-ant-test",
                cw_provider_count="always",
            )

    thread = threading.Thread(target=call)
    thread.start()
    try:
        assert provider.wait_for_hits(ANTHROPIC, 1, timeout=HANG_GUARD)  # counted while the answer is held
        assert thread.is_alive()
    finally:
        answer.set()
        thread.join(HANG_GUARD)
    assert own_pipeline.flush(10)
    snaps = [s for s in own_pipeline.snapshots() if s.stage_id == "counted"]
    methods = [s.count_method.value for s in snaps]
    assert methods[0] == "local_estimate"  # the count's snapshot queued behind it
    assert "provider_api_scaled_breakdown" in methods and "response_usage_scaled_breakdown" in methods
    assert [s.event_seq for s in snaps] == sorted(s.event_seq for s in snaps)


def test_a_stages_snapshots_keep_their_order_while_ends_wait(own_pipeline):
    release = _hold(own_pipeline.call_ends)
    try:
        with cw.stage("ends", "order"):
            _call("first")
            _call("the second question, longer than the first one")
    finally:
        release.set()
    snaps = [s for s in own_pipeline.snapshots() if s.stage_id == "order"]
    # each call's local estimate, then its end: the second call's first snapshot queued behind the first's end
    first, second = snaps[0].input_tokens, snaps[2].input_tokens
    assert [s.input_tokens for s in snaps] == [first, first, second, second]
    assert second > first
    assert [s.event_seq for s in snaps] == sorted(s.event_seq for s in snaps)
    assert snaps[-1].stage_totals is not None and snaps[-1].stage_totals.calls == 2


def test_with_the_applications_providers_the_span_is_finished_when_the_call_returns(tmp_path):
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    runtime = cw.configure(export="none", tracer_provider=tracer_provider, meter_provider=MeterProvider())
    try:
        _call("read at once by the application")
        (span,) = [s for s in spans.get_finished_spans() if s.name.startswith("chat")]  # no flush needed
        assert [e.name for e in span.events] == ["agent.context_window.snapshot"] * 2
        assert runtime.call_ends is None
        ours = cw.configure(export=f"file:{tmp_path / 'telemetry.jsonl'}")  # cw's own pipeline
        assert ours.call_ends is not None
    finally:
        set_runtime(None).close()


def test_an_estimate_that_comes_after_its_call_stands_before_the_calls_end(own_pipeline, telemetry):
    release = _hold(own_pipeline.background_estimates)
    try:
        with cw.stage("ends", "late-estimate"):
            _call("a long request " * 6_000)  # past the caller's budget: estimated on the (held) background worker
    finally:
        release.set()
    first, last = [s for s in own_pipeline.snapshots() if s.stage_id == "late-estimate"]
    # the end's snapshot is the latest by time too: readers that pick by time show the call's end
    assert first.generated_at <= last.generated_at
    assert [w.code for w in last.warnings] == ["mock_usage_not_reconciled"]
