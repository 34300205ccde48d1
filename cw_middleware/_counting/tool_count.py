"""Tool definitions counted once per tool set: a request's tools as (category, source) entries and definitions.

An agent sends the same tools on every turn, so the estimator (estimator.py) asks
`ToolSetCounter` for them and gets the last count back while the set is unchanged: the few
recent sets per rules name (a main agent and its sub-agents alternate) are compared by value,
in C, so a definition edited in place is counted again. A tagged tool counts under its tag;
an untagged one is native, or MCP by the ``mcp__server__tool`` naming convention (with a
warning that the source was inferred).
"""

from __future__ import annotations

import contextlib
import functools
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._kernel.contract import Category, WarningCode
from .cache_share import has_breakpoint
from .fingerprints import message_fingerprint
from .request_copies import AsDict, freeze
from .rules import CountingRules
from .rules._tiktoken import BATCH_FROM, NotReady, batched, recording
from .tags import TAG_KEY, mcp_server_label, read_tag, strip_tool
from .tool_rows import NO_TOOL_SET, ToolDefinition, ToolSet, tool_name

SourceKey = tuple[Category, str]

MAX_TOOL_SETS = 4  # per rules name
_MAX_RULES_NAMES = 64  # past this many rules names the whole cache starts again: bounds memory, not correctness


@dataclass
class ToolsCount:
    """One tool set's count: its entries, warnings and definitions, with the value copy it was counted from."""

    frozen: Any
    tool_choice: Any
    entries: tuple[tuple[SourceKey, int], ...]
    warnings: frozenset[WarningCode]
    breakpoint: bool  # a definition carries a cache_control breakpoint: known once per tool set, not per turn
    tool_set: ToolSet = NO_TOOL_SET
    fingerprint: int = 0  # of the definitions and tool choice as sent (fingerprints.py): in memory only


class ToolSetCounter:
    """Counts tool sets, keeping the last `MAX_TOOL_SETS` per rules name. Not thread-safe: the estimator's lock guards it."""

    def __init__(self, as_dict: AsDict) -> None:
        self._as_dict = as_dict
        self._recent: dict[str, list[ToolsCount]] = {}

    def count(self, rules: CountingRules, tools: list[Any], tool_choice: Any) -> ToolsCount:
        recent = self._recent.setdefault(rules.name, [])
        for cached in recent:
            if cached.tool_choice == tool_choice and cached.frozen == tools:
                return cached
        # Its definitions go to the tokenizer together (rules/_tiktoken.py, `batched`): `_count` keeps nothing.
        dry_run = functools.partial(self._count, rules, tools, tool_choice)
        with batched(dry_run) if rules.counts_in_batches and len(tools) >= BATCH_FROM else contextlib.nullcontext():
            counted = self._count(rules, tools, tool_choice)
        if len(self._recent) > _MAX_RULES_NAMES:
            self._recent.clear()
            recent = self._recent.setdefault(rules.name, [])
        recent.insert(0, counted)
        del recent[MAX_TOOL_SETS:]
        return counted

    def _count(self, rules: CountingRules, tools: list[Any], tool_choice: Any) -> ToolsCount:
        entries: Counter[SourceKey] = Counter()
        warnings: set[WarningCode] = set()
        plain = []
        definitions: list[ToolDefinition] = []
        for raw in tools:
            definition = self._as_dict(raw)
            tag = read_tag(definition)  # a bad tag raises: the caller's mistake
            definition = strip_tool(definition)
            if tag is not None:
                key: SourceKey = (tag.category, tag.source or "native")
            else:
                key = _untagged_tool_key(definition)
                if key[0] is not Category.TOOLS:
                    warnings.add(WarningCode.TOOL_SOURCE_INFERRED)
            try:
                tokens = rules.tool_definition(definition)
            except NotReady:
                raise
            except Exception:  # noqa: BLE001 - a definition we cannot read costs its own count only
                warnings.add(WarningCode.UNREADABLE_MESSAGE)
                continue
            entries[key] += tokens
            definitions.append(ToolDefinition(tool_name(definition), key, tokens))
            plain.append(definition)
        try:
            entries[(Category.TOOLS, "tool_framing")] += rules.tools_overhead(plain, tool_choice)
        except NotReady:
            raise
        except Exception:  # noqa: BLE001
            warnings.add(WarningCode.UNREADABLE_MESSAGE)
        breakpoint = any(has_breakpoint(self._as_dict(raw)) for raw in tools)
        frozen = freeze(tools, self._as_dict)
        return ToolsCount(
            frozen,
            tool_choice,
            tuple(entries.items()),
            frozenset(warnings),
            breakpoint,
            ToolSet(tuple(definitions)),
            message_fingerprint([frozen, tool_choice]) if not recording() else 0,
        )


def legacy_function(function: Any) -> Any:
    """A legacy ``functions=`` entry as a tool; its tag (from `cw.tool`) moves to the tool."""
    if isinstance(function, Mapping) and TAG_KEY in function:
        return {"type": "function", "function": strip_tool(function), TAG_KEY: function[TAG_KEY]}
    return {"type": "function", "function": function}


def _untagged_tool_key(definition: Mapping[str, Any]) -> SourceKey:
    """Untagged tools are native; an ``mcp__server__tool`` name is MCP by convention, with a warning."""
    name = tool_name(definition)
    if name.startswith("mcp__"):
        return (Category.MCP_TOOLS, mcp_server_label(name[5:].split("__", 1)[0]))
    return (Category.TOOLS, "native")
