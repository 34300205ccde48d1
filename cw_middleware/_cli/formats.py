"""How the terminal and the live page write numbers: tokens, shares of a window, US dollars (format.js follows it)."""

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
