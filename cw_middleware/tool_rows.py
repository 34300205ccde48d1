"""Per-tool rows: each defined tool's definition tokens, its results' tokens and how often the model called it.

The estimator (estimator.py) gives a request's tools by name (`ToolUse`): each definition's
local count and key, the tokens of the tool results each tool produced (a result is matched
to its tool through the call id it answers), and the calls made in the conversation. The
snapshot (snapshot.py) turns that into bounded `ToolItem` rows (`tool_rows`), scaled as the
breakdown was, plus one folded row for the rest.

Names are exported, and only these: the names of the request's own tool definitions, held
to the shape of an OpenAI tool name (``^[A-Za-z0-9_.-]{1,64}$``; anything else reads
``unnamed_tool``). A name a model wrote in a call to a tool it was not given never leaves
memory: it could be anything the model was made to write.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

from .contract import Category, ToolItem
from .tags import derived_label

SourceKey = tuple[Category, str]

FOLDED_TOOLS = "(other tools)"  # the folded row's name: no tool name has this shape
UNNAMED_TOOL = "unnamed_tool"
RESULT_SOURCE_PREFIX = "tool:"  # the source of a tool's results in details: ``tool:read_file``


class ToolDefinition(NamedTuple):
    name: str  # as the definition writes it (held in memory; `tool_label` is what is exported)
    key: SourceKey  # (category, source) of the definition: tools/native, mcp_tools/mcp:github, skills/skill:pdf
    tokens: int  # local count


@dataclass(frozen=True)
class ToolUse:
    """A request's tools by name: its definitions, the tokens of each defined tool's results, its calls."""

    definitions: tuple[ToolDefinition, ...] = ()
    results: Mapping[str, int] = field(default_factory=dict)  # tool name -> local tokens of its results
    calls: Mapping[str, int] = field(default_factory=dict)  # tool name -> calls in the conversation

    @property
    def names(self) -> frozenset[str]:
        return frozenset(d.name for d in self.definitions)


NO_TOOLS = ToolUse()


def tool_name(definition: Mapping[str, Any]) -> str:
    """The name a tool definition gives (a chat tool's ``function.name``, a flat tool's ``name``); "" without one."""
    fn = definition.get("function", definition)
    name = fn.get("name") if isinstance(fn, Mapping) else None
    return name if isinstance(name, str) else ""


def tool_label(name: str) -> str:
    """The exported form of a defined tool's name: as written when it has a tool name's shape."""
    return derived_label(name, UNNAMED_TOOL)


def tool_result_key(key: SourceKey, name: str) -> SourceKey:
    """Where a defined tool's untagged results count: its own source, ``tool:<name>``, in their category."""
    return (key[0], RESULT_SOURCE_PREFIX + tool_label(name))


# The sources an untagged tool result counts under (its role), before it is matched to its tool.
PLAIN_RESULT_KEYS = frozenset({(Category.CONVERSATION, "tool"), (Category.CONVERSATION, "function")})


def rekeyed(
    entries: tuple[tuple[SourceKey, int], ...], tool: Optional[str], defined: frozenset[str]
) -> tuple[tuple[SourceKey, int], ...]:
    """A message's entries as a request with the ``defined`` tools counts them: a defined tool's
    untagged results under their own source (`tool_result_key`), everything else as it was."""
    if tool is None or tool not in defined:
        return entries
    return tuple((tool_result_key(key, tool) if key in PLAIN_RESULT_KEYS else key, n) for key, n in entries)


def called_tools(calls: Mapping[str, int], use: ToolUse) -> dict[str, int]:
    """The calls a response made, by name, to tools the request defined."""
    names = use.names
    return {name: n for name, n in calls.items() if name in names}


class _Row:
    __slots__ = ("category", "definition", "invocations", "label", "result", "source")

    def __init__(self, label: str, key: SourceKey) -> None:
        self.label, self.category, self.source = label, key[0], key[1]
        self.definition = self.result = self.invocations = 0


@dataclass(frozen=True)
class ToolRows:
    rows: list[ToolItem]  # the largest tools, then the folded row (when any was folded)
    folded: int  # how many tools the folded row stands for
    unused_tokens: int  # definition tokens of the tools the request and its response never call


def tool_rows(
    use: ToolUse,
    scale: Callable[[SourceKey, int], int],
    max_tools: int,
    response_calls: Optional[Mapping[str, int]] = None,
    make: Callable[..., ToolItem] = ToolItem,
) -> ToolRows:
    """The rows of ``use``, largest first (definition + result tokens; ties keep the definitions' order).

    ``scale(key, local)`` gives a local count under ``key`` as the snapshot's breakdown counts it
    (rescaled to an authoritative total). ``response_calls`` adds a response's calls to the
    conversation's. Beyond ``max_tools`` tools the rest fold into one row named `FOLDED_TOOLS`.
    """
    rows: dict[str, _Row] = {}
    for name, key, tokens in use.definitions:
        label = tool_label(name)
        row = rows.get(label)
        if row is None:
            row = rows[label] = _Row(label, key)
        row.definition += scale(key, tokens)
    for name, tokens in use.results.items():
        row = rows.get(tool_label(name))
        if row is not None:
            row.result += scale((Category.CONVERSATION, RESULT_SOURCE_PREFIX + row.label), tokens)
    for calls in (use.calls, response_calls or {}):
        for name, n in calls.items():
            row = rows.get(tool_label(name))
            if row is not None:
                row.invocations += n
    ranked = sorted(rows.values(), key=lambda r: r.definition + r.result, reverse=True)  # stable: ties keep order
    unused = sum(r.definition for r in ranked if not r.invocations)
    out = [
        make(
            name=r.label,
            category=r.category,
            source=r.source,
            definition_tokens=r.definition,
            result_tokens=r.result,
            invocations=r.invocations,
        )
        for r in ranked[:max_tools]
    ]
    rest = ranked[max_tools:]
    if rest:
        out.append(
            make(
                name=FOLDED_TOOLS,
                category=None,
                source=None,
                definition_tokens=sum(r.definition for r in rest),
                result_tokens=sum(r.result for r in rest),
                invocations=sum(r.invocations for r in rest),
                folded=len(rest),
            )
        )
    return ToolRows(out, len(rest), unused)
