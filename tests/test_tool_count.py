"""Tool sets counted once (_counting/tool_count.py): compared by value, a few kept per rules name, sources by tag or name."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import cw_middleware as cw
from cw_middleware._counting.rules import PromptAdditions
from cw_middleware._counting.tool_count import MAX_TOOL_SETS, ToolSetCounter, legacy_function
from cw_middleware._kernel.contract import Category, WarningCode


@dataclass
class CountingRules(PromptAdditions):
    """Rules that count a definition as the length of its name and note every definition they count."""

    name: str = "test-rules"
    counted: list[str] = field(default_factory=list)

    def tool_definition(self, definition: dict[str, Any]) -> int:
        fn = definition.get("function", definition)
        if not isinstance(fn.get("name"), str):
            raise ValueError("unreadable")
        self.counted.append(fn["name"])
        return len(fn["name"])

    def tools_overhead(self, tools: list[Any], tool_choice: Any) -> int:
        return 3


def _tool(name: str, description: str = "d") -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {"type": "object"}}}


def _counter() -> ToolSetCounter:
    return ToolSetCounter(lambda obj: obj)


def test_the_same_set_in_fresh_dicts_is_counted_once():
    rules, counter = CountingRules(), _counter()
    first = counter.count(rules, [_tool("search"), _tool("read")], None)
    again = counter.count(rules, [_tool("search"), _tool("read")], None)  # an agent rebuilding its tools each turn
    assert again is first
    assert rules.counted == ["search", "read"]
    assert dict(first.entries) == {(Category.TOOLS, "native"): 10, (Category.TOOLS, "tool_framing"): 3}


def test_a_definition_edited_in_place_or_another_tool_choice_is_counted_again():
    rules, counter = CountingRules(), _counter()
    tools = [_tool("search")]
    counter.count(rules, tools, None)
    tools[0]["function"]["name"] = "search_code"
    assert dict(counter.count(rules, tools, None).entries)[(Category.TOOLS, "native")] == len("search_code")
    counter.count(rules, tools, "required")
    assert rules.counted == ["search", "search_code", "search_code"]


def test_a_few_sets_are_kept_per_rules_name_and_the_oldest_goes():
    rules, counter = CountingRules(), _counter()
    sets = [[_tool(f"tool_{i}")] for i in range(MAX_TOOL_SETS + 1)]
    for tools in sets:
        counter.count(rules, tools, None)
    counter.count(rules, sets[-1], None)  # kept
    counter.count(rules, sets[0], None)  # the oldest, gone: counted again
    assert rules.counted == [f"tool_{i}" for i in range(MAX_TOOL_SETS + 1)] + ["tool_0"]


def test_sources_come_from_tags_or_the_mcp_naming_convention_with_a_warning():
    rules, counter = CountingRules(), _counter()
    tagged = cw.tool(_tool("create_issue"), source=cw.ToolSource.mcp("github"))
    skill = cw.tool(_tool("pdf"), source=cw.ToolSource.skill("pdf"))
    by_name = _tool("mcp__linear__list_issues")
    counted = counter.count(rules, [tagged, skill, by_name], None)
    entries = dict(counted.entries)
    assert entries[(Category.MCP_TOOLS, "mcp:github")] == len("create_issue")
    assert entries[(Category.SKILLS, "skill:pdf")] == len("pdf")
    assert entries[(Category.MCP_TOOLS, "mcp:linear")] == len("mcp__linear__list_issues")
    assert counted.warnings == frozenset({WarningCode.TOOL_SOURCE_INFERRED})
    assert [d.name for d in counted.tool_set.definitions] == ["create_issue", "pdf", "mcp__linear__list_issues"]


def test_an_unreadable_definition_costs_only_itself():
    rules, counter = CountingRules(), _counter()
    counted = counter.count(rules, [_tool("search"), {"type": "function", "function": {"name": 7}}], None)
    assert dict(counted.entries)[(Category.TOOLS, "native")] == len("search")
    assert WarningCode.UNREADABLE_MESSAGE in counted.warnings


def test_a_cache_control_breakpoint_on_a_definition_is_known_with_the_set():
    rules, counter = CountingRules(), _counter()
    marked = {**_tool("search"), "cache_control": {"type": "ephemeral"}}
    assert counter.count(rules, [_tool("read"), marked], None).breakpoint is True
    assert counter.count(rules, [_tool("read")], None).breakpoint is False


def test_a_legacy_function_becomes_a_tool_and_keeps_its_tag():
    fn = _tool("search")["function"]
    tagged = cw.tool(fn, source=cw.ToolSource.mcp("github"))
    as_tool = legacy_function(tagged)
    assert as_tool["type"] == "function" and as_tool["function"] == fn
    assert as_tool["cw_tag"] == tagged["cw_tag"]
    assert legacy_function(fn) == {"type": "function", "function": fn}
