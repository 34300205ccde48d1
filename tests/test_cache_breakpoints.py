"""Explicit cache breakpoints (Anthropic ``cache_control``): the breakdown reconciles in two groups.

A response's cache read + cache write is the exact token count of the prompt up to the
breakpoint; the prefix's categories must add up to exactly that, and the rest to the
remainder, so a miscount after the breakpoint never moves the cached system prompt and tools.
The end-to-end test goes through real LiteLLM to a local server speaking Anthropic's Messages
API; every expected number is one that server reports.
"""

from __future__ import annotations

import random

from providers import MESSAGES as MESSAGES_API
from providers import provider  # noqa: F401 - the fixture

import cw_middleware as cw
from cw_middleware._counting.estimator import Estimator
from cw_middleware._kernel.contract import Category, CountMethod
from cw_middleware._snapshots.reconcile import reconcile, reconcile_with_prefix, usage_cache_prefix_tokens

SYSTEM = "You are a meticulous assistant for a shipping company. " * 40
CACHED_SYSTEM = {"role": "system", "content": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]}
TOOL = {
    "type": "function",
    "function": {
        "name": "track_parcel",
        "description": "Where a parcel is now.",
        "parameters": {"type": "object", "properties": {"parcel_id": {"type": "string"}}, "required": ["parcel_id"]},
    },
}


def _breakdown(snap) -> dict[str, int]:
    return {b.category.value: b.tokens for b in snap.breakdown}


# ---------------------------------------------------------------- the two-group rule


def test_prefix_scales_to_its_exact_count_and_the_rest_to_the_remainder():
    local = {"system": 1000, "tools": 500, "conversation": 100, "other": 6}
    prefix = {"system": 1000, "tools": 500}
    # The provider: prefix 1,400 (read + write), 3,000 in all: the conversation was badly undercounted.
    out = reconcile_with_prefix(local, 3000, None, "other", prefix, 1400)
    assert out["system"] + out["tools"] == 1400
    assert out["conversation"] + out["other"] == 1600
    assert sum(out.values()) == 3000
    # One group for everything would have blown the conversation's error into the system prompt.
    single = reconcile(local, 3000, None, "other")
    assert single["system"] + single["tools"] > 2700


def test_a_part_of_a_category_can_sit_on_each_side_of_the_breakpoint():
    local = {"conversation": 300, "system": 200}
    prefix = {"system": 200, "conversation": 100}  # the first turn is cached, the rest is not
    out = reconcile_with_prefix(local, 1000, None, "other", prefix, 400)
    # prefix: system 200 -> 267, conversation 100 -> 133; remainder: conversation 200 -> 600
    assert out == {"system": 267, "conversation": 733}


def test_no_usable_prefix_count_is_plain_reconciliation():
    local = {"system": 1000, "conversation": 100}
    for prefix_total in (0, -5, 5000):  # nothing cached (under the minimum), nonsense, more than the total
        out = reconcile_with_prefix(local, 2000, None, "other", {"system": 1000}, prefix_total)
        assert out == reconcile(local, 2000, None, "other")
    assert reconcile_with_prefix(local, 2000, None, "other", {}, 1000) == reconcile(local, 2000, None, "other")


def test_groups_sum_exactly_for_random_inputs():
    rng = random.Random(11)
    for _ in range(300):
        local = {k: rng.randint(0, 3000) for k in "abcde"}
        prefix = {k: rng.randint(0, local[k]) for k in "abc"}
        total = rng.randint(1, 20_000)
        prefix_total = rng.randint(0, total)
        carriers = {"d": 1} if rng.random() < 0.3 else None
        out = reconcile_with_prefix(local, total, carriers, "z", prefix, prefix_total)
        assert sum(out.values()) == total
        assert all(v >= 0 for v in out.values())


def test_cache_prefix_tokens_need_a_reported_write():
    assert usage_cache_prefix_tokens({"cache_creation_input_tokens": 512, "cache_read_input_tokens": 2048}) == 2560
    assert usage_cache_prefix_tokens({"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}) == 0
    # OpenAI's automatic caching reports reads only: no breakpoint semantics.
    assert usage_cache_prefix_tokens({"prompt_tokens": 3000, "prompt_tokens_details": {"cached_tokens": 2048}}) is None
    assert usage_cache_prefix_tokens(None) is None


# ---------------------------------------------------------------- where the breakpoint falls


def test_the_prefix_follows_anthropics_order_tools_system_turns():
    est = Estimator()
    model = "anthropic/claude-sonnet-4-5"
    turns = [
        {"role": "user", "content": "Where is parcel 1?"},
        {"role": "assistant", "content": "In Lyon."},
        {"role": "user", "content": [{"type": "text", "text": "And parcel 2?", "cache_control": {"type": "ephemeral"}}]},
        {"role": "user", "content": "Thanks, and parcel 3 " * 30},
    ]
    plain = est.estimate(model, [{"role": "system", "content": SYSTEM}, *turns[:2]], tools=[TOOL])
    assert plain.cache_prefix == {}

    on_system = est.estimate(model, [CACHED_SYSTEM, turns[0]], tools=[TOOL])
    categories = {c for c, _ in on_system.cache_prefix}
    assert categories == {Category.SYSTEM_PROMPT, Category.TOOLS}  # tools and system, not the turn
    assert sum(on_system.cache_prefix.values()) < on_system.total

    on_turn = est.estimate(model, [CACHED_SYSTEM, *turns], tools=[TOOL])
    prefix = on_turn.cache_prefix
    conversation_in_prefix = sum(t for (c, _), t in prefix.items() if c is Category.CONVERSATION)
    conversation = sum(t for (c, _), t in on_turn.by_source.items() if c is Category.CONVERSATION)
    assert 0 < conversation_in_prefix < conversation  # the turns up to the breakpoint, not the last one
    assert prefix[(Category.SYSTEM_PROMPT, "system")] == on_turn.by_source[(Category.SYSTEM_PROMPT, "system")]

    # A system message after the turns is still sent ahead of them, so it is in the prefix.
    late_system = est.estimate(model, [turns[0], turns[2], {"role": "system", "content": "Be brief."}])
    assert (Category.SYSTEM_PROMPT, "system") in late_system.cache_prefix

    cached_tool = {**TOOL, "cache_control": {"type": "ephemeral"}}
    on_tool = est.estimate(model, [{"role": "system", "content": SYSTEM}, turns[0]], tools=[cached_tool])
    assert {c for c, _ in on_tool.cache_prefix} == {Category.TOOLS}


def test_a_grown_conversation_keeps_its_breakpoints():
    est = Estimator()
    model = "anthropic/claude-sonnet-4-5"
    messages = [CACHED_SYSTEM, {"role": "user", "content": "one"}]
    first = est.estimate(model, messages)
    messages += [{"role": "assistant", "content": "two"}, {"role": "user", "content": "three"}]
    second = est.estimate(model, messages)  # counted from the cached prefix: only the new turns are read
    assert second.cache_prefix == first.cache_prefix
    assert (Category.CONVERSATION, "user") not in second.cache_prefix


def test_a_tool_breakpoint_is_seen_through_the_tool_set_cache():
    est = Estimator()
    model = "anthropic/claude-sonnet-4-5"
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "one"}]
    tools = [dict(TOOL)]
    assert est.estimate(model, messages, tools=tools).cache_prefix == {}
    tools[0]["cache_control"] = {"type": "ephemeral"}  # edited in place: the cached tool set must not hide it
    marked = est.estimate(model, messages, tools=tools).cache_prefix
    assert {c for c, _ in marked} == {Category.TOOLS}
    assert est.estimate(model, messages, tools=tools).cache_prefix == marked  # the cached tool set keeps it
    del tools[0]["cache_control"]
    assert est.estimate(model, messages, tools=tools).cache_prefix == {}


# ---------------------------------------------------------------- through LiteLLM


def test_response_cache_usage_reconciles_prefix_and_rest_apart(runtime, provider, monkeypatch):  # noqa: F811
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    route = provider[MESSAGES_API]
    route.tokens, route.cache_write_tokens, route.cached_tokens = 1234, 40, 900  # after, written, read
    messages = [CACHED_SYSTEM, {"role": "user", "content": "Where is parcel 7? " * 20}]
    response = cw.completion(
        model="anthropic/claude-sonnet-4-5",
        messages=messages,
        tools=[TOOL],
        max_tokens=50,
        api_base=provider.url,
        api_key="sk-ant-test",
        cw_provider_count="never",
    )
    assert response.choices[0].message.content == route.reply
    (request,) = provider.hits(MESSAGES_API)
    assert "cache_control" in str(request.body["system"])  # the breakpoint reached the provider
    snap = next(s for s in cw.snapshots() if s.count_method is CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN)
    parts = _breakdown(snap)
    assert snap.input_tokens == 1234 + 40 + 900
    assert parts["system_prompt"] + parts["tools"] == 40 + 900  # exactly the cached prefix
    assert parts["conversation"] + parts["other"] == 1234  # exactly what came after it
    assert parts["system_prompt"] > 0 and parts["tools"] > 0 and parts["conversation"] > 0
    assert "approximate_tokenizer" in {w.code for w in snap.warnings}  # the split within each group is ours


def test_nothing_cached_is_one_group(runtime, provider, monkeypatch):  # noqa: F811
    """A prefix under the provider's minimum is not cached (read + write 0): plain reconciliation."""
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    route = provider[MESSAGES_API]
    route.tokens, route.cache_write_tokens, route.cached_tokens = 3000, 0, 0
    messages = [CACHED_SYSTEM, {"role": "user", "content": "Where is parcel 7?"}]
    kwargs = {"model": "anthropic/claude-sonnet-4-5", "max_tokens": 50, "api_base": provider.url, "api_key": "sk-ant-test"}
    cw.completion(messages=messages, cw_provider_count="never", **kwargs)
    snap = next(s for s in cw.snapshots() if s.count_method is CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN)
    local = next(s for s in cw.snapshots() if s.count_method is CountMethod.LOCAL_ESTIMATE)
    assert snap.input_tokens == 3000
    scale = 3000 / local.input_tokens  # one proportional scaling for every category
    for category in ("system_prompt", "conversation"):
        assert abs(_breakdown(snap)[category] - _breakdown(local)[category] * scale) <= 1
