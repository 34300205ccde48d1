"""Terminal rendering of a breakdown, in the spirit of Claude Code's /context.

Works on a `Snapshot` or a `StageContextWindow`: a bar of the window, then each
category with its tokens and its share of the window, the free space, the top
sources and the warnings. The bar is drawn to scale: a category smaller than one
cell claims none (it would overstate a 0.1% share as 2%) and is named after the
bar instead. A request larger than its window is said to not fit, in words.
No LiteLLM import, so the read-side CLI starts fast. Only numbers, enum values
and caller-chosen source labels are printed.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from .._kernel.contract import CATEGORIES, Snapshot, StageContextWindow
from .._kernel.formats import GLYPH, LABEL, format_tokens
from .render_usage import category_extra, usage_lines

BAR_WIDTH = 50
_GLYPH = GLYPH
_FREE = "·"
_LABEL = LABEL


_fmt = format_tokens


def _bar(tokens: dict[str, int], scale: int) -> tuple[str, list[str]]:
    """(bar, categories too small for a cell): largest-remainder cells, so the glyphs add up to the used share.

    No category is promoted to a cell it has not earned; the ones that got none are returned
    so the caller can name them beside the bar without taking space from the free part.
    """
    raw = {c: BAR_WIDTH * tokens.get(c, 0) / scale for c in _GLYPH}
    cells = {c: int(v) for c, v in raw.items()}
    used = min(BAR_WIDTH, round(BAR_WIDTH * sum(tokens.values()) / scale))
    for c in sorted(raw, key=lambda c: raw[c] - cells[c], reverse=True):
        if sum(cells.values()) >= used:
            break
        if raw[c] > cells[c]:
            cells[c] += 1
    bar = "".join(_GLYPH[c.value] * cells[c.value] for c in CATEGORIES)
    unseen = [c.value for c in CATEGORIES if tokens.get(c.value, 0) > 0 and cells[c.value] == 0]
    return bar[:BAR_WIDTH].ljust(BAR_WIDTH, _FREE), unseen


def _model_label(provider: Optional[str], model: Optional[str]) -> str:
    """``provider/model``, without doubling a provider the model string already names (``openai/my-model``)."""
    name = model or "?"
    if not provider or name.lower().startswith(provider.lower() + "/"):
        return name
    return f"{provider}/{name}"


def render(view: Union[Snapshot, StageContextWindow], title: str = "", top_sources: int = 8) -> str:
    lines = []
    if title:
        lines.append(title)
    if isinstance(view, StageContextWindow) and not view.available:
        reason = view.unavailable_reason.value if view.unavailable_reason else "unavailable"
        lines.append(f"  no context-window data: {reason}")
        lines.extend(f"  ! {w.code}: {w.message}" for w in view.warnings)
        return "\n".join(lines)
    total = view.input_tokens or 0
    window = view.context_window_tokens
    tokens = {item.category.value: item.tokens for item in view.breakdown}
    scale = max(window or 0, total) or 1
    used = (
        f"{_fmt(total)} / {_fmt(window)} tokens ({100 * total / window:.1f}%)"
        if window
        else f"{_fmt(total)} tokens (window unknown)"
    )
    lines.append(f"  {_model_label(view.provider, view.model)}  {used}")
    bar, small = _bar(tokens, scale)
    beside = f"  also: {' '.join(_GLYPH[c] for c in small)} (under one cell each)" if small else ""
    lines.append(f"  [{bar}]{beside}")
    if window and total > window:
        lines.append(
            f"  ! does not fit: {_fmt(total)} input tokens exceed the {_fmt(window)}-token window by "
            f"{_fmt(total - window)} ({total / window:.1f}x); the provider will reject or truncate this request"
        )
    meta = [f"count: {view.count_method.value if view.count_method else '?'}"]
    if isinstance(view, StageContextWindow):
        meta.append(f"staleness: {view.staleness.value}")
    if view.generated_at:
        meta.append(f"at {view.generated_at.isoformat(timespec='seconds')}")
    lines.append("  " + "   ".join(meta))
    lines.append("")
    for category in CATEGORIES:
        n = tokens.get(category.value, 0)
        share = f"{100 * n / window:5.1f}%" if window else f"{100 * n / (total or 1):5.1f}% of input"
        extra = category_extra(view, category.value)
        lines.append(f"  {_GLYPH[category.value]} {_LABEL[category.value]:<15} {_fmt(n):>9} tokens  {share}{extra}")
    if window:
        free = max(window - total, 0)
        lines.append(f"  {_FREE} {'Free space':<15} {_fmt(free):>9} tokens  {100 * free / window:5.1f}%")
    if view.details:
        lines.append("")
        lines.append("  Top sources")
        for d in view.details[:top_sources]:
            share = f"{100 * d.tokens / window:5.1f}%" if window else ""
            lines.append(f"    {_GLYPH[d.category.value]} {d.source:<32} {_fmt(d.tokens):>9}  {share}")
        if len(view.details) > top_sources:
            lines.append(f"    … {len(view.details) - top_sources} more")
    lines.extend(usage_lines(view))
    if view.warnings:
        lines.append("")
    for w in view.warnings:
        lines.append(f"  ! {w.code}: {w.message}")
    return "\n".join(lines)


def render_stages(run_id: str, stages: list[Any]) -> str:
    lines = [f"run {run_id}: {len(stages)} stage(s)", f"  {'stage':<32} {'kind':<10} {'state':<8} started"]
    for s in stages:
        started = s.started_at.isoformat(timespec="seconds") if s.started_at else "?"
        lines.append(f"  {s.stage_id:<32} {s.kind or '?':<10} {s.staleness.value:<8} {started}")
    return "\n".join(lines)


def render_runs(runs: list[Any]) -> str:
    lines = [f"{len(runs)} run(s), newest activity first", f"  {'run':<40} {'stages':>6} {'live':>5}  last seen"]
    for r in runs:
        last = r.last_seen_at.isoformat(timespec="seconds") if r.last_seen_at else "?"
        lines.append(f"  {r.run_id:<40} {r.stages:>6} {r.live_stages:>5}  {last}")
    return "\n".join(lines)
