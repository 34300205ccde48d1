"""Which categories the provider served from its prompt cache: the cached prefix, attributed in request order.

A response says how many input tokens came from the cache (OpenAI's and Gemini's implicit
prefix caching, Anthropic's breakpoints), never which ones. Every one of these caches a
*prefix* of the prompt, so the cached tokens are the first ones in the order the provider
reads the request: the tool definitions, then the messages in order, then the request's own
framing. `cached_by_category` walks the request backwards from its end (`RequestOrder`: what
is new in a turn sits at the end, so the walk is as short as the uncached part) until the
uncached tokens are covered; everything before that point is cached. Local counts give the
positions; the result is scaled to the reported number exactly, never more in a category than
the category holds.

An explicit breakpoint (Anthropic's ``cache_control``) says where the cached prefix ends:
`cache_prefix` gives the local parts up to the last one, whose count a response's cache
read + write is (see `reconcile.reconcile_with_prefix`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._kernel.contract import CATEGORIES, Category
from .tool_rows import as_defined

if TYPE_CHECKING:
    from .message_count import MessageCount

SourceKey = tuple[Category, str]


@dataclass(frozen=True)
class RequestOrder:
    """A request's local parts in the order the provider reads them, walked from the end.

    ``counts[:n]`` are the conversation's messages (the estimator's list: it only ever grows
    past ``n``, so the first ``n`` stay this request's); ``rekey`` gives a message's entries as
    the estimate keyed them (a defined tool's results under their own source).
    """

    head: tuple[tuple[SourceKey, int], ...]  # tool definitions and their framing
    counts: Sequence[MessageCount]
    n: int
    tail: tuple[tuple[SourceKey, int], ...]  # the request's framing, response format, thinking
    defined: frozenset[str] = frozenset()

    def backwards(self) -> Iterator[tuple[SourceKey, int]]:
        yield from reversed(self.tail)
        for index in range(self.n - 1, -1, -1):
            yield from reversed(as_defined(self.counts[index], self.defined))
        yield from reversed(self.head)


def cached_by_category(
    order: RequestOrder, local: Mapping[SourceKey, int], final: Mapping[Category, int], cached: int
) -> dict[Category, int]:
    """The first ``cached`` tokens of the request (of ``sum(final)``) by category; sums to ``cached`` (capped).

    The walk runs in the snapshot's numbers: each local part counts as its category was rescaled
    (``final`` over the category's local sum), so a category the prefix covers whole is cached whole.
    """
    total = sum(final.values())
    cached = max(0, min(cached, total))
    out = dict.fromkeys(CATEGORIES, 0)
    if not cached:
        return out
    local_sum: dict[Category, int] = {}
    for (category, _), tokens in local.items():
        local_sum[category] = local_sum.get(category, 0) + tokens
    ratio = {c: final.get(c, 0) / n for c, n in local_sum.items() if n > 0}
    uncached = dict.fromkeys(CATEGORIES, 0.0)
    left = float(total - cached)
    if left > 0:
        for (category, _), tokens in order.backwards():
            take = min(tokens * ratio.get(category, 0.0), left)
            uncached[category] += take
            left -= take
            if left <= 1e-9:
                break
    if left > 1e-9:  # parts no local count saw (unseen content, unattributed): they end the prompt as well
        for category in reversed(CATEGORIES):
            take = min(final.get(category, 0) - uncached[category], left)
            if take > 0:
                uncached[category] += take
                left -= take
    shares = {c: max(0.0, final.get(c, 0) - uncached[c]) for c in CATEGORIES}
    floors = {c: min(int(v), final.get(c, 0)) for c, v in shares.items()}
    rest = cached - sum(floors.values())
    for category in sorted(CATEGORIES, key=lambda c: shares[c] - floors[c], reverse=True):
        if rest <= 0:
            break
        if floors[category] < final.get(category, 0):
            floors[category] += 1
            rest -= 1
    out.update(floors)
    return _filled(out, final, rest) if rest > 0 else out


def _filled(share: dict[Category, int], final: Mapping[Category, int], rest: int) -> dict[Category, int]:
    """What rounding left over goes to the earliest categories with room."""
    for category in CATEGORIES:
        room = final.get(category, 0) - share[category]
        moved = max(0, min(room, rest))
        share[category] += moved
        rest -= moved
    return share


def has_breakpoint(item: Mapping[str, Any]) -> bool:
    """A message or tool definition that carries a ``cache_control`` breakpoint, on itself or on a content part."""
    if item.get("cache_control"):
        return True
    content = item.get("content")
    if isinstance(content, (list, tuple)):
        return any(isinstance(part, Mapping) and part.get("cache_control") for part in content)
    return False


def cache_prefix(
    counts: Sequence[MessageCount],
    system_idx: Sequence[int],
    breakpoint_idx: Sequence[int],
    tool_entries: Sequence[tuple[SourceKey, int]],
    tools_breakpoint: bool,
    defined: frozenset[str],
) -> dict[SourceKey, int]:
    """The local parts of the prompt up to its last ``cache_control`` breakpoint (empty without one).

    Anthropic caches in the order tools, system, messages (LiteLLM sends every system message
    ahead of the turns): a breakpoint on a turn covers the tools, every system message and the
    turns up to it; one on a system message the tools and the system messages up to it; one on
    a tool the tools. A breakpoint inside a message counts that whole message as prefix.
    ``counts`` are the conversation's messages, ``system_idx`` and ``breakpoint_idx`` the
    positions of its system messages and of those that carry a breakpoint.
    """
    last = breakpoint_idx[-1] if breakpoint_idx else None
    if last is None and not tools_breakpoint:
        return {}
    prefix: Counter[SourceKey] = Counter()
    for key, tokens in tool_entries:
        prefix[key] += tokens
    if last is not None:
        systems = set(system_idx)
        on_system = last in systems
        if on_system:  # the tools and the system messages up to it
            covered = [i for i in system_idx if i <= last]
        else:  # the tools, every system message and the turns up to it
            covered = [*systems, *(i for i in range(last + 1) if i not in systems)]
        for index in covered:
            # A defined tool's untagged results under their own source, as the estimate keys them.
            for key, tokens in as_defined(counts[index], defined):
                prefix[key] += tokens
    return {k: v for k, v in prefix.items() if v}
