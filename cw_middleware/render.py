"""Terminal rendering of a breakdown, in the spirit of Claude Code's /context.

Works on a `Snapshot` or a `StageContextWindow`; no LiteLLM import, so the
read-side CLI stays fast to start.
"""

from __future__ import annotations

from typing import Union

from .contract import CATEGORIES, Snapshot, StageContextWindow

BAR_WIDTH = 40
_GLYPH = {
    "system_prompt": "S",
    "tools": "T",
    "mcp_tools": "M",
    "skills": "K",
    "memory": "Y",
    "conversation": "C",
    "other": "O",
}


def _fmt(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 10_000 else f"{n:,}"


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
    scale = window or total or 1
    bar = ""
    for category in CATEGORIES:
        bar += _GLYPH[category.value] * round(BAR_WIDTH * tokens.get(category.value, 0) / scale)
    bar = bar[:BAR_WIDTH].ljust(BAR_WIDTH, "·")
    used = f"{_fmt(total)} / {_fmt(window)} tokens ({100 * total / window:.1f}%)" if window else f"{_fmt(total)} tokens (window unknown)"
    lines.append(f"  {view.model or '?'}  [{bar}]  {used}")
    lines.append(f"  count: {view.count_method.value if view.count_method else '?'}" + (f"   seq {view.event_seq}" if view.event_seq else ""))
    for category in CATEGORIES:
        n = tokens.get(category.value, 0)
        share = f"{100 * n / window:5.1f}% of window" if window else f"{100 * n / (total or 1):5.1f}% of input"
        lines.append(f"  {_GLYPH[category.value]} {category.value:<14} {_fmt(n):>9}  {share}")
    if window:
        free = max(window - total, 0)
        lines.append(f"  · {'free space':<14} {_fmt(free):>9}  {100 * free / window:5.1f}% of window")
    if view.details:
        lines.append("  top sources:")
        for d in view.details[:top_sources]:
            lines.append(f"    {d.category.value:<14} {d.source:<28} {_fmt(d.tokens):>9}")
    for w in view.warnings:
        lines.append(f"  ! {w.code}: {w.message}")
    return "\n".join(lines)
