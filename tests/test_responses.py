"""The Responses API drop-in with real LiteLLM: same results, tags on input items, its own usage block."""

from __future__ import annotations

import litellm

import cw_middleware as cw
from cw_middleware.contract import CountMethod, WarningCode

TOOL = {"type": "function", "name": "search", "description": "Search.", "parameters": {"type": "object", "properties": {}}}


def test_responses_returns_what_litellm_returns(runtime):
    ours = cw.responses(model="openai/gpt-4o", input="Say hi.", instructions="Be terse.", mock_response="hello")
    theirs = litellm.responses(model="openai/gpt-4o", input="Say hi.", instructions="Be terse.", mock_response="hello")
    assert type(ours) is type(theirs)
    assert ours.output[0].content[0].text == theirs.output[0].content[0].text == "hello"
    first, last = cw.snapshots()
    assert first.count_method is last.count_method is CountMethod.LOCAL_ESTIMATE
    assert WarningCode.MOCK_USAGE_NOT_RECONCILED.value in last.warning_codes()
    assert {(d.category.value, d.source) for d in first.details} >= {("system_prompt", "instructions"), ("conversation", "user")}


def test_estimate_takes_responses_arguments(runtime):
    items = [
        cw.message("user", [cw.segment("Notes about the repo.", "memory", "AGENTS.md"), "What next?"]),
        {"type": "function_call", "call_id": "c1", "name": "search", "arguments": '{"q": "x"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "found it"},
    ]
    tools = [cw.tool(TOOL, source=cw.ToolSource.mcp("github"))]
    snap = cw.estimate(model="openai/gpt-4o", input=items, tools=tools)
    by = {(d.category.value, d.source) for d in snap.details}
    assert {("memory", "AGENTS.md"), ("mcp_tools", "mcp:github"), ("conversation", "tool"), ("conversation", "assistant")} <= by
    # the same request written for Chat Completions counts its messages and tools alike
    chat = cw.estimate(
        model="openai/gpt-4o",
        messages=[
            items[0],
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "found it"},
        ],
        tools=[
            cw.tool(
                {"type": "function", "function": {k: v for k, v in TOOL.items() if k != "type"}},
                source=cw.ToolSource.mcp("github"),
            )
        ],
    )
    assert snap.tokens("memory") == chat.tokens("memory") and snap.tokens("mcp_tools") == chat.tokens("mcp_tools")
