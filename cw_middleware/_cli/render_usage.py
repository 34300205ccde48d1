"""Terminal rendering beyond the categories: which tool, what is unused, what it costs, what was cached, over time.

`render.render` prints a window's categories; this module adds the parts issue 21 brought
(`usage_lines` after them: the per-tool table, the unused definitions, the cost and the
stage so far) and draws a stage's history (`render_history`: one row per call, a bar to
scale, compactions marked) and a run's summary (`render_summary`). Numbers, enum values,
source labels and the names of defined tools only. No LiteLLM import.
"""

from __future__ import annotations

from typing import Union

from .._kernel.contract import (
    CATEGORIES,
    Forecast,
    HistoryPoint,
    RunReport,
    Snapshot,
    StageContextWindow,
    StageRow,
    StageTotals,
    Suggestion,
    never_called,
)
from .._kernel.formats import format_tokens as _fmt
from .._kernel.formats import format_usd

HISTORY_BAR = 40


def category_extra(view: Union[Snapshot, StageContextWindow], category: str) -> str:
    """The cost and cached share of one category, for its line in `render.render` ("" without either)."""
    parts = []
    if view.cost is not None:
        parts.append(f"{format_usd(view.cost.by_category.get(category)):>9}")  # type: ignore[call-overload]
    item = next((b for b in view.breakdown if b.category.value == category), None)
    if item is not None and item.cached_tokens is not None and item.tokens:
        parts.append(f"cached {100 * item.cached_tokens / item.tokens:3.0f}%")
    return ("  " + "  ".join(parts)) if parts else ""


def usage_lines(view: Union[Snapshot, StageContextWindow], top_tools: int = 20) -> list[str]:
    """The per-tool table, the unused definitions, the cost and cache, and the stage so far."""
    lines: list[str] = []
    if view.tools:
        lines += ["", "  Tools                           source              definition   results   invoked"]
        for t in view.tools[:top_tools]:
            if t.folded:
                name, source = f"(+{t.folded} more tools)", ""
            else:
                name = t.name + ("  (unused)" if never_called(t) else "")
                source = f"{t.category.value if t.category else ''}/{t.source or ''}"
            lines.append(
                f"    {name:<30} {source:<20} {_fmt(t.definition_tokens):>9} {_fmt(t.result_tokens):>9} {t.invocations:>8}x"
            )
        if len(view.tools) > top_tools:
            lines.append(f"    … {len(view.tools) - top_tools} more rows")
    unused = view.unused_tools if isinstance(view, StageContextWindow) else None
    if unused:
        per_request = sum(u.definition_tokens for u in unused)
        over = sum(u.stage_definition_tokens for u in unused)
        requests = max(u.requests for u in unused)
        lines.append("")
        lines.append(
            f"  Unused definitions: {len(unused)} tool(s) never called in the stage, {_fmt(per_request)} tokens a request, "
            f"{_fmt(over)} over its {requests} request(s)"
        )
        for u in unused[:top_tools]:
            lines.append(
                f"    {u.name:<30} {_fmt(u.definition_tokens):>9} a request  {_fmt(u.stage_definition_tokens):>9} in all"
            )
    money = []
    if view.cost is not None:
        money.append(f"this request {format_usd(view.cost.input_cost)} input ({view.cost.currency})")
    if view.cached_tokens is not None and view.input_tokens:
        share = 100 * view.cached_tokens / view.input_tokens
        money.append(f"cached {_fmt(view.cached_tokens)} of {_fmt(view.input_tokens)} ({share:.1f}%)")
    if money:
        lines += ["", "  Cost: " + "; ".join(money)]
    if view.stage_totals is not None:
        lines += ["", "  " + stage_line(view.stage_totals)]
    if view.compaction is not None:
        c = view.compaction
        lines.append(f"  ↓ this request was compacted: conversation {_fmt(c.before_tokens)} -> {_fmt(c.after_tokens)} tokens")
    if isinstance(view, StageContextWindow) and view.forecast is not None:  # a stage's answer: a snapshot has none
        lines.append("  " + forecast_line(view.forecast))
    if isinstance(view, StageContextWindow):
        lines += suggestion_lines(view.suggestions)
    return lines


def suggestion_lines(suggestions: list[Suggestion]) -> list[str]:
    """What to cut, largest saving first: a stage's (show) or a run's summed over its stages (summary)."""
    if not suggestions:
        return []
    return ["", "  Suggestions (largest saving first):", *(f"    - {s.message}" for s in suggestions)]


def forecast_line(f: Forecast) -> str:
    """When the window fills at the stage's recent growth, in one line."""
    threshold = f"{f.threshold_percent:g}%"
    if f.calls_until_threshold is None:
        return f"Forecast: not growing over its last {f.basis_calls} calls"
    when = "at the threshold now" if f.calls_until_threshold == 0 else f"≈{f.calls_until_threshold} call(s) to {threshold}"
    return (
        f"Forecast: +{_fmt(f.growth_per_call_tokens)} tokens a call (last {f.basis_calls} calls): {when}, "
        f"≈{f.calls_until_full} to a full window"
    )


def stage_line(t: StageTotals) -> str:
    parts = []
    if t.calls is not None:
        parts.append(f"{t.calls} call(s)")
    if t.input_tokens is not None:
        parts.append(f"{_fmt(t.input_tokens)} input tokens")
    parts.append(f"{format_usd(t.input_cost)} input")
    if t.peak_usage_percent is not None:
        parts.append(f"peak {t.peak_usage_percent:.1f}%")
    if t.cached_tokens and t.input_tokens:
        parts.append(f"cached {100 * t.cached_tokens / t.input_tokens:.1f}%")
    if t.compactions:
        parts.append(f"{t.compactions} compaction(s)")
    costly = sorted(((c.cost or 0.0, cat) for cat, c in t.by_category.items()), reverse=True)
    top = ", ".join(f"{cat.value} {format_usd(cost)}" for cost, cat in costly[:3] if cost)
    return "Stage so far: " + ", ".join(parts) + (f"  (most: {top})" if top else "")


def render_history(points: list[HistoryPoint], title: str = "") -> str:
    """The stage over time: one row per call, oldest first, a bar to scale (the window, else the largest)."""
    lines = [title] if title else []
    if not points:
        return "\n".join([*lines, "  no snapshots"])
    window = max((p.context_window_tokens or 0) for p in points)
    largest = max(p.input_tokens for p in points)
    # To the window while the stage fills a quarter of it; else to its largest request (a 128k bar of 1% is empty).
    on_window = window and largest >= window / 4
    scale = max(window, largest) if on_window else (largest or 1)
    lines.append(f"  {len(points)} call(s), oldest first; bar: tokens, to {'the window' if on_window else 'the largest request'}")
    lines.append(f"  {'#':>3} {'at':<8} {'tokens':>8} {'':<{HISTORY_BAR}} {'window':>7} {'cost':>9}")
    for i, p in enumerate(points, 1):
        cells = p.input_tokens * HISTORY_BAR / scale
        bar = ("█" * int(cells) + ("▌" if cells - int(cells) >= 0.5 else "")).ljust(HISTORY_BAR)
        at = p.generated_at.strftime("%H:%M:%S") if p.generated_at else "?"
        used = f"{p.usage_percent:6.1f}%" if p.usage_percent is not None else "      -"
        row = f"  {i:>3} {at:<8} {_fmt(p.input_tokens):>8} {bar} {used} {format_usd(p.input_cost):>9}"
        if p.compaction is not None:
            row += f"  ↓ compacted {_fmt(p.compaction.before_tokens)} -> {_fmt(p.compaction.after_tokens)}"
        lines.append(row)
    return "\n".join(lines)


def _as_tree(report: RunReport) -> list[tuple[StageRow, int]]:
    """The run's stages as a tree, in the listing's order: each stage followed by its sub-agents' (depth first)."""
    by_id = {s.stage_id: s for s in report.stages}
    out: list[tuple[StageRow, int]] = []
    placed: set[str] = set()

    def place(row: StageRow, depth: int) -> None:
        if row.stage_id in placed:
            return
        placed.add(row.stage_id)
        out.append((row, depth))
        for child in row.child_stage_ids:
            if child in by_id:
                place(by_id[child], depth + 1)

    for row in report.stages:
        if row.parent_stage_id is None or row.parent_stage_id not in by_id:
            place(row, 0)
    for row in report.stages:  # a cycle of parents: shown at the top, once
        place(row, 0)
    return out


def render_summary(report: RunReport) -> str:
    t = report.totals
    head = f"run {report.run_id}: {len(report.stages)} stage(s), " + stage_line(t).removeprefix("Stage so far: ")
    lines = [head + (f"  [{report.model}]" if report.model else "")]
    lines.append(f"  {'stage':<28} {'state':<7} {'calls':>5} {'latest':>8} {'window':>7} {'peak':>6} {'cost':>9}")
    for s, depth in _as_tree(report):
        st = s.stage_totals
        calls = str(st.calls) if st is not None and st.calls is not None else "-"
        peak = f"{st.peak_usage_percent:5.1f}%" if st is not None and st.peak_usage_percent is not None else "     -"
        used = f"{s.usage_percent:6.1f}%" if s.usage_percent is not None else "      -"
        latest = _fmt(s.input_tokens) if s.input_tokens is not None else "-"
        cost = format_usd(st.input_cost) if st is not None else "-"
        name = ("  " * (depth - 1) + "└ " if depth else "") + s.stage_id
        lines.append(f"  {name:<28} {s.staleness.value:<7} {calls:>5} {latest:>8} {used} {peak} {cost:>9}")
        if s.rolled_up is not None:
            r = s.rolled_up
            with_children = f"{r.calls or 0} call(s), {_fmt(r.input_tokens or 0)} input tokens, {format_usd(r.input_cost)}"
            lines.append(f"  {'  ' * depth}  with its {len(s.child_stage_ids)} sub-agent stage(s): {with_children}")
    lines.append("")
    lines.append(f"  {'category':<15} {'tokens':>9} {'cost':>9} {'cached':>7}")
    for category in CATEGORIES:
        ct = t.by_category.get(category)
        if ct is None or not ct.tokens:
            continue
        cached = f"{100 * ct.cached_tokens / ct.tokens:5.1f}%" if ct.tokens else "     -"
        lines.append(f"  {category.value:<15} {_fmt(ct.tokens):>9} {format_usd(ct.cost):>9} {cached:>7}")
    lines += suggestion_lines(report.suggestions)
    return "\n".join(lines)
