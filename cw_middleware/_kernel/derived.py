"""A stage's numbers derived from its calls: one function each, wherever they are asked.

The writer's ledger (`_snapshots/ledger.py`) and every reader (`_readback/`) derive a stage's
forecast with `forecast_from`, and a reader its totals with `stage_totals_from`, so that a
stage's totals, peak and forecast are one function of what the backend holds, whichever
process wrote it and whichever view reads it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Optional

from .contract import CATEGORIES, DEFAULT_THRESHOLD_PERCENT, Category, CategoryTotals, Forecast, HistoryPoint, StageTotals

FORECAST_CALLS = 9  # the newest calls a forecast reads: eight steps of growth


def forecast_from(
    input_tokens: list[int], window: Optional[int], threshold_percent: float = DEFAULT_THRESHOLD_PERCENT
) -> Optional[Forecast]:
    """The forecast of a stage from its calls' final input tokens, oldest first; None without a window or two calls.

    The growth is the median of the positive steps between consecutive calls among the newest
    `FORECAST_CALLS`: a compaction (a step down) is not growth, and one outlier step moves a median
    little. The calls left are counted from the newest call's input: to the threshold (0 when it is
    there already) and to the window, rounded up; None where the stage does not grow.
    """
    recent = input_tokens[-FORECAST_CALLS:]
    if not window or len(recent) < 2:
        return None
    steps = sorted(b - a for a, b in zip(recent, recent[1:]) if b > a)
    middle = len(steps) // 2  # the median, as statistics.median takes it (not imported for one line: ~0.1 MB)
    growth = int(steps[middle] if len(steps) % 2 else (steps[middle - 1] + steps[middle]) / 2) if steps else 0
    current = recent[-1]
    until_threshold = until_full = None
    if growth > 0:
        until_threshold = math.ceil(max(0.0, window * threshold_percent / 100.0 - current) / growth)
        until_full = math.ceil(max(0, window - current) / growth)
    return Forecast(
        growth_per_call_tokens=growth,
        calls_until_threshold=until_threshold,
        calls_until_full=until_full,
        threshold_percent=threshold_percent,
        basis_calls=len(recent),
    )


def stage_totals_from(calls: Sequence[HistoryPoint]) -> StageTotals:
    """A stage so far from its calls as the backend holds them: each call once, at its latest number.

    One function wherever it is asked (the reader's answer, ``show``, ``summary``, the page, the API), so a
    stage's totals are the same whichever process wrote its calls: the calls, their input tokens and cost,
    the peak (the largest final share of the window: an estimate a provider's count overruled is not a
    peak), per category the tokens, cost and cached tokens, and the compactions.
    """
    priced = [c for c in calls if c.input_cost is not None]
    tokens = dict.fromkeys(CATEGORIES, 0)
    cached = dict.fromkeys(CATEGORIES, 0)
    costs: dict[Category, Optional[float]] = dict.fromkeys(CATEGORIES, 0.0 if priced else None)
    for call in calls:
        for item in call.breakdown:
            tokens[item.category] += item.tokens
            cached[item.category] += item.cached_tokens or 0
        for category, cost in call.cost_by_category.items():
            costs[category] = (costs[category] or 0.0) + cost
    peaks = [c.usage_percent for c in calls if c.usage_percent is not None]
    return StageTotals(
        calls=len(calls),
        input_tokens=sum(c.input_tokens for c in calls),
        input_cost=round(sum(c.input_cost or 0.0 for c in priced), 10) if priced else None,
        peak_usage_percent=max(peaks) if peaks else None,
        by_category={
            c: CategoryTotals(
                tokens=tokens[c], cost=None if costs[c] is None else round(costs[c] or 0.0, 10), cached_tokens=cached[c]
            )
            for c in CATEGORIES
        },
        cached_tokens=sum(c.cached_tokens or 0 for c in calls),
        compactions=sum(1 for c in calls if c.compaction is not None),
    )
