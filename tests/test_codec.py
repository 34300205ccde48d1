"""The shared codec: what the writer encodes, every reader decodes, with the contract's names."""

from __future__ import annotations

from datetime import UTC, datetime

from cw_middleware.codec import snapshot_attributes, span_level, window_from_attributes
from cw_middleware.contract import Category, CountMethod, Staleness, WarningCode
from cw_middleware.snapshot import RequestMeta, build_snapshot

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
    assert attrs["agent.context_window.warnings"] == ["tool_source_inferred"]
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
