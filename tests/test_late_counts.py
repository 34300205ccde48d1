"""A provider count that lands after a newer call of its stage began: kept, but never the stage's latest."""

from __future__ import annotations

import time

from embedded_helpers import embedded_runtime
from providers import ANTHROPIC, provider  # noqa: F401 - the fixture

import cw_middleware as cw
from cw_middleware._kernel.contract import CountMethod


def test_an_older_calls_late_count_does_not_replace_the_newest_calls_breakdown(tmp_path, provider):  # noqa: F811
    path = tmp_path / "telemetry.jsonl"
    provider[ANTHROPIC].tokens = 4321
    provider[ANTHROPIC].delay = 1.0
    short = [{"role": "user", "content": "first question"}]
    long = short + [{"role": "assistant", "content": "an answer"}, {"role": "user", "content": "a much longer follow-up " * 50}]
    with embedded_runtime(export=f"file:{path}", provider_count="always") as runtime:
        with cw.stage(run_id="run-late", stage_id="s1"):
            # Call 1: a slow count is queued; call 2 (no count) starts before it lands.
            cw.completion(
                model="anthropic/claude-sonnet-4-5", messages=short, mock_response="ok", api_key="sk-test", api_base=provider.url
            )
            cw.completion(model="anthropic/claude-sonnet-4-5", messages=long, mock_response="ok", cw_provider_count="never")
            newest = cw.snapshots()[-1]
            deadline = time.monotonic() + 10
            while not any(s.count_method is CountMethod.PROVIDER_API_SCALED_BREAKDOWN for s in cw.snapshots()):
                assert time.monotonic() < deadline, "the count never arrived"
                time.sleep(0.05)
        assert cw.flush(5)
    late = [s for s in runtime.snapshots() if s.count_method is CountMethod.PROVIDER_API_SCALED_BREAKDOWN]
    assert [s.input_tokens for s in late] == [4321]  # it happened, and is in process history
    assert "agent.context_window.superseded" in path.read_text()  # and in the backend, flagged

    answer = cw.reader(f"file:{path}").context_window("run-late", "s1")
    assert answer.input_tokens == newest.input_tokens != 4321
    assert answer.event_seq == newest.event_seq
