"""Money and the cache with real LiteLLM: input cost per category from LiteLLM's prices, cached tokens in request order.

Every price an assertion uses is read from ``litellm.model_cost`` (the map LiteLLM bills by),
every cached number from what the local servers report; none from the code under test.
"""

from __future__ import annotations

import json

import litellm
import pytest
from embedded_helpers import exported_to
from providers import CHAT, MESSAGES, provider  # noqa: F401 - the fixture
from stubs import TraceStore, serving
from stubs.jaeger import JaegerStub

import cw_middleware as cw
from cw_middleware._kernel.contract import CATEGORIES, Cost, CountMethod

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file from the repository. " * 10,
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
MESSAGES_ = [
    cw.message(
        "system",
        [cw.segment("You are a coding agent. " * 30, "system_prompt"), cw.segment("# AGENTS.md\n- run pytest\n" * 30, "memory")],
    ),
    {"role": "user", "content": "Fix the failing test."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "def test_a():\n    assert f() == 2\n" * 60},
]


def _price(model: str, key: str) -> float:
    return float(litellm.model_cost[model][key])


def _by(snapshot) -> dict[str, int]:
    return {b.category.value: b.tokens for b in snapshot.breakdown}


def _cached(snapshot) -> dict[str, int | None]:
    return {b.category.value: b.cached_tokens for b in snapshot.breakdown}


def test_a_mocked_call_costs_its_tokens_at_litellms_input_price(runtime):
    cw.completion(model="gpt-4o", messages=MESSAGES_, tools=TOOLS, mock_response="ok")
    snap = cw.snapshots()[-1]
    price = _price("gpt-4o", "input_cost_per_token")
    cost = snap.cost
    assert cost is not None and cost.currency == "USD"
    for category, tokens in _by(snap).items():
        assert cost.by_category[category] == pytest.approx(tokens * price)
    assert cost.input_cost == pytest.approx(snap.input_tokens * price)
    assert snap.cached_tokens is None and set(_cached(snap).values()) == {None}  # a mock reports no cache
    Cost.model_validate(cost.model_dump())  # built without validation on the call path: a valid model


def test_a_model_without_a_price_costs_null_with_one_warning(telemetry):
    from cw_middleware._capture.runtime import Runtime, set_runtime
    from cw_middleware._kernel.config import resolve

    rt = Runtime(
        resolve(export="none", context_windows={"my-own-model": 32_000}, environ={}),
        telemetry.tracer_provider,
        telemetry.meter_provider,
    )
    previous = set_runtime(rt)
    try:
        cw.completion(model="openai/my-own-model", messages=MESSAGES_, mock_response="ok")
        snaps = cw.snapshots()
    finally:
        rt.shutdown()
        set_runtime(previous)
    assert snaps and all(s.cost is None for s in snaps)
    assert all(s.warning_codes().count("price_unknown") == 1 for s in snaps)


def test_cached_tokens_are_the_requests_first_tokens_and_cost_the_cache_read_price(runtime, provider):  # noqa: F811
    route = provider[CHAT]
    route.tokens, route.cached_tokens = 2400, 1024
    cw.completion(model="openai/gpt-4o", messages=MESSAGES_, tools=TOOLS, api_base=f"{provider.url}/v1", api_key="sk-test")
    snap = cw.snapshots()[-1]
    assert snap.count_method is CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN and snap.input_tokens == 2400
    cached, tokens = _cached(snap), _by(snap)
    assert snap.cached_tokens == sum(cached.values()) == 1024
    # a prefix: the tool definitions and the system message (system prompt, memory) come first and are
    # cached whole; the conversation's end (the long tool result) is not
    assert cached["tools"] == tokens["tools"] > 0
    assert cached["system_prompt"] == tokens["system_prompt"] > 0
    assert cached["memory"] == tokens["memory"] > 0
    assert 0 <= cached["conversation"] < tokens["conversation"]
    assert all(0 <= cached[c] <= tokens[c] for c in tokens)
    plain, read = _price("gpt-4o", "input_cost_per_token"), _price("gpt-4o", "cache_read_input_token_cost")
    for category in tokens:
        expected = (tokens[category] - cached[category]) * plain + cached[category] * read
        assert snap.cost.by_category[category] == pytest.approx(expected)
    assert snap.cost.input_cost == pytest.approx((2400 - 1024) * plain + 1024 * read)


def test_nothing_cached_is_zero_everywhere(runtime, provider):  # noqa: F811
    provider[CHAT].tokens, provider[CHAT].cached_tokens = 2400, 0
    cw.completion(model="openai/gpt-4o", messages=MESSAGES_, tools=TOOLS, api_base=f"{provider.url}/v1", api_key="sk-test")
    snap = cw.snapshots()[-1]
    assert snap.cached_tokens == 0 and set(_cached(snap).values()) == {0}
    assert snap.cost.input_cost == pytest.approx(2400 * _price("gpt-4o", "input_cost_per_token"))


def test_anthropic_cache_reads_and_writes_each_cost_their_price(runtime, provider, monkeypatch):  # noqa: F811
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    route = provider[MESSAGES]
    route.tokens, route.cache_write_tokens, route.cached_tokens = 300, 200, 500  # after, written, read
    part = {"type": "text", "text": "You ship parcels. " * 80, "cache_control": {"type": "ephemeral"}}
    system = {"role": "system", "content": [part]}
    cw.completion(
        model="anthropic/claude-sonnet-4-5",
        messages=[system, {"role": "user", "content": "Where is parcel 7? " * 20}],
        max_tokens=50,
        api_base=provider.url,
        api_key="sk-ant-test",
        cw_provider_count="never",
    )
    snap = cw.snapshots()[-1]
    assert snap.input_tokens == 1000 and snap.cached_tokens == 500
    model = "claude-sonnet-4-5"
    plain, read, write = (
        _price(model, "input_cost_per_token"),
        _price(model, "cache_read_input_token_cost"),
        _price(model, "cache_creation_input_token_cost"),
    )
    # the prefix (the system prompt, 700 tokens) is read (500) then written (200); the turn after it is plain input
    assert _by(snap)["system_prompt"] == 700 and _cached(snap)["system_prompt"] == 500
    assert snap.cost.by_category["system_prompt"] == pytest.approx(500 * read + 200 * write)
    assert snap.cost.input_cost == pytest.approx(500 * read + 200 * write + 300 * plain)


def test_the_cost_counter_adds_each_call_once_and_the_unused_gauge_follows(runtime, telemetry):
    tools = [*TOOLS, {"type": "function", "function": {"name": "never_called", "parameters": {"type": "object"}}}]
    with cw.stage("run-cost", "s@1"):
        for _ in range(2):
            cw.completion(model="gpt-4o", messages=MESSAGES_, tools=tools, mock_response="ok")
    last = cw.snapshots()[-1]
    points = {
        m.name: m.data.data_points
        for rm in telemetry.metrics.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    cost = {p.attributes["agent.context_window.category"]: p.value for p in points["agent.context_window.cost"]}
    # two identical calls: each counted once (not once per snapshot: each call made two)
    for category in CATEGORIES:
        assert cost.get(category.value, 0.0) == pytest.approx(2 * last.cost.by_category[category])
    (unused,) = points["agent.context_window.unused_tool_tokens"]
    assert unused.value == last.unused_tool_tokens == next(t for t in last.tools if t.name == "never_called").definition_tokens


def test_the_readers_give_cost_and_cache_back(tmp_path, provider):  # noqa: F811
    provider[CHAT].tokens, provider[CHAT].cached_tokens = 2400, 1024
    path = str(tmp_path / "t.jsonl")
    with exported_to(path) as rt, cw.stage("run-cost", "agent@1"):
        kwargs = {"api_base": f"{provider.url}/v1", "api_key": "sk-test"}
        cw.completion(model="openai/gpt-4o", messages=MESSAGES_, tools=TOOLS, **kwargs)
        rt.flush(5.0)
        written = cw.snapshots()[-1]
    store = TraceStore()
    store.feed_file(path)
    with serving(JaegerStub(store)) as jaeger:
        for backend in (f"file:{path}", f"jaeger+{jaeger.url}"):
            answer = cw.reader(backend).context_window("run-cost", "agent@1")
            assert answer.cost == written.cost and answer.cached_tokens == written.cached_tokens == 1024
            assert [b.cached_tokens for b in answer.breakdown] == [b.cached_tokens for b in written.breakdown]
            body = json.loads(answer.model_dump_json())
            assert body["cost"]["currency"] == "USD" and set(body["cost"]["by_category"]) == {c.value for c in CATEGORIES}
