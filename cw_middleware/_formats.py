"""How cw writes for people: token counts, shares of a window, US dollars, and each category's name, letter and colour.

One rule for every view: the terminal (``show``, ``statusline``), the notebook view
(``_notebook.py``) and the live page, whose ``format.js`` and ``app.css`` follow it (tests
compare them).
"""

from __future__ import annotations

from typing import Optional


def format_tokens(n: int) -> str:
    """``1,234``, ``12.3k``, ``1.2M``: the one rule for token counts (the live page's format.js follows it)."""
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M"
    return f"{n / 1000:.1f}k" if n >= 10_000 else f"{n:,}"


def format_percent(part: int, whole: int) -> str:
    """``12.3%`` of ``whole``, one decimal (format.js's ``percent``)."""
    return f"{100 * part / whole:.1f}%"


def format_usd(value: Optional[float]) -> str:
    """``$0.0123``: four decimals under a dollar (six under a hundredth of a cent), cents above; ``-`` without a price."""
    if value is None:
        return "-"
    if value >= 1:
        return f"${value:,.2f}"
    return f"${value:.4f}" if value >= 0.0001 or value == 0 else f"${value:.6f}"


# Each category's name, the letter that stands for it where colour cannot (a terminal's bar), and its
# colour: the Okabe-Ito palette, apart under the common colour-vision deficiencies (the page's app.css).
LABEL = {
    "system_prompt": "System prompt",
    "tools": "Tools",
    "mcp_tools": "MCP tools",
    "skills": "Skills",
    "memory": "Memory",
    "conversation": "Conversation",
    "other": "Other",
}
GLYPH = {"system_prompt": "S", "tools": "T", "mcp_tools": "M", "skills": "K", "memory": "Y", "conversation": "C", "other": "O"}
COLOUR = {
    "system_prompt": "#E69F00",
    "tools": "#56B4E9",
    "mcp_tools": "#009E73",
    "skills": "#F0E442",
    "memory": "#0072B2",
    "conversation": "#D55E00",
    "other": "#CC79A7",
    "free": "#f1f1f1",
}
