"""Memory stays flat over 100k requests, under the documented cache budget (issue 11).

100,000 local estimates (the counting part of every call) over 20-turn conversations whose
every text is new, so each content-addressed cache fills to its cap and then turns over; a
new stage every conversation. After a warm-up of 20,000, RSS may not grow by more than the
slack below, and no cache may exceed its cap. ~15-30 s. `benchmarks/memory.py` measures the
whole call path (LiteLLM, telemetry) against bare LiteLLM.
"""

from __future__ import annotations

import os
import random

import pytest
from opentelemetry import metrics, trace

import cw_middleware as cw
from cw_middleware._capture.runtime import Runtime, set_runtime
from cw_middleware._counting import estimator as estimator_module
from cw_middleware._counting import tool_count
from cw_middleware._kernel.config import resolve

pytestmark = pytest.mark.system  # the system tier (pyproject.toml): `pytest -m system`

CALLS = 100_000
WARM_UP = 20_000
TURNS = 20
SLACK_MB = 8  # allocator noise over the flat part; the caches' own budget is reached during warm-up


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.fixture
def quiet_runtime():
    """No telemetry behind it: an in-memory exporter would itself keep every stage span."""
    rt = Runtime(resolve(export="none", environ={}), trace.NoOpTracerProvider(), metrics.NoOpMeterProvider())
    previous = set_runtime(rt)
    yield rt
    set_runtime(previous)


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="RSS is read from /proc (Linux)")
def test_rss_is_flat_after_warm_up_and_caches_stay_capped(quiet_runtime):
    runtime = quiet_runtime
    rng = random.Random(3)
    words = "agent file test fix patch module token window budget memory skill server tool call result".split()
    tools = [
        {"type": "function", "function": {"name": f"mcp__srv{i % 7}__t{i}", "description": "d", "parameters": {"type": "object"}}}
        for i in range(12)
    ]
    at_warm_up = 0.0
    for conversation in range(CALLS // TURNS):
        messages = [{"role": "system", "content": " ".join(rng.choices(words, k=60)) + f" #{conversation}"}]
        with cw.stage(run_id=f"run-{conversation // 50}", stage_id=f"task-{conversation}"):
            for turn in range(TURNS):
                messages = [*messages, {"role": "user", "content": " ".join(rng.choices(words, k=12)) + f" #{turn}"}]
                snap = cw.estimate(model="gpt-4o", messages=messages, tools=tools[: 4 + conversation % 8])
                assert snap.input_tokens > 0
                messages.append({"role": "assistant", "content": " ".join(rng.choices(words, k=8))})
        if (conversation + 1) * TURNS == WARM_UP:
            at_warm_up = _rss_mb()
    grown = _rss_mb() - at_warm_up
    est = runtime.estimator
    assert len(est._texts.young) <= estimator_module.MAX_TEXT_CACHE and len(est._texts.old) <= estimator_module.MAX_TEXT_CACHE
    assert est._n_conversations <= estimator_module.MAX_CONVERSATIONS
    assert all(len(sets) <= tool_count.MAX_TOOL_SETS for sets in est._tools._recent.values())
    assert len(runtime.parts._details) <= runtime.parts.CACHE_SIZE
    assert grown < SLACK_MB, f"RSS grew {grown:.1f} MB between {WARM_UP} and {CALLS} requests"
