"""What to cut: a stage's suggestions from its answer, and a run's from its stages' (one function each, wherever asked).

A suggestion names what the stage sent and did not need -- a source's tools no call used, a tool whose
results fill the request, content sent more than once, a prefix the provider did not serve from its
cache, a forecast near the threshold -- with what it cost the stage so far (tokens, and USD at the
stage's own price per token of that category). The read-back wing asks for them when it answers a
stage (`Reader`) or sums a run (summary.py); the types they are made of are the contract's.
"""

from __future__ import annotations

from typing import Optional

from .._kernel.contract import Category, RepeatedContent, StageContextWindow, Suggestion, SuggestionKind, UnusedTool
from .._kernel.formats import format_usd

LARGE_RESULTS_SHARE = 0.25  # a tool's results above this share of the request are worth a look
NEAR_CALLS = 5  # a forecast this close to the threshold is a suggestion of its own


def suggestions_from(answer: StageContextWindow) -> list[Suggestion]:
    """What the stage's answer says to cut, largest saving first (one function, wherever it is asked)."""
    out = _unused_by_source(answer) + _large_results(answer) + _repeated(answer) + _cache_miss(answer)
    return _largest_first(out + _near_threshold(answer))


def _largest_first(out: list[Suggestion]) -> list[Suggestion]:
    return sorted(out, key=lambda s: (-s.tokens_in_stage, -s.tokens_per_request, s.kind.value, s.target))


def run_suggestions(stages: list[list[Suggestion]]) -> list[Suggestion]:
    """A run's suggestions: its stages' summed per (kind, target), largest saving first.

    Tokens and cost over the stages add up (a cost stays None only where no stage priced it);
    ``tokens_per_request`` is the largest of the stages'. The message is the summed numbers'.
    """
    groups: dict[tuple[SuggestionKind, str], list[Suggestion]] = {}
    for suggestions in stages:
        for s in suggestions:
            groups.setdefault((s.kind, s.target), []).append(s)
    out = []
    for (kind, target), items in groups.items():
        if len(items) == 1:
            out.append(items[0])
            continue
        in_stage = sum(s.tokens_in_stage for s in items)
        costs = [s.cost_in_stage for s in items if s.cost_in_stage is not None]
        cost = round(sum(costs), 10) if costs else None
        money = f", {format_usd(cost)}" if cost is not None else ""
        per_request = max(s.tokens_per_request for s in items)
        message = (
            f"{target}: {_KIND_WORDS[kind]} in {len(items)} stages: up to {per_request:,} tokens a request, "
            f"{in_stage:,} over the run{money}"
        )
        out.append(
            Suggestion(
                kind=kind,
                target=target,
                tokens_per_request=per_request,
                tokens_in_stage=in_stage,
                cost_in_stage=cost,
                message=message,
            )
        )
    return _largest_first(out)


_KIND_WORDS = {
    SuggestionKind.UNUSED_TOOLS: "tools never called",
    SuggestionKind.LARGE_TOOL_RESULTS: "results over a quarter of the request",
    SuggestionKind.REPEATED_CONTENT: "the same content sent more than once",
    SuggestionKind.CACHE_MISS: "a repeated prefix not served from the cache",
    SuggestionKind.NEAR_THRESHOLD: "near the threshold",
}


def _cost(answer: StageContextWindow, category: Optional[Category], tokens: int) -> Optional[float]:
    """What ``tokens`` of a category cost the stage, at its own USD a token (its cost over its tokens: cache discounts
    included); None where the stage has no price for it."""
    totals = answer.stage_totals
    got = totals.by_category.get(category) if totals is not None and category is not None else None
    if got is None or got.cost is None or not got.tokens:
        return None
    return round(tokens * got.cost / got.tokens, 10)


def _unused_by_source(answer: StageContextWindow) -> list[Suggestion]:
    groups: dict[str, list[UnusedTool]] = {}
    for tool in answer.unused_tools:
        groups.setdefault(tool.source or (tool.category.value if tool.category else "tools"), []).append(tool)
    defined: dict[str, int] = {}
    for row in answer.tools:
        if not row.folded and row.definition_tokens:
            key = row.source or (row.category.value if row.category else "tools")
            defined[key] = defined.get(key, 0) + 1
    out = []
    for source, tools in groups.items():
        per_request = sum(t.definition_tokens for t in tools)
        in_stage = sum(t.stage_definition_tokens for t in tools)
        cost = _cost(answer, tools[0].category, in_stage)
        requests = max(t.requests for t in tools)
        of = f" of {defined[source]}" if defined.get(source, 0) >= len(tools) else ""
        advice = "drop the server or defer its tools (tool search)" if source.startswith("mcp:") else "leave them out"
        money = f", {format_usd(cost)}" if cost is not None else ""
        message = (
            f"{source}: {len(tools)}{of} tool(s) never called: {per_request:,} tokens a request, "
            f"{in_stage:,} over {requests} request(s){money}; {advice}"
        )
        out.append(
            Suggestion(
                kind=SuggestionKind.UNUSED_TOOLS,
                target=source,
                tokens_per_request=per_request,
                tokens_in_stage=in_stage,
                cost_in_stage=cost,
                message=message,
            )
        )
    return out


def _large_results(answer: StageContextWindow) -> list[Suggestion]:
    rows = [r for r in answer.tools if r.result_tokens and not r.folded]
    if not answer.input_tokens or not rows:
        return []
    top = max(rows, key=lambda r: r.result_tokens)
    share = top.result_tokens / answer.input_tokens
    if share < LARGE_RESULTS_SHARE:
        return []
    calls = max(top.invocations, 1)
    cost = _cost(answer, Category.CONVERSATION, top.result_tokens)
    message = (
        f"{top.name}: its results hold {share:.0%} of the request ({top.result_tokens:,} tokens over {calls} call(s), "
        f"{top.result_tokens // calls:,} each): trim or summarise them before they go back"
    )
    return [
        Suggestion(
            kind=SuggestionKind.LARGE_TOOL_RESULTS,
            target=top.name,
            tokens_per_request=top.result_tokens,
            tokens_in_stage=top.result_tokens,
            cost_in_stage=cost,
            message=message,
        )
    ]


def _repeated(answer: StageContextWindow) -> list[Suggestion]:
    """One suggestion a target: its segments' duplicate copies, in the latest request and over the stage."""
    groups: dict[str, list[RepeatedContent]] = {}
    for item in answer.repeated:
        if item.stage_tokens > 0:
            groups.setdefault(item.target, []).append(item)
    out = []
    for target, items in groups.items():
        per_request = sum(i.tokens for i in items)
        in_stage = sum(i.stage_tokens for i in items)
        cost = _cost(answer, items[0].category, in_stage)
        money = f", {format_usd(cost)}" if cost is not None else ""
        requests = max(i.requests for i in items)
        copies = max(i.copies for i in items)
        now = f"{per_request:,} tokens a request ({copies} copies of a segment)" if per_request else "none in the latest request"
        message = (
            f"{target}: {len(items)} segment(s) sent more than once: {now}, {in_stage:,} over {requests} request(s)"
            f"{money}; send each once, or refer back to it"
        )
        out.append(
            Suggestion(
                kind=SuggestionKind.REPEATED_CONTENT,
                target=target,
                tokens_per_request=per_request,
                tokens_in_stage=in_stage,
                cost_in_stage=cost,
                message=message,
            )
        )
    return out


def _cache_miss(answer: StageContextWindow) -> list[Suggestion]:
    miss = answer.cache_miss
    if miss is None or miss.stage_missed_tokens <= 0:
        return []
    money = f", {format_usd(miss.stage_saving)} more than at the cached price" if miss.stage_saving is not None else ""
    message = (
        f"{miss.calls} call(s) resent the previous call's prefix ({miss.prefix_tokens:,} tokens in the latest, "
        f"{miss.cached_tokens:,} served from the cache) at the full input price: {miss.stage_missed_tokens:,} tokens "
        f"over the stage{money}; keep the prefix stable and mark it cacheable (cache_control after it, for Claude)"
    )
    return [
        Suggestion(
            kind=SuggestionKind.CACHE_MISS,
            target=answer.model or "prompt prefix",
            tokens_per_request=miss.missed_tokens,
            tokens_in_stage=miss.stage_missed_tokens,
            cost_in_stage=miss.stage_saving,
            message=message,
        )
    ]


def _near_threshold(answer: StageContextWindow) -> list[Suggestion]:
    forecast = answer.forecast
    if forecast is None or forecast.calls_until_threshold is None or forecast.calls_until_threshold > NEAR_CALLS:
        return []
    when = "now" if forecast.calls_until_threshold == 0 else f"within {forecast.calls_until_threshold} call(s)"
    message = (
        f"the stage reaches {forecast.threshold_percent:g}% of its window {when} at "
        f"+{forecast.growth_per_call_tokens:,} tokens a call: compact the conversation, or cut what the other suggestions name"
    )
    growth = forecast.growth_per_call_tokens
    return [
        Suggestion(
            kind=SuggestionKind.NEAR_THRESHOLD,
            target=answer.stage_id,
            tokens_per_request=growth,
            tokens_in_stage=0,
            message=message,
        )
    ]
