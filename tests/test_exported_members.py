"""The public API is a contract: adding or removing a name is a deliberate change of this list."""

import cw_middleware as cw

PUBLIC = {
    # the LiteLLM drop-in and its tags
    "completion", "acompletion", "responses", "aresponses", "estimate", "stage", "current_stage", "snapshots",
    "segment", "message", "tool", "ToolSource",
    # zero-code adoption: frameworks and the Router, stages across thread pools
    "instrument", "uninstrument", "bind",
    # the official openai / anthropic clients, observed without patching
    "wrap",
    # configuration and telemetry
    "configure", "flush", "Config", "ProviderCountPolicy",
    # the contract
    "Snapshot", "StageContextWindow", "BreakdownItem", "DetailItem", "SnapshotWarning",
    "Category", "CountMethod", "Staleness", "UnavailableReason", "WarningCode",
    # read-back
    "reader", "Reader", "ReaderOptions", "SnapshotReader", "StageSummary", "RunSummary",
    # errors
    "CwMiddlewareError", "TagError", "ConfigError", "NotFound", "BackendError", "BackendUnavailable", "BackendResponseError",
    "__version__",
}  # fmt: skip


def test_all_is_exactly_the_public_api():
    assert set(cw.__all__) == PUBLIC
    for name in cw.__all__:
        assert getattr(cw, name) is not None


def test_contract_enum_values_are_pinned():
    assert [c.value for c in cw.Category] == [
        "system_prompt", "tools", "mcp_tools", "skills", "memory", "conversation", "other",
    ]  # fmt: skip
    assert {m.value for m in cw.CountMethod} == {
        "provider_api_scaled_breakdown", "response_usage_scaled_breakdown", "local_estimate",
    }  # fmt: skip
    assert {s.value for s in cw.Staleness} == {"live", "stored", "unavailable"}
    assert {r.value for r in cw.UnavailableReason} == {"not_agent_stage", "not_observed", "provider_unconfigured"}
    assert set(cw.StageContextWindow.model_fields) == {
        "stage_id", "available", "unavailable_reason", "provider", "model", "context_window_tokens", "input_tokens",
        "usage_percent", "count_method", "staleness", "generated_at", "event_seq", "breakdown", "warnings", "details",
        # issue 21: which tool, unused definitions, money, cache, the stage so far
        "tools", "unused_tools", "unused_tool_tokens", "cost", "cached_tokens", "stage_totals", "compaction",
    }  # fmt: skip
    assert set(cw.contract.Cost.model_fields) >= {"currency", "input_cost", "by_category"}
    totals = {"calls", "input_tokens", "input_cost", "peak_usage_percent", "by_category"}
    assert set(cw.contract.StageTotals.model_fields) >= totals
    assert set(cw.contract.CategoryTotals.model_fields) >= {"tokens", "cost", "cached_tokens"}
    assert "cached_tokens" in cw.contract.BreakdownItem.model_fields
    assert set(cw.contract.ToolItem.model_fields) >= {
        "name", "category", "source", "definition_tokens", "result_tokens", "invocations",
    }  # fmt: skip
