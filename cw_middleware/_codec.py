"""The codec of the contract's telemetry: attribute keys, span, event and metric names, and snapshot <-> attributes.

`_contract.py` holds the models (`Snapshot`, `StageContextWindow`); this module says how
they travel through OpenTelemetry. Writers (``telemetry.py``) and readers
(``readback/``) both import it and nothing of each other: dashboards, alert rules and
every backend reader depend on these names, so they are spelled once, here.
`snapshot_attributes` encodes a `Snapshot` into the flat, typed, content-free attributes
of a span event; `window_from_attributes` decodes them into the read-back
`StageContextWindow`. A round trip through both is lossless for everything the
contract carries (tests/test_codec.py).

GenAI keys follow the OpenTelemetry GenAI semantic conventions v1.41
(https://opentelemetry.io/docs/specs/semconv/gen-ai/); our own keys live under
``agent.*``, never ``gen_ai.*``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Optional

from ._contract import (
    CATEGORIES,
    WARNING_MESSAGES,
    BreakdownItem,
    CacheMiss,
    Category,
    CategoryTotals,
    Compaction,
    Cost,
    CountMethod,
    DetailItem,
    RepeatedContent,
    Snapshot,
    SnapshotWarning,
    StageContextWindow,
    StageTotals,
    Staleness,
    ToolItem,
    UnusedTool,
    WarningCode,
    unused_in,
)

SCHEMA_VERSION = 1

# ---------------------------------------------------------------- spans and events

SNAPSHOT_EVENT = "agent.context_window.snapshot"
ATTR_SCHEMA = "agent.context_window.schema"
ATTR_RUN_ID = "agent.run.id"
ATTR_STAGE_ID = "agent.stage.id"
ATTR_STAGE_KIND = "agent.stage.kind"
ATTR_PARENT_STAGE_ID = "agent.stage.parent_id"  # a sub-agent's stage: the stage of its run it was started from
# Stage lifecycle, readable from the backend alone. A span is exported only when it
# ends, so stage start is announced by a zero-duration marker span (STAGE_START_SPAN,
# child of the stage span, state "started"); the stage span itself is exported at the
# end with state "ended".
ATTR_STAGE_STATE = "agent.stage.state"
STAGE_STATE_STARTED = "started"
STAGE_STATE_ENDED = "ended"
STAGE_SPAN_PREFIX = "agent.stage"
STAGE_START_SPAN = "agent.stage.start"
AGENT_STAGE_KIND = "agent"
# A snapshot that arrives after its call span ended rides on a short linked span.
LATE_SNAPSHOT_SPAN = "agent.context_window.late_snapshot"
ATTR_LATE = "agent.context_window.late"
# A late snapshot whose call is no longer its stage's newest: kept (nothing is lost), never "latest".
ATTR_SUPERSEDED = "agent.context_window.superseded"
ATTR_INPUT_TOKENS = "agent.context_window.input_tokens"
ATTR_LIMIT_TOKENS = "agent.context_window.limit_tokens"
ATTR_UTILIZATION = "agent.context_window.utilization"
ATTR_COUNT_METHOD = "agent.context_window.count_method"
ATTR_EVENT_SEQ = "agent.context_window.event_seq"
ATTR_GENERATED_AT = "agent.context_window.generated_at"
ATTR_WARNINGS = "agent.context_window.warnings"
ATTR_PROVIDER = "agent.context_window.provider"
ATTR_MODEL = "agent.context_window.model"
DETAILS_PREFIX = "agent.context_window.details."
ATTR_DETAIL_CATEGORIES = DETAILS_PREFIX + "category"
ATTR_DETAIL_SOURCES = DETAILS_PREFIX + "source"
ATTR_DETAIL_TOKENS = DETAILS_PREFIX + "tokens"
DETAIL_ARRAYS = (ATTR_DETAIL_CATEGORIES, ATTR_DETAIL_SOURCES, ATTR_DETAIL_TOKENS)
ATTR_CATEGORY = "agent.context_window.category"
TOKENS_PREFIX = "agent.context_window.tokens."
# Per-tool rows, as parallel arrays (one entry a row; the folded row's category and source are "").
TOOLS_PREFIX = "agent.context_window.tools."
ATTR_TOOL_NAMES = TOOLS_PREFIX + "name"
ATTR_TOOL_CATEGORIES = TOOLS_PREFIX + "category"
ATTR_TOOL_SOURCES = TOOLS_PREFIX + "source"
ATTR_TOOL_DEFINITION_TOKENS = TOOLS_PREFIX + "definition_tokens"
ATTR_TOOL_RESULT_TOKENS = TOOLS_PREFIX + "result_tokens"
ATTR_TOOL_INVOCATIONS = TOOLS_PREFIX + "invocations"
ATTR_TOOL_FOLDED = TOOLS_PREFIX + "folded"
TOOL_ARRAYS = (
    ATTR_TOOL_NAMES,
    ATTR_TOOL_CATEGORIES,
    ATTR_TOOL_SOURCES,
    ATTR_TOOL_DEFINITION_TOKENS,
    ATTR_TOOL_RESULT_TOKENS,
    ATTR_TOOL_INVOCATIONS,
    ATTR_TOOL_FOLDED,
)
# The unused definitions over the stage, parallel arrays as the rows (event only).
UNUSED_PREFIX = "agent.context_window.unused_tools."
UNUSED_ARRAYS = tuple(
    UNUSED_PREFIX + f for f in ("name", "category", "source", "definition_tokens", "stage_definition_tokens", "requests")
)
ATTR_UNUSED_TOOL_TOKENS = "agent.context_window.unused_tool_tokens"
# Segments the stage's requests sent more than once, parallel arrays (event only): labels and opaque fingerprints.
REPEATED_PREFIX = "agent.context_window.repeated."
REPEATED_ARRAYS = tuple(
    REPEATED_PREFIX + f for f in ("target", "category", "fingerprint", "copies", "tokens", "stage_tokens", "requests")
)
# The stage's calls whose repeated prefix the provider's cache did not serve (event only).
CACHE_MISS_PREFIX = "agent.context_window.cache_miss."
CACHE_MISS_FIELDS = ("prefix_tokens", "cached_tokens", "missed_tokens", "stage_missed_tokens", "stage_saving", "calls")
# The cache and the money: per category like the tokens; absent where the snapshot has none.
# No key is both a value and the prefix of others: Phoenix (and any store that nests dotted keys) keeps both.
ATTR_CACHED_TOKENS = "agent.context_window.cached_tokens"
CACHED_PREFIX = "agent.context_window.cached."  # + category
COST_PREFIX = "agent.context_window.cost."  # + category: USD
ATTR_INPUT_COST = COST_PREFIX + "input"
ATTR_COST_CURRENCY = COST_PREFIX + "currency"
# The stage so far (_snapshots/ledger.py): each call once, at its latest number.
STAGE_TOTALS_PREFIX = "agent.context_window.stage."
ATTR_STAGE_CALLS = STAGE_TOTALS_PREFIX + "calls"
ATTR_STAGE_INPUT_TOKENS = STAGE_TOTALS_PREFIX + "input_tokens"
ATTR_STAGE_INPUT_COST = STAGE_TOTALS_PREFIX + "input_cost"
ATTR_STAGE_PEAK = STAGE_TOTALS_PREFIX + "peak_usage_percent"
ATTR_STAGE_CACHED = STAGE_TOTALS_PREFIX + "cached_tokens"
ATTR_STAGE_COMPACTIONS = STAGE_TOTALS_PREFIX + "compactions"
STAGE_TOKENS_PREFIX = STAGE_TOTALS_PREFIX + "tokens."  # + category
STAGE_COST_PREFIX = STAGE_TOTALS_PREFIX + "cost."  # + category
STAGE_CACHED_PREFIX = STAGE_TOTALS_PREFIX + "cached."  # + category
ATTR_COMPACTION_BEFORE = "agent.context_window.compaction.before_tokens"
ATTR_COMPACTION_AFTER = "agent.context_window.compaction.after_tokens"
# The call a snapshot belongs to (its call span's id): a stage's totals count each call once.
ATTR_CALL_ID = "agent.context_window.call_id"

# GenAI semantic conventions v1.41.
GEN_AI_OPERATION = "gen_ai.operation.name"
GEN_AI_PROVIDER = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_CACHE_READ = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_TOKEN_TYPE = "gen_ai.token.type"
# Prompt-cache writes: the GenAI conventions' current name, and the one backends on v1.41 read.
GEN_AI_CACHE_CREATION = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_CACHE_WRITE = "gen_ai.usage.cache_write.input_tokens"
GEN_AI_FINISH_REASONS = "gen_ai.response.finish_reasons"  # string[]
GEN_AI_REQUEST_STREAM = "gen_ai.request.stream"  # bool: the response was streamed
GEN_AI_CONVERSATION_COMPACTED = "gen_ai.conversation.compacted"  # bool, where a compaction is known
# The context window on the call span: GenAI has no name yet; two vendor conventions agree on these.
GEN_AI_CONTEXT_WINDOW_SIZE = "gen_ai.context.window_size"  # int {token}
GEN_AI_CONTEXT_UTILIZATION = "gen_ai.context.utilization"  # double, 0..1
# Langfuse's usage breakdown (an option, off by default): the categories as usage types, with the output.
LANGFUSE_USAGE_DETAILS = "langfuse.observation.usage_details"
ERROR_TYPE = "error.type"
SERVICE_NAME = "service.name"

# ---------------------------------------------------------------- metrics
# OpenTelemetry instrument names; a Prometheus backend stores them with dots as
# underscores and counters suffixed ``_total`` (see `prometheus_name`).

METRIC_TOKENS = "agent.context_window.tokens"  # gauge {token}, by ATTR_CATEGORY
METRIC_LIMIT = "agent.context_window.limit"  # gauge {token}
METRIC_UTILIZATION = "agent.context_window.utilization"  # gauge 1
METRIC_SNAPSHOTS = "agent.context_window.snapshots"  # counter {snapshot}, by ATTR_COUNT_METHOD
METRIC_COUNT_FAILURES = "agent.context_window.provider_count.failures"  # counter {failure}
METRIC_UNUSED_TOOL_TOKENS = "agent.context_window.unused_tool_tokens"  # gauge {token}: definitions never called
# gauge {call}: the calls left until the stage's input reaches the threshold share of its window, at its recent
# growth (its forecast); -1 while the stage does not grow.
METRIC_CALLS_UNTIL_THRESHOLD = "agent.context_window.calls_until_threshold"
# counter {USD}, by ATTR_CATEGORY: each call's input cost, once. The unit is an annotation so that every
# Prometheus path (scrape endpoint, Collector, OTLP push) stores it as ``agent_context_window_cost_total``.
METRIC_COST = "agent.context_window.cost"
COST_UNIT = "{USD}"
# gauge {token}, by ATTR_CATEGORY: of the latest request's tokens, those served from the prompt cache (set
# where the response reports cached tokens); with agent.context_window.tokens, the cache share.
METRIC_CACHED_TOKENS = "agent.context_window.cached_tokens"
METRIC_TOKEN_USAGE = "gen_ai.client.token.usage"  # histogram {token}, by GEN_AI_TOKEN_TYPE
METRIC_OPERATION_DURATION = "gen_ai.client.operation.duration"  # histogram s, a call from its start to its end

# Bucket boundaries of gen_ai.client.token.usage, from the GenAI metrics conventions.
TOKEN_HISTOGRAM_BOUNDARIES = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]
# Bucket boundaries of gen_ai.client.operation.duration (seconds), from the same conventions.
DURATION_HISTOGRAM_BOUNDARIES = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]


def prometheus_name(name: str, counter: bool = False) -> str:
    """An instrument or attribute name as Prometheus stores it (dots become underscores)."""
    out = name.replace(".", "_")
    return out + "_total" if counter else out


# The contract's metric and label names as a Prometheus backend stores them: the reader and
# the dashboards both query these.
PROM_TOKENS = prometheus_name(METRIC_TOKENS)
PROM_LIMIT = prometheus_name(METRIC_LIMIT)
PROM_UTILIZATION = prometheus_name(METRIC_UTILIZATION)
PROM_SNAPSHOTS = prometheus_name(METRIC_SNAPSHOTS, counter=True)
PROM_COUNT_FAILURES = prometheus_name(METRIC_COUNT_FAILURES, counter=True)
PROM_UNUSED_TOOL_TOKENS = prometheus_name(METRIC_UNUSED_TOOL_TOKENS)
PROM_CALLS_UNTIL_THRESHOLD = prometheus_name(METRIC_CALLS_UNTIL_THRESHOLD)
PROM_COST = prometheus_name(METRIC_COST, counter=True)
PROM_CACHED_TOKENS = prometheus_name(METRIC_CACHED_TOKENS)
PROM_TOKEN_USAGE = prometheus_name(METRIC_TOKEN_USAGE)
PROM_CATEGORY = prometheus_name(ATTR_CATEGORY)
PROM_COUNT_METHOD = prometheus_name(ATTR_COUNT_METHOD)
PROM_PROVIDER = prometheus_name(GEN_AI_PROVIDER)
PROM_MODEL = prometheus_name(GEN_AI_REQUEST_MODEL)
PROM_SERVICE = prometheus_name(SERVICE_NAME)
PROM_RUN = prometheus_name(ATTR_RUN_ID)
PROM_STAGE = prometheus_name(ATTR_STAGE_ID)
PROM_TOKEN_TYPE = prometheus_name(GEN_AI_TOKEN_TYPE)


# ---------------------------------------------------------------- encode


# What a snapshot's rows become as attributes (`snapshot_attributes`): a function of the rows alone, which the
# call path keeps made while the same shared rows come again (``flat``: `_snapshots/build.SnapshotParts.flat`).
Flat = Callable[[str, list[Any], Callable[[list[Any]], tuple[Any, ...]]], tuple[Any, ...]]


def _made(kind: str, items: list[Any], flatten: Callable[[list[Any]], tuple[Any, ...]]) -> tuple[Any, ...]:
    return flatten(items)


def _detail_arrays(details: list[Any]) -> tuple[tuple[Any, ...], ...]:
    return (
        tuple([d.category.value for d in details]),
        tuple([exportable_text(d.source) for d in details]),
        tuple([d.tokens for d in details]),
    )


def _tool_arrays(tools: list[Any]) -> tuple[tuple[Any, ...], ...]:
    return (
        tuple([exportable_text(t.name) for t in tools]),
        tuple([t.category.value if t.category else "" for t in tools]),
        tuple([exportable_text(t.source or "") for t in tools]),
        tuple([t.definition_tokens for t in tools]),
        tuple([t.result_tokens for t in tools]),
        tuple([t.invocations for t in tools]),
        tuple([t.folded for t in tools]),
    )


def _unused_arrays(unused: list[Any]) -> tuple[tuple[Any, ...], ...]:
    return (
        tuple([u.name for u in unused]),
        tuple([u.category.value if u.category else "" for u in unused]),
        tuple([u.source or "" for u in unused]),
        tuple([u.definition_tokens for u in unused]),
        tuple([u.stage_definition_tokens for u in unused]),
        tuple([u.requests for u in unused]),
    )


_CATEGORY_NAMES = {c: c.value for c in CATEGORIES}  # a dict lookup, not the enum's value property (~0.1 us each)


def snapshot_attributes(snapshot: Snapshot, include_details: bool = True, flat: Optional[Flat] = None) -> dict[str, Any]:
    """The flat, typed attributes of one snapshot event; arrays as tuples, as the OpenTelemetry SDK holds them.

    ``flat``: how the row arrays are made from the rows (None: each time)."""
    flat = flat or _made
    attrs: dict[str, Any] = {
        ATTR_SCHEMA: SCHEMA_VERSION,
        ATTR_INPUT_TOKENS: snapshot.input_tokens,
        ATTR_COUNT_METHOD: snapshot.count_method.value,
        ATTR_EVENT_SEQ: snapshot.event_seq,
        ATTR_GENERATED_AT: snapshot.generated_at.isoformat(),
        ATTR_WARNINGS: tuple([w.code for w in snapshot.warnings]),
    }
    for key, value in (
        (ATTR_RUN_ID, snapshot.run_id),
        (ATTR_STAGE_ID, snapshot.stage_id),
        (ATTR_PROVIDER, snapshot.provider and exportable_text(snapshot.provider)),
        (ATTR_MODEL, snapshot.model and exportable_text(snapshot.model)),
        (ATTR_LIMIT_TOKENS, snapshot.context_window_tokens),
    ):
        if value is not None:
            attrs[key] = value
    if snapshot.context_window_tokens:
        attrs[ATTR_UTILIZATION] = snapshot.input_tokens / snapshot.context_window_tokens
    names = _CATEGORY_NAMES
    for item in snapshot.breakdown:
        name = names.get(item.category) or Category(item.category).value
        attrs[TOKENS_PREFIX + name] = item.tokens
        if item.cached_tokens is not None:
            attrs[CACHED_PREFIX + name] = item.cached_tokens
    if snapshot.cached_tokens is not None:
        attrs[ATTR_CACHED_TOKENS] = snapshot.cached_tokens
    cost = snapshot.cost
    if cost is not None:
        attrs[ATTR_COST_CURRENCY] = cost.currency
        attrs[ATTR_INPUT_COST] = float(cost.input_cost)
        for category, usd in cost.by_category.items():
            attrs[COST_PREFIX + (names.get(category) or Category(category).value)] = float(usd)
    if include_details and snapshot.details:
        for key, values in zip(DETAIL_ARRAYS, flat("detail-attributes", snapshot.details, _detail_arrays)):
            attrs[key] = values
    if snapshot.tools:
        attrs[ATTR_UNUSED_TOOL_TOKENS] = snapshot.unused_tool_tokens
        if include_details:
            for key, values in zip(TOOL_ARRAYS, flat("tool-attributes", snapshot.tools, _tool_arrays)):
                attrs[key] = values
            if snapshot.unused_tools:
                for key, values in zip(UNUSED_ARRAYS, flat("unused-attributes", snapshot.unused_tools, _unused_arrays)):
                    attrs[key] = values
    totals = snapshot.stage_totals
    if totals is not None and totals.calls is not None:
        attrs[ATTR_STAGE_CALLS] = totals.calls
        attrs[ATTR_STAGE_INPUT_TOKENS] = totals.input_tokens or 0
        attrs[ATTR_STAGE_CACHED] = totals.cached_tokens
        attrs[ATTR_STAGE_COMPACTIONS] = totals.compactions
        if totals.input_cost is not None:
            attrs[ATTR_STAGE_INPUT_COST] = float(totals.input_cost)
        if totals.peak_usage_percent is not None:
            attrs[ATTR_STAGE_PEAK] = float(totals.peak_usage_percent)
        for category, ct in totals.by_category.items():
            name = names.get(category) or Category(category).value
            attrs[STAGE_TOKENS_PREFIX + name] = ct.tokens
            attrs[STAGE_CACHED_PREFIX + name] = ct.cached_tokens
            if ct.cost is not None:
                attrs[STAGE_COST_PREFIX + name] = float(ct.cost)
    if snapshot.compaction is not None:
        attrs[ATTR_COMPACTION_BEFORE] = snapshot.compaction.before_tokens
        attrs[ATTR_COMPACTION_AFTER] = snapshot.compaction.after_tokens
    if include_details and snapshot.repeated:
        rep = snapshot.repeated
        for key, values in zip(
            REPEATED_ARRAYS,
            (
                tuple([exportable_text(r.target) for r in rep]),
                tuple([r.category.value for r in rep]),
                tuple([r.fingerprint for r in rep]),
                tuple([r.copies for r in rep]),
                tuple([r.tokens for r in rep]),
                tuple([r.stage_tokens for r in rep]),
                tuple([r.requests for r in rep]),
            ),
        ):
            attrs[key] = values
    miss = snapshot.cache_miss
    if miss is not None:
        for name in CACHE_MISS_FIELDS:
            value = getattr(miss, name)
            if value is not None:
                attrs[CACHE_MISS_PREFIX + name] = float(value) if name == "stage_saving" else value
    return attrs  # ids are valid Unicode (validate_id); the labels above went through exportable_text


_SURROGATE = re.compile("[\ud800-\udfff]")


def exportable_text(value: str) -> str:
    """``value`` with each lone surrogate as U+FFFD: UTF-8 cannot carry one, so no OTLP encoder can."""
    return value if value.isascii() else _SURROGATE.sub("\ufffd", value)


def exportable(attributes: dict[str, Any]) -> dict[str, Any]:
    """``attributes`` (changed in place, and returned) with every text value `exportable_text`.

    With `exportable_text`, the one gate for the labels that reach OpenTelemetry (model and
    provider names, tag sources, MCP server and skill names, stage kinds): a lone surrogate in
    one made the encoder log a traceback per attribute per export and drop the span whose name
    held it. telemetry.py passes every attribute dict it builds through here, and
    `snapshot_attributes` its label fields.
    """
    for key, value in attributes.items():
        kind = type(value)
        if kind is str:
            if not value.isascii():
                attributes[key] = exportable_text(value)
        elif (kind is list or kind is tuple) and value and type(value[0]) is str:  # the contract's lists are of one type
            if not "".join(value).isascii():
                attributes[key] = [exportable_text(v) for v in value]
    return attributes


def span_level(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The span-level copy of a snapshot's attributes: backends search span attributes, not events."""
    return {k: v for k, v in attrs.items() if not k.startswith(_EVENT_ONLY)}


_EVENT_ONLY = (
    DETAILS_PREFIX,
    TOOLS_PREFIX,
    UNUSED_PREFIX,
    STAGE_TOTALS_PREFIX,
    REPEATED_PREFIX,
    CACHE_MISS_PREFIX,
)  # rows and totals ride on the event only


# ---------------------------------------------------------------- decode


def as_int(value: Any) -> int:
    """An int from whatever a backend wrote (int, float, numeric string); 0 for a damaged value."""
    if value is None or value == "":
        return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        pass
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        return 0  # a damaged value must not fail the whole query


def percent(tokens: int, window: Optional[int]) -> Optional[float]:
    """``usage_percent`` (0-100, four decimals): the writer's and the readers' one rounding."""
    return round(100.0 * tokens / window, 4) if window else None


def parse_time(value: Any, fallback_ns: int = 0) -> datetime:
    """``generated_at`` from its ISO string, else from a nanosecond timestamp, else the epoch."""
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
        except ValueError:
            pass
    return from_ns(fallback_ns) or datetime.fromtimestamp(0, tz=UTC)


def from_ns(time_ns: int) -> Optional[datetime]:
    """A timestamp from nanoseconds; None for a value no datetime can hold (a damaged line)."""
    try:
        return datetime.fromtimestamp(time_ns / 1e9, tz=UTC) if time_ns else None
    except (OverflowError, ValueError, OSError):
        return None


def warnings_from_codes(codes: Any) -> list[SnapshotWarning]:
    """Warnings with their messages from the codes a snapshot carried; unknown codes are kept."""
    out = []
    for code in codes if isinstance(codes, (list, tuple)) else []:
        if not isinstance(code, str):
            continue
        try:
            message = WARNING_MESSAGES[WarningCode(code)]
        except (ValueError, KeyError):
            message = "reported by the producer"
        out.append(SnapshotWarning(code=code, message=message))
    return out


def window_from_attributes(
    attrs: Mapping[str, Any], stage_id: str, staleness: Staleness, event_time_ns: int = 0
) -> StageContextWindow:
    """Decode one snapshot event's attributes into the read-back answer (raises on a damaged one)."""
    a = attrs
    limit = as_int(a.get(ATTR_LIMIT_TOKENS))
    window = limit if limit > 0 else None
    breakdown = []
    for category in CATEGORIES:
        tokens = as_int(a.get(TOKENS_PREFIX + category.value, 0))
        cached = a.get(CACHED_PREFIX + category.value)
        breakdown.append(
            BreakdownItem(
                category=category,
                tokens=tokens,
                usage_percent=percent(tokens, window),
                cached_tokens=as_int(cached) if cached is not None else None,
            )
        )
    input_tokens = a.get(ATTR_INPUT_TOKENS)
    total = as_int(input_tokens) if input_tokens is not None else sum(b.tokens for b in breakdown)
    details = []
    cats, sources, toks = (a.get(k) or [] for k in (ATTR_DETAIL_CATEGORIES, ATTR_DETAIL_SOURCES, ATTR_DETAIL_TOKENS))
    for cat, source, tokens in zip(cats, sources, toks, strict=False):
        try:
            details.append(DetailItem(category=Category(cat), source=str(source), tokens=as_int(tokens)))
        except ValueError:
            continue
    try:
        count_method: Optional[CountMethod] = CountMethod(str(a.get(ATTR_COUNT_METHOD)))
    except ValueError:
        count_method = None
    seq = a.get(ATTR_EVENT_SEQ)
    tools = tools_from_attributes(a)
    unused = a.get(ATTR_UNUSED_TOOL_TOKENS)
    cached_total = a.get(ATTR_CACHED_TOKENS)
    return StageContextWindow(
        stage_id=stage_id,
        available=True,
        provider=a.get(ATTR_PROVIDER),
        model=a.get(ATTR_MODEL),
        context_window_tokens=window,
        input_tokens=total,
        usage_percent=percent(total, window),
        count_method=count_method,
        staleness=staleness,
        generated_at=parse_time(a.get(ATTR_GENERATED_AT), event_time_ns),
        event_seq=as_int(seq) if seq is not None else None,
        breakdown=breakdown,
        warnings=warnings_from_codes(a.get(ATTR_WARNINGS)),
        details=details,
        tools=tools,
        unused_tools=unused_from_attributes(a) if UNUSED_ARRAYS[0] in a else unused_in(tools),
        unused_tool_tokens=as_int(unused) if unused is not None else None,
        cached_tokens=as_int(cached_total) if cached_total is not None else None,
        cost=cost_from_attributes(a),
        stage_totals=stage_totals_from_attributes(a),
        compaction=compaction_from_attributes(a),
        repeated=repeated_from_attributes(a),
        cache_miss=cache_miss_from_attributes(a),
    )


def repeated_from_attributes(attrs: Mapping[str, Any]) -> list[RepeatedContent]:
    """The repeated segments one snapshot event carried; a row that does not decode is skipped."""
    columns: list[Any] = [attrs.get(k) for k in REPEATED_ARRAYS]
    columns = [c if isinstance(c, (list, tuple)) else [] for c in columns]
    out = []
    for i, target in enumerate(columns[0]):
        cat, fp, copies, tokens, over, requests = (c[i] if i < len(c) else None for c in columns[1:])
        try:
            out.append(
                RepeatedContent(
                    target=str(target),
                    category=Category(str(cat)),
                    fingerprint=str(fp or ""),
                    copies=as_int(copies),
                    tokens=as_int(tokens),
                    stage_tokens=as_int(over),
                    requests=as_int(requests),
                )
            )
        except ValueError:
            continue
    return out


def cache_miss_from_attributes(attrs: Mapping[str, Any]) -> Optional[CacheMiss]:
    """The stage's cache misses as one snapshot event carried them; None when it carried none."""
    missed = attrs.get(CACHE_MISS_PREFIX + "stage_missed_tokens")
    if missed is None:
        return None
    get = {name: attrs.get(CACHE_MISS_PREFIX + name) for name in CACHE_MISS_FIELDS}
    return CacheMiss(
        prefix_tokens=as_int(get["prefix_tokens"]),
        cached_tokens=as_int(get["cached_tokens"]),
        missed_tokens=as_int(get["missed_tokens"]),
        stage_missed_tokens=as_int(missed),
        stage_saving=as_float(get["stage_saving"]),
        calls=as_int(get["calls"]),
    )


def unused_from_attributes(attrs: Mapping[str, Any]) -> list[UnusedTool]:
    """The unused definitions over the stage one snapshot event carried; a row that does not decode is skipped."""
    columns: list[Any] = [attrs.get(k) for k in UNUSED_ARRAYS]
    columns = [c if isinstance(c, (list, tuple)) else [] for c in columns]
    out = []
    for i, name in enumerate(columns[0]):
        cat, source, each, over, requests = (c[i] if i < len(c) else None for c in columns[1:])
        try:
            out.append(
                UnusedTool(
                    name=str(name),
                    category=Category(cat) if cat else None,
                    source=str(source) if source else None,
                    definition_tokens=as_int(each),
                    stage_definition_tokens=as_int(over),
                    requests=as_int(requests),
                )
            )
        except ValueError:
            continue
    return out


def stage_totals_from_attributes(attrs: Mapping[str, Any]) -> Optional[StageTotals]:
    """A snapshot's stage totals; None when it carried none (an older producer, a snapshot outside a call)."""
    calls = attrs.get(ATTR_STAGE_CALLS)
    if calls is None:
        return None
    by_category = {}
    for category in CATEGORIES:
        name = category.value
        by_category[category] = CategoryTotals(
            tokens=as_int(attrs.get(STAGE_TOKENS_PREFIX + name)),
            cost=as_float(attrs.get(STAGE_COST_PREFIX + name)),
            cached_tokens=as_int(attrs.get(STAGE_CACHED_PREFIX + name)),
        )
    return StageTotals(
        calls=as_int(calls),
        input_tokens=as_int(attrs.get(ATTR_STAGE_INPUT_TOKENS)),
        input_cost=as_float(attrs.get(ATTR_STAGE_INPUT_COST)),
        peak_usage_percent=as_float(attrs.get(ATTR_STAGE_PEAK)),
        by_category=by_category,
        cached_tokens=as_int(attrs.get(ATTR_STAGE_CACHED)),
        compactions=as_int(attrs.get(ATTR_STAGE_COMPACTIONS)),
    )


def compaction_from_attributes(attrs: Mapping[str, Any]) -> Optional[Compaction]:
    before = attrs.get(ATTR_COMPACTION_BEFORE)
    if before is None:
        return None
    return Compaction(before_tokens=as_int(before), after_tokens=as_int(attrs.get(ATTR_COMPACTION_AFTER)))


def as_float(value: Any) -> Optional[float]:
    """A float from whatever a backend wrote; None for a missing or damaged value."""
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


def cost_from_attributes(attrs: Mapping[str, Any]) -> Optional[Cost]:
    """A snapshot's cost; None when it carried none (an unpriced model, an older producer)."""
    currency = attrs.get(ATTR_COST_CURRENCY)
    total = as_float(attrs.get(ATTR_INPUT_COST))
    if not isinstance(currency, str) or total is None:
        return None
    by_category = {}
    for category in CATEGORIES:
        usd = as_float(attrs.get(COST_PREFIX + category.value))
        if usd is not None:
            by_category[category] = usd
    return Cost(currency=currency, input_cost=total, by_category=by_category)


def tools_from_attributes(attrs: Mapping[str, Any]) -> list[ToolItem]:
    """The per-tool rows of one snapshot event; a row that does not decode is skipped."""
    names = attrs.get(ATTR_TOOL_NAMES)
    if not isinstance(names, (list, tuple)) or not names:
        return []
    columns: list[Any] = [attrs.get(k) for k in TOOL_ARRAYS[1:]]
    columns = [c if isinstance(c, (list, tuple)) else [] for c in columns]
    out = []
    for i, name in enumerate(names):
        cat, source, definition, result, invocations, folded = (c[i] if i < len(c) else None for c in columns)
        try:
            out.append(
                ToolItem(
                    name=str(name),
                    category=Category(cat) if cat else None,
                    source=str(source) if source else None,
                    definition_tokens=as_int(definition),
                    result_tokens=as_int(result),
                    invocations=as_int(invocations),
                    folded=as_int(folded),
                )
            )
        except ValueError:
            continue
    return out
