"""Per-tool rows: each defined tool's definition tokens, its results' tokens and how often the model called it.

The estimator (estimator.py) gives a request's tools by name (`ToolUse`): each definition's
local count and key, the tokens of the tool results each tool produced (a result is matched
to its tool through the call id it answers), and the calls made in the conversation. The
snapshot (_snapshots/build.py) turns that into bounded `ToolItem` rows (`tool_rows`), scaled as the
breakdown was, plus one folded row for the rest.

Names are exported, and only these: the names of the request's own tool definitions, held
to the shape of an OpenAI tool name (``^[A-Za-z0-9_.-]{1,64}$``; anything else reads
``unnamed_tool``). A name a model wrote in a call to a tool it was not given never leaves
memory: it could be anything the model was made to write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from operator import add
from typing import Any, NamedTuple, Optional

from .._kernel.contract import Category, ToolItem
from .message_count import MessageCount
from .rules import tool_spec
from .tags import derived_label

SourceKey = tuple[Category, str]

FOLDED_TOOLS = "(other tools)"  # the folded row's name: no tool name has this shape
UNNAMED_TOOL = "unnamed_tool"
RESULT_SOURCE_PREFIX = "tool:"  # the source of a tool's results in details: ``tool:read_file``


class ToolDefinition(NamedTuple):
    name: str  # as the definition writes it (held in memory; `tool_label` is what is exported)
    key: SourceKey  # (category, source) of the definition: tools/native, mcp_tools/mcp:github, skills/skill:pdf
    tokens: int  # local count


class ToolSet:
    """One tool set's definitions, counted once (the estimator caches it with the tool set's count).

    ``rows`` merges definitions that export the same label: (label, key, local tokens, names).
    """

    __slots__ = ("definitions", "distinct_keys", "keys", "labels", "names", "names_of", "result_keys", "rows", "single", "tokens")

    def __init__(self, definitions: tuple[ToolDefinition, ...] = ()) -> None:
        self.definitions = definitions
        self.names = frozenset(d.name for d in definitions)
        merged: dict[str, list[Any]] = {}
        for name, key, tokens in definitions:
            label = tool_label(name)
            row = merged.get(label)
            if row is None:
                merged[label] = [label, key, tokens, (name,)]
            else:
                row[2] += tokens
                row[3] = (*row[3], name)
        self.rows: tuple[tuple[str, SourceKey, int, tuple[str, ...]], ...] = tuple(tuple(r) for r in merged.values())  # type: ignore[misc]
        # Column by column, for `tool_rows` (on the call path: list comprehensions over these run at C speed).
        self.labels = [r[0] for r in self.rows]
        self.keys = [r[1] for r in self.rows]
        self.tokens = [r[2] for r in self.rows]
        self.names_of = [r[3] for r in self.rows]
        self.single = [n[0] for n in self.names_of] if all(len(n) == 1 for n in self.names_of) else None
        self.distinct_keys = tuple(dict.fromkeys(self.keys))  # a few: every native tool has one
        self.result_keys = [(Category.CONVERSATION, RESULT_SOURCE_PREFIX + label) for label in self.labels]


NO_TOOL_SET = ToolSet()


@dataclass(frozen=True)
class ToolUse:
    """A request's tools by name: its definitions, the tokens of each defined tool's results, its calls.

    The estimator hands out the same ToolUse while neither the conversation nor its tool set
    changed (estimator.py), so what is derived from it alone is made once and kept in ``memo``
    (the snapshot's unscaled rows: _snapshots/build.py): an agent's unchanged tools cost nothing per turn.
    """

    tool_set: ToolSet = NO_TOOL_SET
    results: Mapping[str, int] = field(default_factory=dict)  # tool name -> local tokens of its results
    calls: Mapping[str, int] = field(default_factory=dict)  # tool name -> calls in the conversation
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)  # derived values, by who derived them

    @property
    def definitions(self) -> tuple[ToolDefinition, ...]:
        return self.tool_set.definitions

    @property
    def names(self) -> frozenset[str]:
        return self.tool_set.names


NO_TOOLS = ToolUse()


def tool_name(definition: Mapping[str, Any]) -> str:
    """The name a tool definition gives (a chat tool's ``function.name``, a flat tool's ``name``); "" without one."""
    fn = tool_spec(definition)
    name = fn.get("name") if isinstance(fn, Mapping) else None
    return name if isinstance(name, str) else ""


@lru_cache(maxsize=4096)
def tool_label(name: str) -> str:
    """The exported form of a defined tool's name: as written when it has a tool name's shape (cached: names repeat)."""
    return derived_label(name, UNNAMED_TOOL)


@lru_cache(maxsize=4096)
def tool_result_key(key: SourceKey, name: str) -> SourceKey:
    """Where a defined tool's untagged results count: its own source, ``tool:<name>``, in their category."""
    return (key[0], RESULT_SOURCE_PREFIX + tool_label(name))


# The sources an untagged tool result counts under (its role), before it is matched to its tool.
PLAIN_RESULT_KEYS = frozenset({(Category.CONVERSATION, "tool"), (Category.CONVERSATION, "function")})


def matched(count: MessageCount, tool: str) -> MessageCount:
    """A tool result matched to the tool that produced it: its untagged tokens move to ``tool:<name>``.

    Done once, when the message is counted; a request that does not define the tool moves them back
    (`as_defined`, and the estimator for its totals): only defined names are ever exported.
    """
    moved = tuple((key, n) for key, n in count.entries if key in PLAIN_RESULT_KEYS)
    entries = tuple((tool_result_key(key, tool) if key in PLAIN_RESULT_KEYS else key, n) for key, n in count.entries)
    return count._replace(tool=tool, entries=entries, moved=moved)


def matched_parts(count: MessageCount, call_names: Mapping[str, str]) -> MessageCount:
    """An entry answering several calls, each of its results `matched` to the tool that produced it."""
    parts = tuple(
        matched(part, call_names[part.result_of]) if part.result_of is not None and part.result_of in call_names else part
        for part in count.parts
    )
    return count._replace(entries=_summed(p.entries for p in parts), moved=_summed(p.moved for p in parts), parts=parts)


def _summed(groups: Iterable[tuple[tuple[SourceKey, int], ...]]) -> tuple[tuple[SourceKey, int], ...]:
    out: dict[SourceKey, int] = {}
    for group in groups:
        for key, n in group:
            out[key] = out.get(key, 0) + n
    return tuple(out.items())


def as_defined(count: MessageCount, defined: frozenset[str]) -> tuple[tuple[SourceKey, int], ...]:
    """A message's entries as a request defining ``defined`` counts them: an undefined tool's results back under their role."""
    if count.parts and count.moved:
        return _summed(as_defined(part, defined) for part in count.parts)
    if not count.moved or count.tool in defined:
        return count.entries
    assert count.tool is not None
    back = {tool_result_key(key, count.tool): key for key, _ in count.moved}
    return tuple((back.get(key, key), n) for key, n in count.entries)


def called_tools(calls: Mapping[str, int], use: ToolUse) -> dict[str, int]:
    """The calls a response made, by name, to tools the request defined."""
    names = use.names
    return {name: n for name, n in calls.items() if name in names}


@dataclass(frozen=True)
class ToolRows:
    rows: list[ToolItem]  # the largest tools, then the folded row (when any was folded)
    folded: int  # how many tools the folded row stands for
    unused_tokens: int  # definition tokens of the tools the request and its response never call


def tool_rows(
    use: ToolUse,
    ratio_of: Optional[Callable[[SourceKey], float]],
    max_tools: int,
    response_calls: Optional[Mapping[str, int]] = None,
    make: Callable[..., ToolItem] = ToolItem,
) -> ToolRows:
    """The rows of ``use``, largest first (definition + result tokens; ties keep the definitions' order).

    ``ratio_of(key)`` is how the snapshot's breakdown rescaled the local count under ``key`` (to an
    authoritative total; None: as counted): a row's tokens under it scale alike, rounded. ``response_calls`` adds a response's
    calls to the conversation's. Beyond ``max_tools`` tools the rest fold into one row, `FOLDED_TOOLS`.
    """
    ts = use.tool_set
    results, calls, answered = use.results, use.calls, response_calls or _EMPTY
    if ts.single is not None:
        names = ts.single
        produced = [results.get(n, 0) for n in names]
        invoked = [calls.get(n, 0) + answered.get(n, 0) for n in names] if answered else [calls.get(n, 0) for n in names]
    else:
        produced = [sum(results.get(n, 0) for n in group) for group in ts.names_of]
        invoked = [sum(calls.get(n, 0) + answered.get(n, 0) for n in group) for group in ts.names_of]
    if ratio_of is None:
        defined = ts.tokens
    else:
        ratios = {key: ratio_of(key) for key in ts.distinct_keys}
        defined = [round(tokens * ratios[key]) for key, tokens in zip(ts.keys, ts.tokens)]
        produced = [round(n * ratio_of(key)) if n else 0 for key, n in zip(ts.result_keys, produced)]
    sizes = list(map(add, defined, produced))
    ranked = sorted(range(len(sizes)), key=sizes.__getitem__, reverse=True)  # stable: ties keep the definitions' order
    unused = sum(d for d, n in zip(defined, invoked) if not n)
    labels, keys = ts.labels, ts.keys
    out = [make(labels[i], keys[i][0], keys[i][1], defined[i], produced[i], invoked[i]) for i in ranked[:max_tools]]
    rest = ranked[max_tools:]
    if rest:
        out.append(
            make(
                FOLDED_TOOLS,
                None,
                None,
                sum(defined[i] for i in rest),
                sum(produced[i] for i in rest),
                sum(invoked[i] for i in rest),
                len(rest),
            )
        )
    return ToolRows(out, len(rest), unused)


_EMPTY: Mapping[str, int] = {}
