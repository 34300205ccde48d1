"""A snapshot or a stage's answer in a notebook: HTML for Jupyter (``_repr_html_``), text for IPython's terminal.

What the live page's stage view shows, in one static block: the window to scale (a bar whose
segments are the categories' shares of the model's window, the rest free), the categories
(tokens, share of the window, cost), the top sources, and for a stage's answer its forecast and
its first suggestions. No script, no stylesheet link, nothing fetched: inline styles only, so it
renders the same in Jupyter, VS Code, a static nbviewer page and a GitHub preview, and every
value is escaped (ids and source labels are data, never markup). The numbers and names are
written by `_kernel/formats.py`, the one rule the terminal and the page follow.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Optional, Union

from .formats import COLOUR, LABEL, format_tokens, format_usd

if TYPE_CHECKING:
    from .contract import Snapshot, StageContextWindow

    Shown = Union[Snapshot, StageContextWindow]

TOP_SOURCES = 8
TOP_SUGGESTIONS = 3


def _share(tokens: int, window: Optional[int]) -> str:
    return f"{100 * tokens / window:.1f}%" if window else "-"


def _category_costs(item: Shown) -> dict[str, Optional[float]]:
    return {} if item.cost is None else {c.value: v for c, v in item.cost.by_category.items()}


def _title(item: Shown) -> tuple[str, str]:
    stage = item.stage_id or "(no stage)"
    run = getattr(item, "run_id", None)
    model = "/".join(x for x in (item.provider, item.model) if x) or "model unknown"
    return f"{run} / {stage}" if run else stage, model


def html_view(item: Shown) -> str:
    """The HTML block (module docstring); an unavailable stage says why, in one line."""
    title, model = _title(item)
    head = (
        f'<div style="font-family:system-ui,sans-serif;max-width:44rem;line-height:1.4">'
        f'<div style="font-weight:600">{escape(title)} <span style="font-weight:400;color:#5a5a5a">{escape(model)}</span></div>'
    )
    if getattr(item, "available", True) is False or item.input_tokens is None:
        reason = getattr(item, "unavailable_reason", None)
        why = reason.value.replace("_", " ") if reason is not None else "no snapshot"
        return head + f'<div style="color:#5a5a5a">unavailable: {escape(why)}</div></div>'
    window = item.context_window_tokens
    total = item.input_tokens
    scale = max(window or 0, total) or 1
    tokens = {b.category.value: b.tokens for b in item.breakdown}
    costs = _category_costs(item)
    used = (
        f"{format_tokens(total)} / {format_tokens(window)} tokens ({_share(total, window)})"
        if window
        else f"{format_tokens(total)} tokens"
    )
    parts = [head, f"<div>{escape(used)} &middot; {escape(item.count_method.value if item.count_method else '')}</div>"]
    # The window to scale: each category's share, then what is free.
    segments = "".join(
        f'<span title="{escape(LABEL[c])}: {escape(format_tokens(n))}" '
        f'style="display:inline-block;height:100%;width:{100 * n / scale:.3f}%;background:{COLOUR[c]}"></span>'
        for c, n in tokens.items()
        if n > 0
    )
    parts.append(
        f'<div role="img" aria-label="{escape(used)}" style="height:0.9rem;width:100%;background:{COLOUR["free"]};'
        f'border:1px solid #d0d0d0;margin:0.3rem 0;white-space:nowrap;overflow:hidden;line-height:0">{segments}</div>'
    )
    rows = "".join(
        f'<tr><td><span style="display:inline-block;width:0.7rem;height:0.7rem;background:{COLOUR[c]}"></span> '
        f'{escape(LABEL[c])}</td><td style="text-align:right">{escape(format_tokens(n))}</td>'
        f'<td style="text-align:right">{escape(_share(n, window))}</td>'
        f'<td style="text-align:right">{escape(format_usd(costs.get(c)) if costs else "-")}</td></tr>'
        for c, n in tokens.items()
    )
    parts.append(
        '<table style="border-collapse:collapse;font-variant-numeric:tabular-nums">'
        '<thead><tr><th style="text-align:left">category</th><th>tokens</th><th>of window</th><th>cost</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>"
    )
    sources = _top_sources(item)
    if sources:
        listed = "".join(f"<li>{escape(name)}: {escape(format_tokens(n))}</li>" for name, n in sources)
        parts.append(f'<div style="margin-top:0.3rem">Top sources<ul style="margin:0">{listed}</ul></div>')
    for line in _advice(item):
        parts.append(f'<div style="margin-top:0.3rem">{escape(line)}</div>')
    return "".join(parts) + "</div>"


def _top_sources(item: Shown) -> list[tuple[str, int]]:
    by_source: dict[str, int] = {}
    for d in item.details:
        by_source[d.source] = by_source.get(d.source, 0) + d.tokens
    return sorted(by_source.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_SOURCES]


def _advice(item: Shown) -> list[str]:
    """The forecast and the first suggestions of a stage's answer (a snapshot has neither)."""
    lines = []
    forecast = getattr(item, "forecast", None)
    if forecast is not None and forecast.calls_until_threshold is not None:
        lines.append(
            f"Forecast: +{format_tokens(forecast.growth_per_call_tokens)} tokens a call; "
            f"{forecast.threshold_percent:g}% in {forecast.calls_until_threshold} call(s)"
        )
    for s in list(getattr(item, "suggestions", None) or [])[:TOP_SUGGESTIONS]:
        lines.append(f"Suggestion: {s.message}")
    return lines


def text_view(item: Shown) -> str:
    """A few plain lines: the title, the window, the categories (IPython's terminal, a plain console)."""
    title, model = _title(item)
    if getattr(item, "available", True) is False or item.input_tokens is None:
        reason = getattr(item, "unavailable_reason", None)
        return f"{title} ({model}): unavailable: {reason.value if reason is not None else 'no snapshot'}"
    window = item.context_window_tokens
    total = item.input_tokens
    head = f"{title} ({model}): {format_tokens(total)}" + (
        f" / {format_tokens(window)} tokens ({_share(total, window)})" if window else " tokens"
    )
    rows = [f"  {LABEL[b.category.value]:<14}{format_tokens(b.tokens):>9}  {_share(b.tokens, window):>6}" for b in item.breakdown]
    return "\n".join([head, *rows, *(f"  {line}" for line in _advice(item))])
