"""How cw writes for people: token counts, shares of a window, US dollars, and each category's name, letter and colour.

One rule for every view: the terminal (``show``, ``statusline``), the notebook view
(``notebook.py``) and the live page, whose ``format.js`` and ``app.css`` follow it (tests
compare them).
"""

from __future__ import annotations

import math
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
    """``$12.34`` from a dollar up, ``$0.0123`` (four decimals) below, two significant digits below a hundredth of a
    cent (``$0.000077``: a cost is never written as zeros), ``$0`` for none at all, ``-`` without a price. The one
    rule for every view (the live page's format.js ``usd`` and the element's agree)."""
    if value is None:
        return "-"
    if value == 0:
        return "$0"
    if value >= 1:
        return f"${value:,.2f}"
    if value >= 0.0001:
        return f"${value:.4f}"
    return f"${value:.{1 - math.floor(math.log10(value))}f}"


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
