"""A run over its stages: each stage's latest request and totals, and the run's totals summed from them.

Built on the reader protocol alone (`stages`, then `latest` for each), so every backend answers it
as far as it can answer those: a trace backend in full, a metrics backend with what its answers carry.
Its suggestions are the stages' (`suggestions_from` on each latest answer) summed per (kind, target)
by `run_suggestions`; a stage's near_threshold belongs to its own forecast and is left out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from .._kernel.contract import (
    CATEGORIES,
    CategoryTotals,
    RunReport,
    StageContextWindow,
    StageRow,
    StageTotals,
    Suggestion,
    SuggestionKind,
)
from .fold import StageSummary
from .suggestions import run_suggestions, suggestions_from


class StagePart(BaseModel):
    """What a run's summary takes of one stage's answer: its row's numbers and its suggestions (near_threshold left
    out). A function of the lines that name the stage, so the file index keeps it as of the newest one (JSON)."""

    model_config = ConfigDict(frozen=True)

    available: bool
    model: Optional[str] = None
    input_tokens: Optional[int] = None
    usage_percent: Optional[float] = None
    stage_totals: Optional[StageTotals] = None
    suggestions: list[Suggestion] = Field(default_factory=list)


def stage_part(window: Optional[StageContextWindow]) -> Optional[StagePart]:
    """The part of a stage's answer (`Reader.context_window`'s) a run's summary shows; None for no answer."""
    if window is None:
        return None
    advice = (window.suggestions or suggestions_from(window)) if window.available else []
    return StagePart(
        available=window.available,
        model=window.model,
        input_tokens=window.input_tokens,
        usage_percent=window.usage_percent,
        stage_totals=window.stage_totals,
        suggestions=[s for s in advice if s.kind is not SuggestionKind.NEAR_THRESHOLD],
    )


def run_report(run_id: str, stages: Iterable[tuple[StageSummary, Optional[StagePart]]]) -> RunReport:
    """The run's summary from its stages (in the listing's order) and each one's part (`stage_part`; None: none).

    The run is a tree where stages name a parent (sub-agents): each row says its parent and children, and a
    parent's row has its totals rolled up with all its descendants' (`rolled_up`); the run's totals count
    each stage once."""
    rows = []
    model = None
    suggested: list[list[Suggestion]] = []
    totals_of: dict[str, Optional[StageTotals]] = {}
    pairs = list(stages)
    children: dict[str, list[str]] = {}
    for summary, _ in pairs:
        if summary.parent_stage_id is not None:
            children.setdefault(summary.parent_stage_id, []).append(summary.stage_id)
    for summary, part in pairs:
        totals = part.stage_totals if part is not None else None
        if part is not None and part.available:
            suggested.append(part.suggestions)
        rows.append(
            StageRow(
                stage_id=summary.stage_id,
                kind=summary.kind,
                staleness=summary.staleness,
                available=bool(part is not None and part.available),
                model=part.model if part is not None else None,
                input_tokens=part.input_tokens if part is not None else None,
                usage_percent=part.usage_percent if part is not None else None,
                stage_totals=totals,
                parent_stage_id=summary.parent_stage_id,
                child_stage_ids=children.get(summary.stage_id, []),
            )
        )
        totals_of[summary.stage_id] = totals
        if part is not None and part.model:
            model = part.model
    rows = [_rolled_up(row, totals_of, children) if row.child_stage_ids else row for row in rows]
    run_totals = sum_totals([t for t in totals_of.values() if t is not None])
    return RunReport(run_id=run_id, stages=rows, totals=run_totals, model=model, suggestions=run_suggestions(suggested))


def _rolled_up(row: StageRow, own: dict[str, Optional[StageTotals]], children: dict[str, list[str]]) -> StageRow:
    """A parent's row with its own and every descendant's totals added up (each stage once, whatever the depth)."""
    seen, todo, parts = {row.stage_id}, list(row.child_stage_ids), [own.get(row.stage_id)]
    while todo:
        stage_id = todo.pop()
        if stage_id in seen:
            continue  # a parent named in a cycle: each stage counts once
        seen.add(stage_id)
        parts.append(own.get(stage_id))
        todo.extend(children.get(stage_id, []))
    return row.model_copy(update={"rolled_up": sum_totals([t for t in parts if t is not None])})


def sum_totals(parts: list[StageTotals]) -> StageTotals:
    """Stages' totals added up: calls, tokens, cost, cached tokens and compactions summed; the peak the highest."""
    calls = input_tokens = cached = compactions = 0
    cost: Optional[float] = None
    peak: Optional[float] = None
    tokens = dict.fromkeys(CATEGORIES, 0)
    costs: dict = dict.fromkeys(CATEGORIES, None)
    cached_by = dict.fromkeys(CATEGORIES, 0)
    for totals in parts:
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
    return StageTotals(
        calls=calls,
        input_tokens=input_tokens,
        input_cost=_usd(cost),
        peak_usage_percent=peak,
        by_category=by_category,
        cached_tokens=cached,
        compactions=compactions,
    )


def _usd(value: Optional[float]) -> Optional[float]:
    return round(value, 10) if value is not None else None
