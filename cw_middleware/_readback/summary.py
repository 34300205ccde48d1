"""A run over its stages: each stage's latest request and totals, and the run's totals summed from them.

Built on the reader protocol alone (`stages`, then `latest` for each), so every backend answers it
as far as it can answer those: a trace backend in full, a metrics backend with what its answers carry.
Its suggestions are the stages' (`suggestions_from` on each latest answer) summed per (kind, target)
by `run_suggestions`; a stage's near_threshold belongs to its own forecast and is left out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

from .._contract import (
    CATEGORIES,
    CategoryTotals,
    RunReport,
    StageContextWindow,
    StageRow,
    StageTotals,
    Suggestion,
    SuggestionKind,
    run_suggestions,
    suggestions_from,
)
from .fold import StageSummary


def run_report(run_id: str, stages: Iterable[tuple[StageSummary, Optional[StageContextWindow]]]) -> RunReport:
    """The run's summary from its stages (in the listing's order) and each one's answer (None: none)."""
    rows = []
    calls = input_tokens = cached = compactions = 0
    cost: Optional[float] = None
    peak: Optional[float] = None
    tokens = dict.fromkeys(CATEGORIES, 0)
    costs: dict = dict.fromkeys(CATEGORIES, None)
    cached_by = dict.fromkeys(CATEGORIES, 0)
    model = None
    suggested: list[list[Suggestion]] = []
    for summary, window in stages:
        totals = window.stage_totals if window is not None else None
        if window is not None and window.available:
            own = window.suggestions or suggestions_from(window)
            suggested.append([s for s in own if s.kind is not SuggestionKind.NEAR_THRESHOLD])
        rows.append(
            StageRow(
                stage_id=summary.stage_id,
                kind=summary.kind,
                staleness=summary.staleness,
                available=bool(window is not None and window.available),
                model=window.model if window is not None else None,
                input_tokens=window.input_tokens if window is not None else None,
                usage_percent=window.usage_percent if window is not None else None,
                stage_totals=totals,
            )
        )
        if window is not None and window.model:
            model = window.model
        if totals is None:
            continue
        calls += totals.calls or 0
        input_tokens += totals.input_tokens or 0
        cached += totals.cached_tokens
        compactions += totals.compactions
        if totals.input_cost is not None:
            cost = (cost or 0.0) + totals.input_cost
        if totals.peak_usage_percent is not None:
            peak = max(peak or 0.0, totals.peak_usage_percent)
        for category, ct in totals.by_category.items():
            tokens[category] += ct.tokens
            cached_by[category] += ct.cached_tokens
            if ct.cost is not None:
                costs[category] = (costs[category] or 0.0) + ct.cost
    by_category = {c: CategoryTotals(tokens=tokens[c], cost=_usd(costs[c]), cached_tokens=cached_by[c]) for c in CATEGORIES}
    run_totals = StageTotals(
        calls=calls,
        input_tokens=input_tokens,
        input_cost=_usd(cost),
        peak_usage_percent=peak,
        by_category=by_category,
        cached_tokens=cached,
        compactions=compactions,
    )
    return RunReport(run_id=run_id, stages=rows, totals=run_totals, model=model, suggestions=run_suggestions(suggested))


def _usd(value: Optional[float]) -> Optional[float]:
    return round(value, 10) if value is not None else None
