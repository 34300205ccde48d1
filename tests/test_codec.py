"""The shared codec: what the writer encodes, every reader decodes, with the contract's names."""

from __future__ import annotations

from datetime import UTC, datetime

from cw_middleware._counting.model_facts import RequestMeta
from cw_middleware._kernel.codec import snapshot_attributes, span_level, window_from_attributes
from cw_middleware._kernel.contract import Category, CountMethod, Staleness, WarningCode
from cw_middleware._snapshots.build import build_snapshot

BY_SOURCE = {
    (Category.SYSTEM_PROMPT, "system"): 120,
    (Category.TOOLS, "native"): 300,
    (Category.MCP_TOOLS, "mcp:github"): 410,
    (Category.MEMORY, "AGENTS.md"): 75,
    (Category.CONVERSATION, "user"): 33,
    (Category.OTHER, "framing"): 3,
}


def _snapshot(total=None, window=128_000):
    meta = RequestMeta("run-1", "plan@1", "openai", "gpt-4o", window)
    return build_snapshot(BY_SOURCE, meta, CountMethod.LOCAL_ESTIMATE, {WarningCode.TOOL_SOURCE_INFERRED}, total=total)


def test_round_trip_is_lossless_for_the_contract():
    snap = _snapshot(total=1000)
    attrs = snapshot_attributes(snap)
    back = window_from_attributes(attrs, "plan@1", Staleness.STORED)
    assert back.available and back.staleness is Staleness.STORED
    for field in ("provider", "model", "context_window_tokens", "input_tokens", "usage_percent", "count_method", "event_seq"):
        assert getattr(back, field) == getattr(snap, field), field
    assert back.generated_at == snap.generated_at
    assert back.breakdown == snap.breakdown
    assert back.details == snap.details
    assert back.warnings == snap.warnings


def test_the_attribute_names_are_the_contract():
    attrs = snapshot_attributes(_snapshot())
    assert attrs["agent.context_window.schema"] == 1
    assert attrs["agent.run.id"] == "run-1" and attrs["agent.stage.id"] == "plan@1"
    assert attrs["agent.context_window.tokens.mcp_tools"] == 410
    assert attrs["agent.context_window.input_tokens"] == 941
    assert attrs["agent.context_window.limit_tokens"] == 128_000
    assert attrs["agent.context_window.utilization"] == 941 / 128_000
    assert attrs["agent.context_window.count_method"] == "local_estimate"
    assert attrs["agent.context_window.warnings"] == ("tool_source_inferred",)  # arrays as tuples, as the SDK holds them
    assert attrs["agent.context_window.details.source"][0] == "mcp:github"
    assert not any(k.startswith("gen_ai.") for k in attrs)
    assert not any(k.startswith("agent.context_window.details.") for k in span_level(attrs))


def test_decoding_tolerates_what_backends_do_to_values():
    attrs = snapshot_attributes(_snapshot())
    # Jaeger and Tempo hand int64 back as strings; Phoenix may give floats; unknown codes are kept.
    mangled = {k: (str(v) if isinstance(v, int) and not isinstance(v, bool) else v) for k, v in attrs.items()}
    mangled["agent.context_window.warnings"] = ["tool_source_inferred", "some_future_code"]
    back = window_from_attributes(mangled, "plan@1", Staleness.LIVE)
    assert (
        back.input_tokens == 941
        and back.context_window_tokens == 128_000
        and back.event_seq == attrs["agent.context_window.event_seq"]
    )
    assert {b.category.value: b.tokens for b in back.breakdown}["tools"] == 300
    assert [w.code for w in back.warnings] == ["tool_source_inferred", "some_future_code"]
    assert back.generated_at.tzinfo is not None and back.generated_at <= datetime.now(UTC)


def _rich_snapshot():
    """A response-usage snapshot with every issue-21 part: tool rows, cached tokens, cost."""
    import litellm

    from cw_middleware._counting.cost import prices_from
    from cw_middleware._counting.estimator import Estimator
    from cw_middleware._snapshots.build import ResponseSide

    tools = [
        {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "unused_one", "description": "Unused.", "parameters": {"type": "object"}}},
    ]
    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    messages = [
        {"role": "system", "content": "Be careful. " * 50},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "text " * 200},
    ]
    est = Estimator().estimate("gpt-4o", messages, tools)
    meta = RequestMeta("run-1", "plan@1", "openai", "gpt-4o", 128_000, prices_from(litellm.get_model_info("gpt-4o")))
    return build_snapshot(
        est.by_source,
        meta,
        CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN,
        total=400,
        tools=est.tools,
        order=est.order,
        response=ResponseSide({"read_file": 1}, cache_read=256),
    )


def test_tools_cost_and_cache_round_trip_with_their_names():
    snap = _rich_snapshot()
    assert snap.tools and snap.cost is not None and snap.cached_tokens == 256
    attrs = snapshot_attributes(snap)
    assert attrs["agent.context_window.tools.name"] == tuple(t.name for t in snap.tools)
    assert attrs["agent.context_window.tools.invocations"] == tuple(t.invocations for t in snap.tools) == (2, 0)
    assert attrs["agent.context_window.unused_tool_tokens"] == snap.unused_tool_tokens > 0
    assert attrs["agent.context_window.cost.currency"] == "USD"
    assert attrs["agent.context_window.cost.input"] == snap.cost.input_cost
    assert attrs["agent.context_window.cost.system_prompt"] == snap.cost.by_category[Category.SYSTEM_PROMPT]
    assert attrs["agent.context_window.cached_tokens"] == 256
    assert attrs["agent.context_window.cached.system_prompt"] == snap.tokens("system_prompt")  # the prefix
    # no key is both a value and the prefix of others (stores that nest dotted keys keep both), stage totals included
    from cw_middleware._snapshots.build import SnapshotParts
    from cw_middleware._snapshots.ledger import Ledgers

    staged = snapshot_attributes(Ledgers().add(("run-1", "plan@1"), 1, snap, 100, True, SnapshotParts()))
    assert "agent.context_window.stage.calls" in staged and "agent.context_window.unused_tools.name" in staged
    assert not [k for k in staged if any(other.startswith(k + ".") for other in staged)]
    assert not any(k.startswith("agent.context_window.tools.") for k in span_level(attrs))
    back = window_from_attributes(attrs, "plan@1", Staleness.STORED)
    assert (back.tools, back.cost, back.cached_tokens, back.breakdown) == (snap.tools, snap.cost, 256, snap.breakdown)
    assert [u.name for u in back.unused_tools] == ["unused_one"]
    # the in-process history keeps them too
    from cw_middleware._snapshots.build import SnapshotParts
    from cw_middleware._snapshots.rows import compact, expand

    again = expand(compact(snap), SnapshotParts())
    assert again == snap and again.model_dump() == snap.model_dump()


def test_row_arrays_kept_made_are_the_arrays_made_afresh():
    """On the call path the rows' arrays are kept while the same shared rows come again (`SnapshotParts.flat`):
    what they give is what snapshot_attributes makes without them, and other rows get arrays of their own."""
    from cw_middleware._snapshots.build import SnapshotParts

    parts = SnapshotParts()
    snap = _rich_snapshot()
    afresh = snapshot_attributes(snap)
    assert snapshot_attributes(snap, flat=parts.flat) == afresh == snapshot_attributes(snap, flat=parts.flat)
    fewer = snap.model_copy(update={"tools": snap.tools[:1]})
    kept = snapshot_attributes(fewer, flat=parts.flat)
    assert kept == snapshot_attributes(fewer) and kept["agent.context_window.tools.name"] == (snap.tools[0].name,)
    assert all(type(v) is not list for v in afresh.values())  # arrays are tuples, as the SDK holds them
