"""A mocked multi-stage agent run, exported through whatever runtime the test installed.

Several agent stages (tools from an MCP server, memory, a skill loaded as a tool result),
a streamed call, a non-agent stage and a stage entered twice; every prompt, tool
argument and tool result carries `CANARY`, which no exported byte and no read-back
answer may contain.
"""

from __future__ import annotations

import json

import cw_middleware as cw

CANARY = "CANARY-7f3a-secret-prompt-text"
STAGES = ["plan@1", "implement@1", "tests@1", "review@1"]  # in order; tests@1 is not an agent stage
AGENT_STAGES = ["plan@1", "implement@1", "review@1"]

TOOLS = [
    cw.tool(
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": f"Read a file. {CANARY}",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        }
    ),
    cw.tool(
        {
            "type": "function",
            "function": {
                "name": "create_issue",
                "description": f"Open an issue. {CANARY}",
                "parameters": {"type": "object", "properties": {"title": {"type": "string"}}},
            },
        },
        cw.ToolSource.mcp("github"),
    ),
]


def _messages(turns: int) -> list:
    messages = [
        cw.message(
            "system",
            [
                cw.segment(f"You are a coding agent. {CANARY}", "system_prompt"),
                cw.segment(f"# AGENTS.md\n- run pytest {CANARY}\n" * 10, "memory", "AGENTS.md"),
            ],
        ),
        {"role": "user", "content": f"Fix the failing test. {CANARY}"},
    ]
    for i in range(turns):
        call_id = f"call_{i}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": json.dumps({"path": CANARY})},
                    }
                ],
            }
        )
        if i == 0:
            messages.append(
                cw.message("tool", f"# pdf skill {CANARY}\n" * 5, category="skills", source="skill:pdf", tool_call_id=call_id)
            )
        else:
            messages.append({"role": "tool", "tool_call_id": call_id, "content": f"file text {CANARY} " * (20 * i)})
    return messages


def run_agent(run_id: str) -> None:
    """The run: plan@1 (one call), implement@1 (a call and a stream), tests@1 (a tool stage), review@1 (entered twice)."""
    with cw.stage(run_id, "plan@1"):
        cw.completion(model="gpt-4o", messages=_messages(0), tools=TOOLS, mock_response=f"plan {CANARY}")
    with cw.stage(run_id, "implement@1"):
        cw.completion(model="gpt-4o", messages=_messages(1), tools=TOOLS, mock_response="calling read_file")
        stream = cw.completion(
            model="gpt-4o", messages=_messages(2), tools=TOOLS, mock_response=f"streamed {CANARY}", stream=True
        )
        assert CANARY in "".join(c.choices[0].delta.content or "" for c in stream)
    with cw.stage(run_id, "tests@1", kind="tool"):
        pass
    for turns in (3, 4):
        with cw.stage(run_id, "review@1"):
            cw.completion(model="gpt-4o-mini", messages=_messages(turns), mock_response="lgtm")
