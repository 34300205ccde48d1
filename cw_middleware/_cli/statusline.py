"""One line for status bars (shell prompts, tmux, an agent's status line): a stage's window at a glance.

``ctx 45% 57.6k/128k · mcp 30.2k (23 unused) · tools 12.1k · ≈8 calls to 80% · $0.42``: the window's
share and tokens, the two largest categories after the conversation (with their definitions no call
used), the forecast, and the stage's input cost so far. At most `MAX_WIDTH` characters: what does not
fit is left off from the end. `statusline_object` is the same as one JSON object (``--json``).
"""

from __future__ import annotations

from typing import Any, Optional

from .._kernel.contract import Category, StageContextWindow, never_called
from .._kernel.formats import format_tokens, format_usd

MAX_WIDTH = 100
SEPARATOR = " · "
SHORT = {
    Category.SYSTEM_PROMPT: "sys",
    Category.TOOLS: "tools",
    Category.MCP_TOOLS: "mcp",
    Category.SKILLS: "skills",
    Category.MEMORY: "mem",
    Category.CONVERSATION: "conv",
    Category.OTHER: "other",
}
_COLOURS = ((95.0, "\x1b[31m"), (80.0, "\x1b[33m"), (0.0, "\x1b[32m"))  # red, yellow, green; reset below
_RESET = "\x1b[0m"


def _unused(answer: StageContextWindow) -> dict[Category, int]:
    """Tools no call of the stage used, by their category (a folded row stands for others: not counted)."""
    counts: dict[Category, int] = {}
    for row in answer.tools:
        if never_called(row) and row.category is not None:
            counts[row.category] = counts.get(row.category, 0) + 1
    return counts


def statusline(answer: StageContextWindow, colour: bool = False) -> str:
    """The one line (see the module docstring)."""
    if not answer.available or answer.input_tokens is None:
        return "ctx —"
    used = format_tokens(answer.input_tokens)
    if answer.context_window_tokens and answer.usage_percent is not None:
        share = f"{answer.usage_percent:.0f}%"
        if colour:
            tint = next(code for bound, code in _COLOURS if answer.usage_percent >= bound)
            share = f"{tint}{share}{_RESET}"
        parts = [f"ctx {share} {used}/{format_tokens(answer.context_window_tokens)}"]
    else:
        parts = [f"ctx {used}"]
    unused = _unused(answer)
    largest = sorted(
        (b for b in answer.breakdown if b.tokens and b.category is not Category.CONVERSATION), key=lambda b: -b.tokens
    )
    for item in largest[:2]:
        note = f" ({unused[item.category]} unused)" if unused.get(item.category) else ""
        parts.append(f"{SHORT[item.category]} {format_tokens(item.tokens)}{note}")
    forecast = answer.forecast
    if forecast is not None and forecast.calls_until_threshold is not None:
        parts.append(f"≈{forecast.calls_until_threshold} calls to {forecast.threshold_percent:g}%")
    totals = answer.stage_totals
    if totals is not None and totals.input_cost is not None:
        parts.append(format_usd(totals.input_cost))
    return _fit(parts)


def _fit(parts: list[str]) -> str:
    """The parts joined, leaving parts off from the end until the line fits (colour codes take no width)."""
    while len(parts) > 1 and _width(SEPARATOR.join(parts)) > MAX_WIDTH:
        parts = parts[:-1]
    return SEPARATOR.join(parts)


def _width(text: str) -> int:
    for _, code in _COLOURS:
        text = text.replace(code, "")
    return len(text.replace(_RESET, ""))


def statusline_object(run_id: str, answer: StageContextWindow) -> dict[str, Any]:
    """The line's numbers as one JSON object, and the line itself (without colour)."""
    forecast = answer.forecast
    totals = answer.stage_totals
    cost: Optional[float] = totals.input_cost if totals is not None else None
    return {
        "run_id": run_id,
        "stage_id": answer.stage_id,
        "available": answer.available,
        "usage_percent": answer.usage_percent,
        "input_tokens": answer.input_tokens,
        "context_window_tokens": answer.context_window_tokens,
        "categories": {item.category.value: item.tokens for item in answer.breakdown},
        "unused_tools": {category.value: n for category, n in _unused(answer).items()},
        "calls_until_threshold": forecast.calls_until_threshold if forecast is not None else None,
        "threshold_percent": forecast.threshold_percent if forecast is not None else None,
        "stage_input_cost": cost,
        "line": statusline(answer),
    }
