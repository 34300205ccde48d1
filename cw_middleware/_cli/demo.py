"""A short mocked agent conversation through the wrapper: memory file, MCP tools, skills.

No API key and no server: LiteLLM's ``mock_response`` stands in for the model.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .._counting import tags

SYSTEM_PROMPT = "You are a careful coding agent. Work in small steps, run the tests, explain briefly."
MEMORY = "# AGENTS.md\n- The project uses pytest; run `pytest -q`.\n- Prefer small pure functions.\n- Never commit secrets.\n" * 6
SKILL_CATALOGUE = "Available skills:\n- pdf: read and fill PDF forms\n- xlsx: edit spreadsheets\n- review: structured code review"
# A window small enough for the breakdown's bar to show the conversation grow (gpt-4o's 128k shows under 1%).
DEMO_WINDOW = 4096
SKILL_PDF = "# Skill: pdf\nUse pdftotext for text, pdfplumber for tables; never guess a value from an image.\n" * 12


def _fn(fn_name: str, description: str, **props: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": fn_name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {k: {"type": "string", "description": v} for k, v in props.items()},
                "required": list(props),
            },
        },
    }


def demo_tools() -> list[dict[str, Any]]:
    return [
        tags.tool(_fn("read_file", "Read a file of the workspace.", path="path relative to the root")),
        tags.tool(_fn("run_tests", "Run the test suite and return the summary.", selector="pytest -k expression")),
        tags.tool(
            _fn("create_issue", "Create a GitHub issue.", repo="owner/name", title="title", body="markdown body"),
            tags.ToolSource.mcp("github"),
        ),
        tags.tool(_fn("search_code", "Search code on GitHub.", query="search query"), tags.ToolSource.mcp("github")),
        tags.tool(_fn("load_skill", "Load a skill's instructions by name.", name="skill name"), tags.ToolSource.skill("loader")),
    ]


def run(model: str, complete: Callable[..., Any], on_turn: Callable[[int, str], None], turns: int = 4) -> None:
    """Drive a short agent loop through ``complete`` (cw.completion), calling ``on_turn`` after each call."""
    messages: list[dict[str, Any]] = [
        tags.message(
            "system",
            [
                tags.segment(SYSTEM_PROMPT, "system_prompt"),
                tags.segment(MEMORY, "memory", "AGENTS.md"),
                tags.segment(SKILL_CATALOGUE, "skills", "skills:catalogue"),
            ],
        ),
        {"role": "user", "content": "Fill in the attached PDF form from the spreadsheet, then open an issue."},
    ]
    tools = demo_tools()
    for turn in range(1, turns + 1):
        complete(model=model, messages=messages, tools=tools, mock_response=f"Step {turn} done.", cw_context_window=DEMO_WINDOW)
        on_turn(turn, "")
        call_id = f"call_{turn}"
        name, args, result = {
            1: ("load_skill", {"name": "pdf"}, None),
            2: ("read_file", {"path": "form.pdf"}, "Name: ____ Date: ____ " * 40),
            3: ("run_tests", {"selector": "form"}, "12 passed in 0.4s"),
        }.get(turn, ("search_code", {"query": "pdf form"}, "3 results"))
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}],
            }
        )
        if result is None:  # an activated skill: its instructions count as skills, not conversation
            messages.append(tags.message("tool", SKILL_PDF, category="skills", source="skill:pdf", tool_call_id=call_id))
        else:
            messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
