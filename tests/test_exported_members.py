"""The public API is a contract: adding or removing a name is a deliberate change of this list."""

import dataclasses
import pkgutil
import typing
from types import ModuleType

import cw_middleware as cw

PUBLIC = {
    # the LiteLLM drop-in and its tags
    "completion", "acompletion", "responses", "aresponses", "estimate", "stage", "current_stage", "snapshots",
    "segment", "message", "tool", "ToolSource",
    # zero-code adoption: frameworks and the Router, stages across thread pools
    "instrument", "uninstrument", "bind", "Instrumentation",
    # the official openai / anthropic clients, observed without patching
    "wrap",
    # the read-back API in the user's own ASGI app
    "asgi_app", "AsgiApp",
    # configuration and telemetry
    "configure", "flush", "Config", "ProviderCountPolicy",
    # the contract
    "Snapshot", "StageContextWindow", "BreakdownItem", "DetailItem", "SnapshotWarning",
    "Category", "CountMethod", "Staleness", "UnavailableReason", "WarningCode",
    # read-back, and the types its answers are made of
    "reader", "Reader", "ReaderOptions", "SnapshotReader", "StageSummary", "RunSummary", "Missing",
    "Cost", "ToolItem", "UnusedTool", "StageTotals", "CategoryTotals", "Compaction", "HistoryPoint", "StageRow", "RunReport",
    "Forecast", "Suggestion", "SuggestionKind", "RepeatedContent", "CacheMiss",
    # errors
    "CwMiddlewareError", "TagError", "ConfigError", "NotFound", "BackendError", "BackendUnavailable", "BackendResponseError",
    "__version__",
}  # fmt: skip


def test_all_is_exactly_the_public_api():
    assert set(cw.__all__) == PUBLIC
    for name in cw.__all__:
        assert getattr(cw, name) is not None


def test_all_is_what_the_package_namespace_holds():
    """As httpx derives its export test from ``vars(httpx)``: a public name the face imports cannot be left out of
    ``__all__``, and nothing in ``__all__`` is missing from the face. A submodule is a path, not a name.
    (The ASGI app's names load when first asked for: asked here first.)"""
    for name in cw.__all__:
        getattr(cw, name)
    public = {name for name, value in vars(cw).items() if not name.startswith("_") and not isinstance(value, ModuleType)}
    assert public == set(cw.__all__) - {"__version__"}


def test_every_module_below_the_face_reads_as_internal():
    """Only the face and the Proxy's callback path are importable by a public name; the rest is underscored."""
    top = {info.name for info in pkgutil.iter_modules(cw.__path__)}
    assert {name for name in top if not name.startswith("_")} == {"litellm_proxy"}


def test_what_the_reader_answers_is_made_of_public_types():
    """Every class a `Reader` method returns (or holds in what it returns) is exported by the face."""
    seen: set[type] = set()

    def walk(tp: object) -> None:
        for arg in typing.get_args(tp):
            walk(arg)
        if isinstance(tp, type) and tp.__module__.startswith("cw_middleware") and tp not in seen:
            seen.add(tp)
            for field in getattr(tp, "model_fields", {}).values():
                walk(field.annotation)
            for hint in typing.get_type_hints(tp).values() if dataclasses.is_dataclass(tp) else ():
                walk(hint)

    for name in ("context_window", "stages", "runs", "history", "summary"):
        walk(typing.get_type_hints(getattr(cw.Reader, name))["return"])
    assert {"StageContextWindow", "StageTotals", "HistoryPoint", "RunReport", "Staleness"} <= {tp.__name__ for tp in seen}
    assert {tp.__name__ for tp in seen} <= set(cw.__all__)


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
        # issue 39: when the window fills, and what to cut
        "forecast", "suggestions",
        # issue 39: segments sent more than once, prefixes the cache did not serve
        "repeated", "cache_miss",
        # issue 39: sub-agents, the run as a tree
        "parent_stage_id", "child_stage_ids",
    }  # fmt: skip
    assert set(cw.Suggestion.model_fields) == {
        "kind", "target", "tokens_per_request", "tokens_in_stage", "cost_in_stage", "message",
    }  # fmt: skip
    assert {k.value for k in cw.SuggestionKind} == {
        "unused_tools", "large_tool_results", "repeated_content", "cache_miss", "near_threshold",
    }  # fmt: skip
    assert set(cw.Forecast.model_fields) == {
        "growth_per_call_tokens", "calls_until_threshold", "calls_until_full", "threshold_percent", "basis_calls",
    }  # fmt: skip
    assert set(cw.Cost.model_fields) >= {"currency", "input_cost", "by_category"}
    totals = {"calls", "input_tokens", "input_cost", "peak_usage_percent", "by_category"}
    assert set(cw.StageTotals.model_fields) >= totals
    assert set(cw.CategoryTotals.model_fields) >= {"tokens", "cost", "cached_tokens"}
    assert "cached_tokens" in cw.BreakdownItem.model_fields
    assert set(cw.ToolItem.model_fields) >= {
        "name", "category", "source", "definition_tokens", "result_tokens", "invocations",
    }  # fmt: skip
