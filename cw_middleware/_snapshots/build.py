"""Build content-free snapshots from a breakdown by (category, source).

A local estimate is published as it is; an authoritative total (provider count
or response usage) first rescales the breakdown with `reconcile.reconcile`, so
categories always sum exactly to ``input_tokens``. Tokens the local count could
not see (images, audio, files) go to the (category, source) that carried them,
never spread over everything: see reconcile.py for the rule. Details are the top sources,
bounded; the breakdown always lists all seven categories so dashboards see
zeros rather than gaps.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any, Optional, TypeVar

from pydantic import BaseModel

from .._counting.cache_share import RequestOrder, cached_by_category
from .._counting.cost import CURRENCY, Prices, request_cost
from .._counting.fingerprints import exported
from .._counting.model_facts import RequestMeta
from .._counting.tool_rows import NO_TOOLS, ToolUse, tool_rows
from .._kernel.codec import TOOL_FIELDS, UNUSED_FIELDS
from .._kernel.codec import percent as _percent
from .._kernel.contract import (
    CATEGORIES,
    WARNING_MESSAGES,
    BreakdownItem,
    CacheMiss,
    Category,
    Compaction,
    Cost,
    CountMethod,
    DetailItem,
    RepeatedContent,
    Snapshot,
    SnapshotWarning,
    StageTotals,
    ToolItem,
    UnusedTool,
    WarningCode,
    never_called,
)
from .reconcile import reconcile_with_prefix

_UNATTRIBUTED = (Category.OTHER, "unattributed")
_UNESTIMATED = (Category.OTHER, "unestimated")


class SnapshotParts:
    """The event-seq counter and the shared snapshot parts: one set per Runtime, which owns it.

    Snapshot parts are frozen pydantic models, and most of them repeat from one
    request to the next (the system prompt and tools do not change every turn):
    sharing the instances keeps snapshot building cheap on the call path. Each
    cache is bounded; they hold numbers, categories and source labels only.
    """

    CACHE_SIZE = 4096
    FLAT_CACHE_SIZE = 256  # flattened row lists (~1-2 KB each): they repeat within a call and from one call to the next

    def __init__(self) -> None:
        self._seq = itertools.count(1)
        self._breakdown: dict[tuple[Category, int, Optional[int], Optional[int]], BreakdownItem] = {}
        self._details: dict[tuple[Category, str, int], DetailItem] = {}
        self._tools: dict[tuple[Any, ...], ToolItem] = {}
        self._warnings: dict[WarningCode, SnapshotWarning] = {}
        self._flat: dict[tuple[Any, ...], tuple[tuple[Any, ...], tuple[Any, ...]]] = {}

    def next_seq(self) -> int:
        return next(self._seq)  # itertools.count is atomic under the GIL: no lock needed

    def warnings(self, codes: Iterable[WarningCode]) -> list[SnapshotWarning]:
        return [self.warning(code) for code in sorted(set(codes), key=lambda c: c.value)]

    def breakdown_item(
        self, category: Category, tokens: int, window: Optional[int], cached: Optional[int] = None
    ) -> BreakdownItem:
        key = (category, tokens, window, cached)
        item = self._breakdown.get(key)
        if item is None:
            if len(self._breakdown) >= self.CACHE_SIZE:
                self._breakdown.clear()
            fields = {"category": category, "tokens": tokens, "usage_percent": _percent(tokens, window), "cached_tokens": cached}
            item = self._breakdown[key] = trusted(BreakdownItem, fields)
        return item

    def detail_item(self, category: Category, source: str, tokens: int) -> DetailItem:
        key = (category, source, tokens)
        item = self._details.get(key)
        if item is None:
            if len(self._details) >= self.CACHE_SIZE:
                self._details.clear()
            item = self._details[key] = trusted(DetailItem, {"category": category, "source": source, "tokens": tokens})
        return item

    def tool_item(
        self,
        name: str,
        category: Optional[Category],
        source: Optional[str],
        definition_tokens: int,
        result_tokens: int,
        invocations: int,
        folded: int = 0,
    ) -> ToolItem:
        key = (name, category, source, definition_tokens, result_tokens, invocations, folded)
        item = self._tools.get(key)
        if item is None:
            if len(self._tools) >= self.CACHE_SIZE:
                self._tools.clear()
            fields = dict(zip(TOOL_FIELDS, key))
            item = self._tools[key] = trusted(ToolItem, fields)
        return item

    def flat(self, kind: str, items: list[Any], flatten: Callable[[list[Any]], tuple[Any, ...]]) -> tuple[Any, ...]:
        """``flatten(items)``, kept while the same shared items come again (a snapshot's tool and detail rows
        repeat from call to call: `compact` flattens each list once). By identity, holding the items."""
        key = (kind, *map(id, items))
        hit = self._flat.get(key)
        if hit is not None and all(map(operator.is_, hit[0], items)):
            return hit[1]
        flat = flatten(items)
        if len(self._flat) >= self.FLAT_CACHE_SIZE:
            self._flat.clear()
        self._flat[key] = (tuple(items), flat)
        return flat

    def warning(self, code: WarningCode) -> SnapshotWarning:
        item = self._warnings.get(code)
        if item is None:
            item = self._warnings[code] = SnapshotWarning.model_construct(code=code.value, message=WARNING_MESSAGES[code])
        return item


def build_snapshot(
    by_source: Mapping[tuple[Category, str], int],
    meta: RequestMeta,
    count_method: CountMethod,
    warnings: Iterable[WarningCode] = (),
    total: Optional[int] = None,
    max_details: int = 20,
    unestimated: Optional[Mapping[tuple[Category, str], int]] = None,
    *,
    parts: Optional[SnapshotParts] = None,
    cache_prefix: Optional[Mapping[tuple[Category, str], int]] = None,
    cache_prefix_total: Optional[int] = None,
    tools: ToolUse = NO_TOOLS,
    max_tools: int = 20,
    order: Optional[RequestOrder] = None,
    response: Optional[ResponseSide] = None,
    generated_at: Optional[datetime] = None,
    repeated: Iterable[tuple[int, str, Category, int, int]] = (),
    unused_rows: bool = True,
) -> Snapshot:
    """A snapshot of ``by_source``, rescaled to ``total`` when one is given.

    ``parts`` numbers the snapshot and shares its parts: the Runtime's on the call
    path; without it, a one-off snapshot (event_seq 1) with parts of its own.

    ``unestimated`` (`Estimate.unestimated`) names the keys carrying content the local count
    could not see: a total above the local sum goes to them, the rest keep their counts.

    ``cache_prefix`` (`Estimate.cache_prefix`) with ``cache_prefix_total`` (the response's cache
    read + write for an explicit breakpoint) reconciles in two groups: the prefix's parts to that
    exact count, the rest to the remainder of ``total``.

    ``tools`` (`Estimate.tools`) gives the per-tool rows, scaled as their sources are, the
    largest ``max_tools`` of them and one folded row. ``response`` is what the response said
    beyond the total: its tool calls, and the cached tokens that ``order`` (`Estimate.order`)
    attributes to categories in request order (cache_share.py). ``meta.prices`` prices it all.
    ``repeated`` (`Estimate.repeated`) are the long texts the request sends more than once.
    ``unused_rows``: False where the stage's ledger makes the unused tools' rows (the call path, `ledger.Ledgers.add`).
    """
    codes = set(warnings)
    parts = parts or SnapshotParts()
    local = by_source
    if total is not None:
        carriers = unestimated
        if not carriers and WarningCode.NON_TEXT_CONTENT_NOT_ESTIMATED in codes:
            carriers = {_UNESTIMATED: 1}  # unseen content whose carrier is unknown: other, not everything
        by_source = reconcile_with_prefix(by_source, total, carriers, _UNATTRIBUTED, cache_prefix or {}, cache_prefix_total or 0)
    per_category = dict.fromkeys(CATEGORIES, 0)
    for (category, _), tokens in by_source.items():
        per_category[category] += tokens
    input_tokens = sum(per_category.values())
    window = meta.context_window_tokens
    if window and input_tokens > window:
        codes.add(WarningCode.CONTEXT_WINDOW_EXCEEDED)
    read, written = _cache_split(response, order, local, per_category) if total is not None else (None, None)
    # Largest first; sorted() is stable, so ties keep the request's order.
    ranked = sorted(by_source.items(), key=itemgetter(1), reverse=True)
    if len(ranked) > max_details:
        codes.add(WarningCode.DETAILS_TRUNCATED)
    rows: list[ToolItem] = []
    unused_tools: list[UnusedTool] = []
    unused = 0
    if tools.definitions:
        calls = response.tool_calls if response is not None else None
        rows, unused_tools, unused, folded = _tool_part(tools, _ratios(local, by_source), max_tools, calls, parts, unused_rows)
        if folded:
            codes.add(WarningCode.TOOLS_FOLDED)
    return trusted(
        Snapshot,
        dict(
            run_id=meta.run_id,
            stage_id=meta.stage_id,
            provider=meta.provider,
            model=meta.model,
            context_window_tokens=window,
            input_tokens=input_tokens,
            usage_percent=_percent(input_tokens, window),
            count_method=count_method,
            generated_at=generated_at or datetime.now(UTC),
            event_seq=parts.next_seq(),
            breakdown=[parts.breakdown_item(c, t, window, read.get(c) if read else None) for c, t in per_category.items()],
            warnings=parts.warnings(codes),
            details=[parts.detail_item(c, s, t) for (c, s), t in ranked[:max_details] if t],
            tools=rows,
            unused_tool_tokens=unused,
            unused_tools=unused_tools,
            cached_tokens=sum(read.values()) if read is not None else None,
            cost=_cost(per_category, meta.prices, read, written) if meta.prices is not None else None,
            stage_totals=None,
            compaction=None,
            repeated=repeated_items(repeated),
            cache_miss=None,
        ),
    )


MAX_REPEATED = 20  # segments a snapshot lists, the largest over the stage first


def repeated_items(repeated: Iterable[tuple[int, str, Category, int, int]]) -> list[RepeatedContent]:
    """A request's repeated segments as the contract has them: the duplicate copies' local tokens, largest first."""
    items = [
        repeated_item(label, category, exported(fp), copies, tokens * (copies - 1), tokens * (copies - 1), 1)
        for fp, label, category, tokens, copies in repeated
    ]
    return sorted(items, key=lambda r: -r.stage_tokens)[:MAX_REPEATED]


REPEATED_FIELDS = ("target", "category", "fingerprint", "copies", "tokens", "stage_tokens", "requests")


def repeated_item(
    target: str, category: Category, fingerprint: str, copies: int, tokens: int, stage_tokens: int, requests: int
) -> RepeatedContent:
    values = (target, category, fingerprint, copies, tokens, stage_tokens, requests)
    return trusted(RepeatedContent, dict(zip(REPEATED_FIELDS, values)))


def cache_miss_item(prefix: int, cached: int, missed: int, stage_missed: int, saving: Optional[float], calls: int) -> CacheMiss:
    fields = ("prefix_tokens", "cached_tokens", "missed_tokens", "stage_missed_tokens", "stage_saving", "calls")
    return trusted(CacheMiss, dict(zip(fields, (prefix, cached, missed, stage_missed, saving, calls))))


def _tool_part(
    tools: ToolUse,
    ratio_of: Optional[Callable[[tuple[Category, str]], float]],
    max_tools: int,
    calls: Optional[Mapping[str, int]],
    parts: SnapshotParts,
    with_unused: bool = True,
) -> tuple[list[ToolItem], list[UnusedTool], int, int]:
    """(tool rows, unused tools, unused tokens, tools folded) of a snapshot (``with_unused`` False: no unused rows).

    Rows as counted (no rescaling, no response calls: every local estimate) depend on ``tools``
    alone, which the estimator hands out unchanged while the conversation and tool set are: they
    are made once per ToolUse and these parts (issue 21: ~40 us a snapshot for 30 tools), and each
    snapshot gets lists of its own.
    """
    as_counted = ratio_of is None and not calls
    key = (_tool_part, max_tools, parts)
    made = tools.memo.get(key) if as_counted else None
    if made is None:
        found = tool_rows(tools, ratio_of, max_tools, calls, parts.tool_item)
        unused_rows = (
            [
                unused_tool(t.name, t.category, t.source, t.definition_tokens, t.definition_tokens, 1)
                for t in found.rows
                if never_called(t)
            ]
            if with_unused or as_counted
            else []
        )
        made = (found.rows, unused_rows, found.unused_tokens, found.folded)
        if as_counted:
            tools.memo[key] = made
    rows, unused_rows, unused, folded = made
    return list(rows), list(unused_rows) if with_unused else [], unused, folded


def _cost(
    per_category: Mapping[Category, int],
    prices: Prices,
    read: Optional[Mapping[Category, int]],
    written: Optional[Mapping[Category, int]],
) -> Cost:
    total, by_category = request_cost(per_category, prices, read, written)
    return trusted(Cost, {"currency": CURRENCY, "input_cost": total, "by_category": by_category})


@dataclass(frozen=True, slots=True)
class ResponseSide:
    """What a response says about its request besides the total: the tools it called and the cache."""

    tool_calls: Mapping[str, int] = field(default_factory=dict)  # name -> calls (names the request defined)
    cache_read: Optional[int] = None  # input tokens served from the prompt cache; None: not reported
    cache_written: Optional[int] = None  # input tokens written to it (Anthropic); None: not reported


def _cache_split(
    response: Optional[ResponseSide],
    order: Optional[RequestOrder],
    local: Mapping[tuple[Category, str], int],
    per_category: Mapping[Category, int],
) -> tuple[Optional[dict[Category, int]], Optional[dict[Category, int]]]:
    """(cache reads, cache writes) by category, where the response reported them."""
    if response is None or response.cache_read is None or order is None:
        return None, None
    read = cached_by_category(order, local, per_category, response.cache_read)
    if not response.cache_written:
        return read, None
    through = cached_by_category(order, local, per_category, response.cache_read + response.cache_written)
    return read, {c: max(0, through[c] - read[c]) for c in CATEGORIES}


def with_stage(
    snapshot: Snapshot,
    totals: StageTotals,
    tools: list[ToolItem],
    unused: list[UnusedTool],
    compaction: Optional[Compaction],
    repeated: Optional[list[RepeatedContent]] = None,
    cache_miss: Optional[CacheMiss] = None,
) -> Snapshot:
    """The snapshot with what its stage adds (_snapshots/ledger.py): totals, tool rows and unused tools, a compaction,
    its repeated segments over the stage and the stage's cache misses."""
    fields = {**snapshot.__dict__, "stage_totals": totals, "tools": tools, "unused_tools": unused, "compaction": compaction}
    if repeated is not None:
        fields["repeated"] = repeated
    fields["cache_miss"] = cache_miss
    return trusted(Snapshot, fields)


def unused_tool(
    name: str, category: Optional[Category], source: Optional[str], each: int, over: int, requests: int
) -> UnusedTool:
    return trusted(UnusedTool, dict(zip(UNUSED_FIELDS, (name, category, source, each, over, requests))))


def _ratios(
    local: Mapping[tuple[Category, str], int], scaled: Mapping[tuple[Category, str], int]
) -> Optional[Callable[[tuple[Category, str]], float]]:
    """In what proportion a key's local count was rescaled (None: not rescaled); a row under it scales alike."""
    if local is scaled:
        return None
    local_total = sum(local.values())
    overall = sum(scaled.values()) / local_total if local_total else 1.0
    ratios: dict[tuple[Category, str], float] = {}  # a snapshot's rows share a few keys (every native tool one)

    def ratio_of(key: tuple[Category, str]) -> float:
        ratio = ratios.get(key)
        if ratio is None:
            base = local.get(key)
            ratio = ratios[key] = scaled.get(key, 0) / base if base else overall
        return ratio

    return ratio_of


M = TypeVar("M", bound=BaseModel)


def trusted(model: type[M], fields: dict[str, Any]) -> M:
    """``model.model_construct(**fields)`` without its per-field bookkeeping: 4x faster, on the call path.

    Safe because every field is given, built here from trusted values; the
    round-trip tests in tests/test_snapshot.py guard it against pydantic changes.
    """
    instance = model.__new__(model)
    object.__setattr__(instance, "__dict__", fields)
    object.__setattr__(instance, "__pydantic_fields_set__", set(fields))
    object.__setattr__(instance, "__pydantic_extra__", None)
    object.__setattr__(instance, "__pydantic_private__", None)
    return instance
