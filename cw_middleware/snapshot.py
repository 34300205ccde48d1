"""Build content-free snapshots from a breakdown by (category, source).

A local estimate is published as it is; an authoritative total (provider count
or response usage) first rescales the breakdown with `reconcile.apportion`, so
categories always sum exactly to ``input_tokens``. Details are the top sources,
bounded; the breakdown always lists all seven categories so dashboards see
zeros rather than gaps.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable, Mapping, Optional

from .contract import (
    CATEGORIES,
    BreakdownItem,
    Category,
    CountMethod,
    DetailItem,
    Snapshot,
    SnapshotWarning,
    WarningCode,
)
from .reconcile import apportion

# Human-readable, content-free explanations of each warning code.
WARNING_MESSAGES: dict[WarningCode, str] = {
    WarningCode.APPROXIMATE_TOKENIZER: "the provider's tokenizer is not available offline; counts are an approximation",
    WarningCode.TOOL_SOURCE_INFERRED: "a tool without a source tag was classified by its name prefix",
    WarningCode.NON_TEXT_CONTENT_NOT_ESTIMATED: "images, audio or files are not estimated from their bytes",
    WarningCode.UNKNOWN_CONTEXT_WINDOW: "the model's context window is unknown; set it with context_windows",
    WarningCode.MOCK_USAGE_NOT_RECONCILED: "mock_response usage is synthetic; the local estimate stands",
    WarningCode.USAGE_MISSING: "the response carried no usage; the local estimate stands",
    WarningCode.PROVIDER_UNCONFIGURED: "no provider credentials for a token count; the local estimate stands",
    WarningCode.PROVIDER_COUNT_FAILED: "the provider token count failed; the local estimate stands",
    WarningCode.PROVIDER_COUNT_TIMEOUT: "the provider token count timed out; the local estimate stands",
    WarningCode.PROVIDER_COUNT_DROPPED: "the provider token count queue was full; the count was skipped",
    WarningCode.ESTIMATE_FAILED: "the local estimate failed for this request; see the middleware log",
    WarningCode.DETAILS_TRUNCATED: "only the largest sources are listed in details",
    WarningCode.NOT_OBSERVED: "no snapshot has been recorded for this stage yet",
    WarningCode.NOT_AGENT_STAGE: "this stage does not call a model",
}

_event_seq = itertools.count(1)


def next_event_seq() -> int:
    return next(_event_seq)


def make_warnings(codes: Iterable[WarningCode]) -> list[SnapshotWarning]:
    return [_warning(code) for code in sorted(set(codes), key=lambda c: c.value)]


# Snapshot parts are frozen pydantic models, and most of them repeat from one
# request to the next (the system prompt and tools do not change every turn):
# sharing the instances keeps snapshot building off the call path's profile.
_PARTS_CACHE_SIZE = 4096
_parts: dict[tuple[object, ...], object] = {}


def _shared(key: tuple[object, ...], make: "type[BreakdownItem] | type[DetailItem] | type[SnapshotWarning]", **fields: object):  # type: ignore[no-untyped-def]
    item = _parts.get(key)
    if item is None:
        if len(_parts) >= _PARTS_CACHE_SIZE:
            _parts.clear()
        item = _parts[key] = make.model_construct(**fields)
    return item


def _warning(code: WarningCode) -> SnapshotWarning:
    return _shared(("w", code), SnapshotWarning, code=code.value, message=WARNING_MESSAGES[code])


@dataclass(frozen=True)
class RequestMeta:
    """What a snapshot says about its request besides the numbers."""

    run_id: Optional[str]
    stage_id: Optional[str]
    provider: Optional[str]
    model: Optional[str]
    context_window_tokens: Optional[int]


def build_snapshot(
    by_source: Mapping[tuple[Category, str], int],
    meta: RequestMeta,
    count_method: CountMethod,
    warnings: Iterable[WarningCode] = (),
    total: Optional[int] = None,
    max_details: int = 20,
) -> Snapshot:
    """A snapshot of ``by_source``, rescaled to ``total`` when one is given."""
    if total is not None:
        by_source = apportion(by_source, total, remainder_key=(Category.OTHER, "unattributed"))
    per_category = dict.fromkeys(CATEGORIES, 0)
    for (category, _), tokens in by_source.items():
        per_category[category] += tokens
    input_tokens = sum(per_category.values())
    window = meta.context_window_tokens
    codes = set(warnings)
    ranked = sorted(by_source.items(), key=lambda item: (-item[1], item[0][0].value, item[0][1]))
    if len(ranked) > max_details:
        codes.add(WarningCode.DETAILS_TRUNCATED)
    return Snapshot.model_construct(
        run_id=meta.run_id,
        stage_id=meta.stage_id,
        provider=meta.provider,
        model=meta.model,
        context_window_tokens=window,
        input_tokens=input_tokens,
        usage_percent=_percent(input_tokens, window),
        count_method=count_method,
        generated_at=datetime.now(timezone.utc),
        event_seq=next_event_seq(),
        breakdown=[
            _shared(("b", c, t, window), BreakdownItem, category=c, tokens=t, usage_percent=_percent(t, window))
            for c, t in per_category.items()
        ],
        warnings=make_warnings(codes),
        details=[_shared(("d", c, s, t), DetailItem, category=c, source=s, tokens=t) for (c, s), t in ranked[:max_details] if t],
    )


def _percent(tokens: int, window: Optional[int]) -> Optional[float]:
    return round(100.0 * tokens / window, 4) if window else None
