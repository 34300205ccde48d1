"""Tags: made with clear errors, stripped before the provider sees the request."""

import pytest

import cw_middleware as cw
from cw_middleware._counting.tags import TAG_KEY, strip_messages, strip_tools


def test_segment_carries_category_and_source():
    part = cw.segment("notes", "memory", source="AGENTS.md")
    assert part["type"] == "text" and part["text"] == "notes"
    assert part[TAG_KEY] == {"category": "memory", "source": "AGENTS.md"}


@pytest.mark.parametrize(
    "call, fragment",
    [
        (lambda: cw.segment("x", "memories"), "unknown category 'memories'"),
        (lambda: cw.segment("x", 3), "category must be a string"),
        (lambda: cw.segment(b"x", "memory"), "segment text must be a string"),
        (lambda: cw.segment("x", "memory", source=""), "source must be a non-empty string"),
        (lambda: cw.message("robot", "x"), "unknown message role 'robot'"),
        (lambda: cw.message("user", 42), "content must be a string or a list"),
        (lambda: cw.message("user", [3.5]), "content part must be a string or a dict"),
        (lambda: cw.message("user", "x", source="a"), "source needs a category"),
        (lambda: cw.tool(["not", "a", "dict"]), "tool definition must be a dict"),
        (lambda: cw.tool({"type": "function"}, source="mcp"), "tool source must be a cw.ToolSource"),
        (lambda: cw.ToolSource.mcp(""), "MCP server name must be a non-empty string"),
    ],
)
def test_bad_tags_fail_at_tag_time_with_a_clear_message(call, fragment):
    with pytest.raises(cw.TagError, match=fragment):
        call()


def test_hand_made_bad_tag_is_rejected_when_the_request_is_read(runtime):
    msgs = [{"role": "user", "content": "hi", TAG_KEY: {"category": "nope"}}]
    with pytest.raises(cw.TagError, match="unknown category 'nope'"):
        cw.estimate(model="gpt-4o", messages=msgs)
    with pytest.raises(cw.TagError, match="mapping with a 'category' key"):
        cw.estimate(model="gpt-4o", messages=[{"role": "user", "content": "hi", TAG_KEY: "memory"}])


def test_tool_sources_map_to_categories():
    fn = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    assert cw.tool(fn, source=cw.ToolSource.mcp("github"))[TAG_KEY] == {"category": "mcp_tools", "source": "mcp:github"}
    assert cw.tool(fn, source=cw.ToolSource.skill("pdf"))[TAG_KEY] == {"category": "skills", "source": "skill:pdf"}
    assert cw.tool(fn)[TAG_KEY]["category"] == "tools"
    assert TAG_KEY not in fn  # the caller's definition is not modified


def test_strip_removes_every_tag_and_keeps_untagged_objects():
    untagged = {"role": "user", "content": "plain"}
    tagged = cw.message("system", [cw.segment("a", "system_prompt"), "b"], category="memory", source="m")
    tools = [cw.tool({"type": "function", "function": {"name": "f"}}, source=cw.ToolSource.mcp("x"))]
    clean_messages, clean_tools = strip_messages([tagged, untagged], None), strip_tools(tools)
    assert clean_messages[1] is untagged
    assert TAG_KEY not in clean_messages[0]
    assert all(TAG_KEY not in p for p in clean_messages[0]["content"])
    assert clean_messages[0]["content"] == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert clean_tools == [{"type": "function", "function": {"name": "f"}}]
    assert TAG_KEY in tagged  # the caller's request is not modified


def test_request_without_tags_is_passed_through_as_the_same_objects():
    msgs = [{"role": "user", "content": "hi"}]
    tools = [{"type": "function", "function": {"name": "f"}}]
    clean_messages, clean_tools = strip_messages(msgs, None), strip_tools(tools)
    assert clean_messages is msgs and clean_tools is tools
