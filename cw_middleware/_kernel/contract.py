"""The content-free data contract: categories, snapshots and the read-back answer.

`Snapshot` is what the middleware produces for one request at one moment;
`StageContextWindow` is what a reader answers for (run_id, stage_id): the latest
snapshot of that stage plus its availability. Field names and enum values follow
the StageContextWindow contract of DESIGN.md (Fabro's context-window endpoint
plan) and are relied on by dashboards and readers: change them never.

Nothing here may hold prompt text: only numbers, enum values, model names and
short source labels chosen by the caller ("AGENTS.md", "mcp:github").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field

from .errors import ConfigError

MAX_ID_LENGTH = 256
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def validate_id(name: str, value: object) -> str:
    """Run, stage and kind ids, for writing (`cw.stage`) and reading alike; ConfigError otherwise."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{name} must be a non-empty string")
    if len(value) > MAX_ID_LENGTH:
        raise ConfigError(f"{name} must be at most {MAX_ID_LENGTH} characters")
    if _CONTROL.search(value):
        raise ConfigError(f"{name} must not contain control characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"{name} must be valid Unicode text (no lone surrogates)") from None
    return value


@dataclass(frozen=True)
class StageInfo:
    """The stage a call belongs to: its run, its id, its kind (a label; "agent" unless told) and, for a sub-agent's
    stage, the stage of the same run it was started from (`parent_stage_id`)."""

    run_id: str
    stage_id: str
    kind: str = "agent"
    parent_stage_id: Optional[str] = None


class Category(StrEnum):
    """What a token of the context window is spent on."""

    SYSTEM_PROMPT = "system_prompt"
    TOOLS = "tools"
    MCP_TOOLS = "mcp_tools"
    SKILLS = "skills"
    MEMORY = "memory"
    CONVERSATION = "conversation"
    OTHER = "other"


CATEGORIES: tuple[Category, ...] = tuple(Category)


class CountMethod(StrEnum):
    """Where a snapshot's total comes from, best last."""

    LOCAL_ESTIMATE = "local_estimate"
    RESPONSE_USAGE_SCALED_BREAKDOWN = "response_usage_scaled_breakdown"
    PROVIDER_API_SCALED_BREAKDOWN = "provider_api_scaled_breakdown"


class Staleness(StrEnum):
    LIVE = "live"  # the stage is still running
    STORED = "stored"  # the stage has ended; this is its last word
    UNAVAILABLE = "unavailable"  # nothing to show


class UnavailableReason(StrEnum):
    NOT_AGENT_STAGE = "not_agent_stage"
    NOT_OBSERVED = "not_observed"
    PROVIDER_UNCONFIGURED = "provider_unconfigured"


class WarningCode(StrEnum):
    """Machine-readable reasons a number is less than exact. Messages never carry content."""

    APPROXIMATE_TOKENIZER = "approximate_tokenizer"
    TOOL_SOURCE_INFERRED = "tool_source_inferred"
    NON_TEXT_CONTENT_NOT_ESTIMATED = "non_text_content_not_estimated"
    UNKNOWN_CONTEXT_WINDOW = "unknown_context_window"
    CONTEXT_WINDOW_EXCEEDED = "context_window_exceeded"
    MOCK_USAGE_NOT_RECONCILED = "mock_usage_not_reconciled"
    USAGE_MISSING = "usage_missing"
    PROVIDER_UNCONFIGURED = "provider_unconfigured"
    PROVIDER_COUNT_FAILED = "provider_count_failed"
    PROVIDER_COUNT_TIMEOUT = "provider_count_timeout"
    PROVIDER_COUNT_DROPPED = "provider_count_dropped"
    ESTIMATE_FAILED = "estimate_failed"
    DETAILS_TRUNCATED = "details_truncated"
    TOOLS_FOLDED = "tools_folded"
    PRICE_UNKNOWN = "price_unknown"
    NOT_OBSERVED = "not_observed"
    NOT_AGENT_STAGE = "not_agent_stage"
    STAGE_END_NOT_SEEN = "stage_end_not_seen"
    OPAQUE_CONTEXT_NOT_ESTIMATED = "opaque_context_not_estimated"
    PROVIDER_TOOL_NOT_ESTIMATED = "provider_tool_not_estimated"
    INVALID_CONTEXT_WINDOW = "invalid_context_window"
    UNREADABLE_MESSAGE = "unreadable_message"
    ANCHORED_ESTIMATE = "anchored_estimate"
    # A metrics backend (Prometheus, VictoriaMetrics) answered: see _readback/prometheus.py.
    FROM_METRICS = "from_metrics"
    METRICS_WITHOUT_RUN_LABELS = "metrics_without_run_labels"
    METRICS_SERIES_OVERFLOW = "metrics_series_overflow"
    METRICS_AMBIGUOUS = "metrics_ambiguous"


# Human-readable, content-free explanations of each warning code.
WARNING_MESSAGES: dict[WarningCode, str] = {
    WarningCode.APPROXIMATE_TOKENIZER: "the provider's tokenizer is not available offline; counts are an approximation",
    WarningCode.TOOL_SOURCE_INFERRED: "a tool without a source tag was classified by its name prefix",
    WarningCode.NON_TEXT_CONTENT_NOT_ESTIMATED: "images, audio or files are not estimated from their bytes",
    WarningCode.UNKNOWN_CONTEXT_WINDOW: "the model's context window is unknown; set it with context_windows",
    WarningCode.CONTEXT_WINDOW_EXCEEDED: (
        "the request's input is larger than the model's context window (utilization above 1): "
        "the provider will reject or truncate it"
    ),
    WarningCode.MOCK_USAGE_NOT_RECONCILED: "mock_response usage is synthetic; the local estimate stands",
    WarningCode.USAGE_MISSING: "the response carried no usage; the local estimate stands",
    WarningCode.PROVIDER_UNCONFIGURED: "no provider credentials for a token count; the local estimate stands",
    WarningCode.PROVIDER_COUNT_FAILED: "the provider token count failed; the local estimate stands",
    WarningCode.PROVIDER_COUNT_TIMEOUT: "the provider token count timed out; the local estimate stands",
    WarningCode.PROVIDER_COUNT_DROPPED: "the provider token count queue was full; the count was skipped",
    WarningCode.ESTIMATE_FAILED: "the local estimate failed for this request; see the middleware log",
    WarningCode.DETAILS_TRUNCATED: "only the largest sources are listed in details",
    WarningCode.PRICE_UNKNOWN: "LiteLLM's model map has no input price for this model: cost is null",
    WarningCode.TOOLS_FOLDED: (
        "only the largest tools are listed one by one (max_tools); the rest are folded into one row, '(other tools)'"
    ),
    WarningCode.NOT_OBSERVED: "no snapshot has been recorded for this stage yet",
    WarningCode.NOT_AGENT_STAGE: "this stage does not call a model",
    WarningCode.STAGE_END_NOT_SEEN: (
        "the stage never reported its end and has been quiet past the staleness horizon; its process may have stopped"
    ),
    WarningCode.OPAQUE_CONTEXT_NOT_ESTIMATED: (
        "part of the input is held or encrypted by the provider (previous_response_id, item references, reasoning items)"
        " and is not estimated locally"
    ),
    WarningCode.PROVIDER_TOOL_NOT_ESTIMATED: (
        "provider-run tools (web search, file search, remote MCP, ...) add input that is not estimated locally"
    ),
    WarningCode.INVALID_CONTEXT_WINDOW: (
        "cw_context_window was not a whole number of tokens from 1 to 2147483647; the model's window applies"
    ),
    WarningCode.UNREADABLE_MESSAGE: (
        "a message, tool definition or schema of the request has a shape the local count cannot read: "
        "it counts as far as it could be read, the rest of the breakdown stands"
    ),
    WarningCode.ANCHORED_ESTIMATE: (
        "anchored on the previous call's provider-reported input tokens: its request began with that call's whole "
        "request, so the total is that call's provider-reported input tokens plus the local estimate of what was added"
    ),
    WarningCode.FROM_METRICS: (
        "read from metrics: the latest values only, without per-source details or the snapshot's own warnings; "
        "times are scrape times"
    ),
    WarningCode.METRICS_WITHOUT_RUN_LABELS: (
        "the context-window metrics carry no run or stage labels, so a metrics backend cannot answer per stage; "
        "turn on metric_run_labels (CW_METRIC_RUN_LABELS=1) where the agent runs, or read from a trace backend"
    ),
    WarningCode.METRICS_SERIES_OVERFLOW: (
        "the producer hit its metric series limit (metric_series_limit) and folded new series into one overflow "
        "series; this stage may be among them"
    ),
    WarningCode.METRICS_AMBIGUOUS: (
        "two models or producers reported this stage within the same scrape, so the metrics cannot tell which "
        "request came last; this answer shows one of them"
    ),
}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, use_enum_values=False)


class SnapshotWarning(_Frozen):
    code: str
    message: str


class BreakdownItem(_Frozen):
    category: Category
    tokens: int
    usage_percent: Optional[float] = None  # of the context window; None when the window is unknown
    # Of ``tokens``, those the provider served from its prompt cache (the cached prefix, attributed in
    # request order); None where the response reported no cached tokens (a local estimate, a provider without).
    cached_tokens: Optional[int] = None


class Cost(_Frozen):
    """A request's input cost, in ``currency`` (USD), from LiteLLM's model prices: in all and per category."""

    currency: str = "USD"
    input_cost: float
    by_category: dict[Category, float] = Field(default_factory=dict)


class DetailItem(_Frozen):
    category: Category
    source: str
    tokens: int


class ToolItem(_Frozen):
    """One tool of a request: its definition's tokens, its results' tokens, how often the model called it.

    ``category`` is the definition's (tools, mcp_tools, skills) and ``source`` its source label;
    both are None on the folded row (``name`` "(other tools)", ``folded`` the number of tools it
    stands for). In a snapshot, ``invocations`` counts the calls of the request's conversation and
    of its response; in a read-back answer, the calls over the stage.
    """

    name: str
    category: Optional[Category] = None
    source: Optional[str] = None
    definition_tokens: int = 0
    result_tokens: int = 0
    invocations: int = 0
    folded: int = 0


class UnusedTool(_Frozen):
    """A tool the stage's requests define and the model never called in the stage: the first thing to cut."""

    name: str
    category: Optional[Category] = None
    source: Optional[str] = None
    definition_tokens: int  # in the latest request
    stage_definition_tokens: int  # over the stage's requests (each call's own count)
    requests: int  # how many of the stage's requests defined it


class RepeatedContent(_Frozen):
    """A long segment (a tool result, a file, a memory block) the stage's requests send more than once each.

    Found by an in-process fingerprint of its text: ``fingerprint`` is twelve opaque hex digits that say
    "the same segment" within the stage and nothing about what it says. ``target`` names where the copy
    one would cut sits: its tag's source and category ("AGENTS.md (memory)"), or "message role tool".
    Tokens are the local count of the duplicate copies (a request's copies less one).
    """

    target: str
    category: Category
    fingerprint: str
    copies: int = 0  # in the latest request (0: the latest request no longer repeats it)
    tokens: int = 0  # the latest request's duplicate copies
    stage_tokens: int = 0  # over the stage's requests (each call's own count)
    requests: int = 0  # how many of the stage's requests repeated it


class CacheMiss(_Frozen):
    """Calls whose request began with the previous call's prefix, which the provider's cache did not serve.

    Counted only for a model LiteLLM has a cached-input price for, a prefix of at least the provider's
    minimum cacheable size, and a response that reported its cached tokens (0 or under half the prefix).
    ``stage_saving`` is what those tokens would have cost less at the cached price (USD).
    """

    prefix_tokens: int  # the latest call's prefix shared with the call before it
    cached_tokens: int  # of the latest call's input, served from the cache
    missed_tokens: int  # the latest call's prefix tokens billed at the full price (0: it was served)
    stage_missed_tokens: int
    stage_saving: Optional[float] = None
    calls: int = 0  # the stage's calls that missed


class CategoryTotals(_Frozen):
    """One category over a stage's calls: its tokens, cost (None when no call was priced) and cached tokens."""

    tokens: int = 0
    cost: Optional[float] = None
    cached_tokens: int = 0


class StageTotals(_Frozen):
    """A stage so far: its calls (each counted once, at its latest number), their input, cost and peak."""

    calls: Optional[int] = None  # None: a metrics backend's answer (it carries the cost, not the calls)
    input_tokens: Optional[int] = None
    input_cost: Optional[float] = None  # USD; None when no call of the stage was priced
    peak_usage_percent: Optional[float] = None
    by_category: dict[Category, CategoryTotals] = Field(default_factory=dict)
    cached_tokens: int = 0
    compactions: int = 0


class Forecast(_Frozen):
    """When the window fills, at the stage's recent growth (`forecast_from`: one function wherever it is asked)."""

    growth_per_call_tokens: int  # the median increase of input tokens per call over the recent calls
    calls_until_threshold: Optional[int] = None  # None: the stage does not grow
    calls_until_full: Optional[int] = None
    threshold_percent: float = 80.0
    basis_calls: int = 0  # the calls the growth was read from


DEFAULT_THRESHOLD_PERCENT = 80.0


class SuggestionKind(StrEnum):
    UNUSED_TOOLS = "unused_tools"  # a source's definitions no call of the stage used
    LARGE_TOOL_RESULTS = "large_tool_results"  # a tool whose results hold the largest share of the request
    REPEATED_CONTENT = "repeated_content"  # the same segment sent more than once
    CACHE_MISS = "cache_miss"  # a prefix repeated across calls, not served from the provider's cache
    NEAR_THRESHOLD = "near_threshold"  # the forecast says the threshold comes soon


class Suggestion(_Frozen):
    """What to cut, and what the stage would not have sent without it (measured on its calls so far)."""

    kind: SuggestionKind
    target: str  # a source label (mcp:github), a tool name, or the stage
    tokens_per_request: int  # in the latest request
    tokens_in_stage: int  # over the stage's requests
    cost_in_stage: Optional[float] = None  # USD at the stage's own price per token of that category; None: unpriced
    message: str


class Compaction(_Frozen):
    """This request carries less conversation than the stage's previous one: the agent summarised or truncated."""

    before_tokens: int  # the previous request's conversation tokens
    after_tokens: int  # this request's


class HistoryPoint(_Frozen):
    """One call of a stage as its history shows it: the call's latest snapshot, in numbers."""

    event_seq: Optional[int] = None
    generated_at: Optional[datetime] = None
    count_method: Optional[CountMethod] = None
    model: Optional[str] = None
    context_window_tokens: Optional[int] = None
    input_tokens: int = 0
    usage_percent: Optional[float] = None
    cached_tokens: Optional[int] = None
    input_cost: Optional[float] = None
    cost_by_category: dict[Category, float] = Field(default_factory=dict)  # USD; empty when the call was not priced
    breakdown: list[BreakdownItem] = Field(default_factory=list)
    compaction: Optional[Compaction] = None


class StageRow(_Frozen):
    """One stage in a run's summary: its latest request and its totals; a sub-agent's stage names its parent, and a
    parent's row has its own totals and, rolled up, its own and all its descendants' (the run as a tree)."""

    stage_id: str
    kind: Optional[str] = None
    staleness: Staleness
    available: bool = False
    model: Optional[str] = None
    input_tokens: Optional[int] = None  # the latest request's
    usage_percent: Optional[float] = None
    stage_totals: Optional[StageTotals] = None
    parent_stage_id: Optional[str] = None
    child_stage_ids: list[str] = Field(default_factory=list)
    rolled_up: Optional[StageTotals] = None  # a parent's: its totals with its descendants' added (None: no children)


class RunReport(_Frozen):
    """A run over its stages (``GET /api/v1/runs/{run_id}/summary``, ``cw-middleware summary RUN``)."""

    run_id: str
    stages: list[StageRow] = Field(default_factory=list)
    totals: StageTotals  # summed over the stages' totals (peak: the highest)
    model: Optional[str] = None  # the newest stage's model
    # The stages' suggestions summed per (kind, target), largest saving first (`run_suggestions` in
    # _readback/suggestions.py); a stage's near_threshold is its own forecast's and is not among them.
    suggestions: list[Suggestion] = Field(default_factory=list)


class Snapshot(_Frozen):
    """One request's context window at one moment. Categories sum exactly to input_tokens."""

    run_id: Optional[str] = None
    stage_id: Optional[str] = None
    provider: Optional[str] = None
    model: Optional[str] = None
    context_window_tokens: Optional[int] = None
    input_tokens: int
    usage_percent: Optional[float] = None
    count_method: CountMethod
    generated_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    event_seq: int = 0
    breakdown: list[BreakdownItem]
    warnings: list[SnapshotWarning] = Field(default_factory=list)
    details: list[DetailItem] = Field(default_factory=list)
    tools: list[ToolItem] = Field(default_factory=list)  # bounded: the largest max_tools, then one folded row
    unused_tool_tokens: int = 0  # definition tokens of tools neither the request nor its response calls
    unused_tools: list[UnusedTool] = Field(default_factory=list)  # bounded as tools; over the stage when in one
    cached_tokens: Optional[int] = None  # input tokens the provider served from its cache, where it says
    cost: Optional[Cost] = None  # None when LiteLLM has no price for the model (warning price_unknown)
    stage_totals: Optional[StageTotals] = None  # the stage so far, this call included (None outside a call)
    compaction: Optional[Compaction] = None
    repeated: list[RepeatedContent] = Field(default_factory=list)  # bounded: the largest over the stage
    cache_miss: Optional[CacheMiss] = None  # the stage's calls whose repeated prefix the cache did not serve

    def tokens(self, category: Category | str) -> int:
        """Tokens of one category (0 when absent)."""
        category = Category(category)
        return next((b.tokens for b in self.breakdown if b.category is category), 0)

    def warning_codes(self) -> list[str]:
        return [w.code for w in self.warnings]

    def _repr_html_(self) -> str:
        """Jupyter's view: the window to scale, the categories, the top sources (notebook.py)."""
        from .notebook import html_view

        return html_view(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython's terminal view: a few plain lines."""
        from .notebook import text_view

        printer.text("..." if cycle else text_view(self))


class StageContextWindow(_Frozen):
    """The read-back answer for one (run_id, stage_id): the DESIGN.md contract."""

    stage_id: str
    available: bool
    unavailable_reason: Optional[UnavailableReason] = None
    provider: Optional[str] = None
    model: Optional[str] = None
    context_window_tokens: Optional[int] = None
    input_tokens: Optional[int] = None
    usage_percent: Optional[float] = None
    count_method: Optional[CountMethod] = None
    staleness: Staleness
    generated_at: Optional[datetime] = None
    event_seq: Optional[int] = None
    breakdown: list[BreakdownItem] = Field(default_factory=list)
    warnings: list[SnapshotWarning] = Field(default_factory=list)
    details: list[DetailItem] = Field(default_factory=list)
    tools: list[ToolItem] = Field(default_factory=list)
    unused_tools: list[UnusedTool] = Field(default_factory=list)
    unused_tool_tokens: Optional[int] = None  # the latest request's unused definitions, in all
    cached_tokens: Optional[int] = None
    cost: Optional[Cost] = None  # the latest request's input cost, or None
    stage_totals: Optional[StageTotals] = None
    compaction: Optional[Compaction] = None  # the latest request's, when it carried less conversation
    forecast: Optional[Forecast] = None  # the stage's calls at their growth: when the window fills
    repeated: list[RepeatedContent] = Field(default_factory=list)  # segments sent more than once, over the stage
    cache_miss: Optional[CacheMiss] = None
    suggestions: list[Suggestion] = Field(default_factory=list)  # what to cut, largest saving first

    # A sub-agent's stage: the stage of its run it was started from; a parent: the stages started from it.
    parent_stage_id: Optional[str] = None
    child_stage_ids: list[str] = Field(default_factory=list)

    def _repr_html_(self) -> str:
        """Jupyter's view: the window to scale, the categories, the top sources (notebook.py)."""
        from .notebook import html_view

        return html_view(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython's terminal view: a few plain lines."""
        from .notebook import text_view

        printer.text("..." if cycle else text_view(self))

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot, staleness: Staleness) -> StageContextWindow:
        return cls(
            stage_id=snapshot.stage_id or "",
            available=True,
            provider=snapshot.provider,
            model=snapshot.model,
            context_window_tokens=snapshot.context_window_tokens,
            input_tokens=snapshot.input_tokens,
            usage_percent=snapshot.usage_percent,
            count_method=snapshot.count_method,
            staleness=staleness,
            generated_at=snapshot.generated_at,
            event_seq=snapshot.event_seq,
            breakdown=snapshot.breakdown,
            warnings=snapshot.warnings,
            details=snapshot.details,
            tools=snapshot.tools,
            unused_tools=snapshot.unused_tools,
            unused_tool_tokens=snapshot.unused_tool_tokens,
            cached_tokens=snapshot.cached_tokens,
            cost=snapshot.cost,
            stage_totals=snapshot.stage_totals,
            compaction=snapshot.compaction,
            repeated=snapshot.repeated,
            cache_miss=snapshot.cache_miss,
        )

    @classmethod
    def unavailable(
        cls, stage_id: str, reason: UnavailableReason, warnings: list[SnapshotWarning] | None = None
    ) -> StageContextWindow:
        return cls(
            stage_id=stage_id,
            available=False,
            unavailable_reason=reason,
            staleness=Staleness.UNAVAILABLE,
            warnings=warnings or [],
        )


def never_called(row: ToolItem) -> bool:
    """A defined tool's row that no call invoked: an unused definition (the folded row stands for others)."""
    return not row.invocations and bool(row.definition_tokens) and not row.folded


def unused_in(tools: list[ToolItem]) -> list[UnusedTool]:
    """The unused definitions of one request's rows, as a stage of that one request has them."""
    return [
        UnusedTool(
            name=t.name,
            category=t.category,
            source=t.source,
            definition_tokens=t.definition_tokens,
            stage_definition_tokens=t.definition_tokens,
            requests=1,
        )
        for t in tools
        if never_called(t)
    ]
