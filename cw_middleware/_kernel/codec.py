"""A snapshot <-> the flat, typed, content-free attributes of its span event (the names: `names.py`).

`snapshot_attributes` encodes a `Snapshot` into the attributes of a span event;
`window_from_attributes` decodes them into the read-back `StageContextWindow`. A round
trip through both is lossless for everything the contract carries (tests/test_codec.py).
`exportable` is the one gate for the labels that reach OpenTelemetry.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import partial
from itertools import chain
from typing import Any, Optional, TypeVar

from .contract import (
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
from .names import (
    ATTR_CACHED_TOKENS,
    ATTR_COMPACTION_AFTER,
    ATTR_COMPACTION_BEFORE,
    ATTR_COST_CURRENCY,
    ATTR_COUNT_METHOD,
    ATTR_DETAIL_CATEGORIES,
    ATTR_DETAIL_SOURCES,
    ATTR_DETAIL_TOKENS,
    ATTR_EVENT_SEQ,
    ATTR_GENERATED_AT,
    ATTR_INPUT_COST,
    ATTR_INPUT_TOKENS,
    ATTR_LIMIT_TOKENS,
    ATTR_MODEL,
    ATTR_PROVIDER,
    ATTR_RUN_ID,
    ATTR_SCHEMA,
    ATTR_STAGE_CACHED,
    ATTR_STAGE_CALLS,
    ATTR_STAGE_COMPACTIONS,
    ATTR_STAGE_ID,
    ATTR_STAGE_INPUT_COST,
    ATTR_STAGE_INPUT_TOKENS,
    ATTR_STAGE_PEAK,
    ATTR_UNUSED_TOOL_TOKENS,
    ATTR_UTILIZATION,
    ATTR_WARNINGS,
    CACHE_MISS_FIELDS,
    CACHE_MISS_PREFIX,
    CACHED_PREFIX,
    COST_PREFIX,
    DETAIL_ARRAYS,
    DETAILS_PREFIX,
    REPEATED_ARRAYS,
    REPEATED_PREFIX,
    SCHEMA_VERSION,
    STAGE_CACHED_PREFIX,
    STAGE_COST_PREFIX,
    STAGE_TOKENS_PREFIX,
    STAGE_TOTALS_PREFIX,
    TOKENS_PREFIX,
    TOOL_ARRAYS,
    TOOLS_PREFIX,
    UNUSED_ARRAYS,
    UNUSED_PREFIX,
)

# ---------------------------------------------------------------- encode


# What a snapshot's rows become as attributes (`snapshot_attributes`): a function of the rows alone, which the
# call path keeps made while the same shared rows come again (``flat``: `_snapshots/build.SnapshotParts.flat`).
Flat = Callable[[str, list[Any], Callable[[list[Any]], tuple[Any, ...]]], tuple[Any, ...]]


def _made(kind: str, items: list[Any], flatten: Callable[[list[Any]], tuple[Any, ...]]) -> tuple[Any, ...]:
    return flatten(items)


# A snapshot's rows as flat tuples, row after row (a row's fields in order): the history keeps them so
# (`_snapshots/rows.compact`) and the event attributes' parallel arrays are their columns.
DETAIL_FIELDS = ("category", "source", "tokens")
TOOL_FIELDS = ("name", "category", "source", "definition_tokens", "result_tokens", "invocations", "folded")
UNUSED_FIELDS = ("name", "category", "source", "definition_tokens", "stage_definition_tokens", "requests")


def flat_details(details: list[DetailItem]) -> tuple[Any, ...]:
    return tuple(x for d in details for x in (d.category.value, d.source, d.tokens))


def flat_tools(tools: list[ToolItem]) -> tuple[Any, ...]:
    # Flat, one level of tuples (the collector untracks them at its first pass), flattened at C speed.
    return tuple(
        chain.from_iterable(
            (t.name, t.category and t.category.value, t.source, t.definition_tokens, t.result_tokens, t.invocations, t.folded)
            for t in tools
        )
    )


def flat_unused(unused: list[UnusedTool]) -> tuple[Any, ...]:
    return tuple(
        chain.from_iterable(
            (u.name, u.category and u.category.value, u.source, u.definition_tokens, u.stage_definition_tokens, u.requests)
            for u in unused
        )
    )


_ROWS: dict[str, tuple[Callable[[list[Any]], tuple[Any, ...]], tuple[str, ...]]] = {
    "details": (flat_details, DETAIL_FIELDS),
    "tools": (flat_tools, TOOL_FIELDS),
    "unused": (flat_unused, UNUSED_FIELDS),
}
_LABELS = frozenset({"name", "category", "source"})  # the text fields of a row: "" for none, made exportable


def _arrays(flat: Flat, kind: str, items: list[Any]) -> tuple[tuple[Any, ...], ...]:
    """The parallel arrays of a snapshot's rows of ``kind``: the columns of their flat tuple, labels made exportable."""
    flatten, fields = _ROWS[kind]
    rows, width = flat(kind, items, flatten), len(fields)
    columns = (rows[i::width] for i in range(width))
    return tuple(tuple([exportable_text(v) if v else "" for v in c]) if f in _LABELS else c for f, c in zip(fields, columns))


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
        for key, values in zip(DETAIL_ARRAYS, flat("detail-attributes", snapshot.details, partial(_arrays, flat, "details"))):
            attrs[key] = values
    if snapshot.tools:
        attrs[ATTR_UNUSED_TOOL_TOKENS] = snapshot.unused_tool_tokens
        if include_details:
            for key, values in zip(TOOL_ARRAYS, flat("tool-attributes", snapshot.tools, partial(_arrays, flat, "tools"))):
                attrs[key] = values
            if snapshot.unused_tools:
                unused = flat("unused-attributes", snapshot.unused_tools, partial(_arrays, flat, "unused"))
                for key, values in zip(UNUSED_ARRAYS, unused):
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

_Row = TypeVar("_Row")


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


def _decoded(attrs: Mapping[str, Any], keys: tuple[str, ...], make: Callable[..., _Row]) -> list[_Row]:
    """The rows the parallel arrays under ``keys`` carry, each ``make(*fields)`` (None where a column is short):
    the first column says how many; a row that does not decode is skipped."""
    columns = [c if isinstance(c, (list, tuple)) else () for c in (attrs.get(k) for k in keys)]
    out = []
    for i in range(len(columns[0])):
        try:
            out.append(make(*(c[i] if i < len(c) else None for c in columns)))
        except ValueError:  # pydantic's ValidationError too
            continue
    return out


def repeated_from_attributes(attrs: Mapping[str, Any]) -> list[RepeatedContent]:
    """The repeated segments one snapshot event carried."""
    return _decoded(attrs, REPEATED_ARRAYS, _repeated)


def _repeated(target: Any, cat: Any, fp: Any, copies: Any, tokens: Any, over: Any, requests: Any) -> RepeatedContent:
    return RepeatedContent(
        target=str(target),
        category=Category(str(cat)),
        fingerprint=str(fp or ""),
        copies=as_int(copies),
        tokens=as_int(tokens),
        stage_tokens=as_int(over),
        requests=as_int(requests),
    )


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
    """The unused definitions over the stage one snapshot event carried."""
    return _decoded(attrs, UNUSED_ARRAYS, _unused)


def _unused(name: Any, cat: Any, source: Any, each: Any, over: Any, requests: Any) -> UnusedTool:
    return UnusedTool(
        name=str(name),
        category=Category(cat) if cat else None,
        source=str(source) if source else None,
        definition_tokens=as_int(each),
        stage_definition_tokens=as_int(over),
        requests=as_int(requests),
    )


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
    """The per-tool rows of one snapshot event."""
    return _decoded(attrs, TOOL_ARRAYS, _tool)


def _tool(name: Any, cat: Any, source: Any, definition: Any, result: Any, invocations: Any, folded: Any) -> ToolItem:
    return ToolItem(
        name=str(name),
        category=Category(cat) if cat else None,
        source=str(source) if source else None,
        definition_tokens=as_int(definition),
        result_tokens=as_int(result),
        invocations=as_int(invocations),
        folded=as_int(folded),
    )
