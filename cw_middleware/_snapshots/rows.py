"""Snapshots as compact rows for the process history (`cw.snapshots()`, the stage ledger): flat tuples, expanded on read.

A `Snapshot` is a tree of pydantic models; the history keeps the last `snapshot_history` of
them, so each is kept as one flat tuple of strings, numbers and a datetime (`compact`) that the
garbage collector stops tracking, with repeated rows (details, tools) shared through the
runtime's `SnapshotParts`, and rebuilt as a `Snapshot` when read (`expand`).
"""

from __future__ import annotations

from itertools import chain
from typing import Any, Optional

from .._kernel.codec import DETAIL_FIELDS, TOOL_FIELDS, UNUSED_FIELDS, flat_details, flat_tools, flat_unused
from .._kernel.contract import (
    CATEGORIES,
    Category,
    CategoryTotals,
    Compaction,
    Cost,
    CountMethod,
    Snapshot,
    StageTotals,
    WarningCode,
)
from .build import (
    REPEATED_FIELDS,
    SnapshotParts,
    cache_miss_item,
    repeated_item,
    trusted,
    unused_tool,
)

CompactSnapshot = tuple[Any, ...]
_N = len(CATEGORIES)
_HEAD = 16  # the fields before the per-category ones


def compact(snapshot: Snapshot, parts: Optional[SnapshotParts] = None) -> CompactSnapshot:
    """A snapshot as one flat tuple of strings, numbers and a datetime.

    The collector untracks such a tuple at its first pass, so a long history (`snapshot_history`,
    1000 by default) costs full collections nothing: kept as models, each snapshot held six
    tracked containers that all lived long enough to reach the oldest generation, where they
    pushed the host toward a full collection (issue 11). `expand` gives back an equal Snapshot.
    With the ``parts`` the rows were shared from, lists of rows seen before are not flattened again.
    """
    items = {item.category: item for item in snapshot.breakdown}
    cost = snapshot.cost
    head = (
        snapshot.run_id,
        snapshot.stage_id,
        snapshot.provider,
        snapshot.model,
        snapshot.context_window_tokens,
        snapshot.input_tokens,
        snapshot.usage_percent,
        snapshot.count_method.value,
        snapshot.generated_at,
        snapshot.event_seq,
        len(snapshot.warnings),
        len(snapshot.details),
        snapshot.unused_tool_tokens,
        snapshot.cached_tokens,
        cost.currency if cost is not None else None,
        cost.input_cost if cost is not None else None,
    )
    # Per category: tokens, cached tokens, cost (None where the snapshot has none).
    per_category = tuple(
        x
        for c in CATEGORIES
        for x in (
            items[c].tokens if c in items else 0,
            items[c].cached_tokens if c in items else None,
            cost.by_category.get(c) if cost is not None else None,
        )
    )
    codes = tuple(w.code for w in snapshot.warnings)
    if parts is not None:
        details = parts.flat("details", snapshot.details, flat_details)
        tools = parts.flat("tools", snapshot.tools, flat_tools)
    else:
        details, tools = flat_details(snapshot.details), flat_tools(snapshot.tools)
    unused = flat_unused(snapshot.unused_tools)
    # A call's snapshots, and its stage's, share their totals while they are unchanged (_snapshots/ledger.py).
    stage = [snapshot.stage_totals, snapshot.compaction]
    block = parts.flat("stage", stage, _compact_stage) if parts is not None else _compact_stage(stage)
    return head + (len(snapshot.tools),) + per_category + codes + details + tools + unused + block + _compact_extra(snapshot)


def _compact_extra(snapshot: Snapshot) -> CompactSnapshot:
    """The row's last two items: its repeated segments (flat) and its cache misses (None: none)."""
    repeated = tuple(
        chain.from_iterable(
            (r.target, r.category.value, r.fingerprint, r.copies, r.tokens, r.stage_tokens, r.requests) for r in snapshot.repeated
        )
    )
    m = snapshot.cache_miss
    miss = (
        (m.prefix_tokens, m.cached_tokens, m.missed_tokens, m.stage_missed_tokens, m.stage_saving, m.calls)
        if m is not None
        else None
    )
    return (repeated, miss)


def expand(row: CompactSnapshot, parts: SnapshotParts) -> Snapshot:
    """The Snapshot a `compact` row was made from, its parts shared through ``parts``."""
    run_id, stage_id, provider, model, window, input_tokens, usage, method, generated_at, event_seq = row[:10]
    n_codes, n_details, unused, cached, currency, input_cost = row[10:_HEAD]
    n_tools = row[_HEAD]
    per_category = row[_HEAD + 1 : _HEAD + 1 + 3 * _N]
    start = _HEAD + 1 + 3 * _N
    codes = row[start : start + n_codes]
    start += n_codes
    d = len(DETAIL_FIELDS)
    flat = row[start : start + d * n_details]
    start += d * n_details
    n, m = len(TOOL_FIELDS), len(UNUSED_FIELDS)
    tool_part = row[start : start + n * n_tools]
    unused_part = row[start + n * n_tools : -_STAGE_LEN - 2]
    tools = [tool_part[i : i + n] for i in range(0, len(tool_part), n)]
    left = [unused_part[i : i + m] for i in range(0, len(unused_part), m)]
    totals, compaction = _expand_stage(row[-_STAGE_LEN - 2 : -2])
    flat_repeated, miss = row[-2:]
    k = len(REPEATED_FIELDS)
    repeated = [
        repeated_item(r[0], Category(r[1]), *r[2:]) for r in (flat_repeated[i : i + k] for i in range(0, len(flat_repeated), k))
    ]
    rows = [per_category[3 * i : 3 * i + 3] for i in range(_N)]
    cost = None
    if currency is not None:
        by_category = {c: r[2] for c, r in zip(CATEGORIES, rows)}
        cost = Cost.model_construct(currency=currency, input_cost=input_cost, by_category=by_category)
    return trusted(
        Snapshot,
        dict(
            run_id=run_id,
            stage_id=stage_id,
            provider=provider,
            model=model,
            context_window_tokens=window,
            input_tokens=input_tokens,
            usage_percent=usage,
            count_method=CountMethod(method),
            generated_at=generated_at,
            event_seq=event_seq,
            breakdown=[parts.breakdown_item(c, r[0], window, r[1]) for c, r in zip(CATEGORIES, rows)],
            warnings=[parts.warning(WarningCode(code)) for code in codes],
            details=[parts.detail_item(Category(flat[i]), flat[i + 1], flat[i + 2]) for i in range(0, len(flat), d)],
            tools=[parts.tool_item(t[0], Category(t[1]) if t[1] else None, *t[2:]) for t in tools],
            unused_tool_tokens=unused,
            unused_tools=[unused_tool(u[0], Category(u[1]) if u[1] else None, *u[2:]) for u in left],
            cached_tokens=cached,
            cost=cost,
            stage_totals=totals,
            compaction=compaction,
            repeated=repeated,
            cache_miss=cache_miss_item(*miss) if miss is not None else None,
        ),
    )


_STAGE_LEN = 8 + 3 * _N  # the fixed block a compact row ends with: its stage totals and compaction


_NO_TOTALS = CategoryTotals()


def _compact_stage(stage: list[Any]) -> CompactSnapshot:
    """A snapshot's ``[stage_totals, compaction]`` as the fixed block its compact row ends with."""
    t, c = stage
    marker = (c.before_tokens, c.after_tokens) if c is not None else (None, None)
    if t is None:
        return (False, None, None, None, None, None, *marker) + (None,) * (3 * _N)
    head = (True, t.calls, t.input_tokens, t.input_cost, t.peak_usage_percent, t.compactions, *marker)
    per = tuple(
        x for cat in CATEGORIES for ct in (t.by_category.get(cat, _NO_TOTALS),) for x in (ct.tokens, ct.cost, ct.cached_tokens)
    )
    return head + per


def _expand_stage(block: CompactSnapshot) -> tuple[Optional[StageTotals], Optional[Compaction]]:
    has, calls, input_tokens, input_cost, peak, compactions, before, after = block[:8]
    compaction = Compaction.model_construct(before_tokens=before, after_tokens=after) if before is not None else None
    if not has:
        return None, compaction
    per = block[8:]
    by_category = {
        cat: CategoryTotals.model_construct(tokens=per[3 * i], cost=per[3 * i + 1], cached_tokens=per[3 * i + 2])
        for i, cat in enumerate(CATEGORIES)
    }
    cached = sum(ct.cached_tokens for ct in by_category.values())
    totals = StageTotals.model_construct(
        calls=calls,
        input_tokens=input_tokens,
        input_cost=input_cost,
        peak_usage_percent=peak,
        by_category=by_category,
        cached_tokens=cached,
        compactions=compactions,
    )
    return totals, compaction
