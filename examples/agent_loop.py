"""An agent loop with a memory file, an MCP server's tools, a skill catalogue and an activated skill.

Prints the context-window breakdown after every model call. No API key needed:
LiteLLM's mock_response plays the model. Telemetry stays in the process unless
CW_EXPORT says where to send it (the environment decides then: an argument to
`cw.configure` would beat it):

    python examples/agent_loop.py [--model gpt-4o]
    CW_EXPORT=file:$PWD/a.jsonl python examples/agent_loop.py
    cw-middleware show example-run release@1 --backend file:$PWD/a.jsonl
"""

import argparse
import json
import os

import cw_middleware as cw
from cw_middleware._cli.render import render

MEMORY_FILE = """# AGENTS.md
- Run `pytest -q` before every commit.
- Keep functions small and typed.
- Never print secrets or tokens.
"""
SKILLS = "Available skills:\n- pdf: extract text and tables from PDF files\n- release: cut a release"
PDF_SKILL = "# pdf skill\n1. Run pdftotext -layout.\n2. Use pdfplumber for tables.\n3. Never guess numbers from images.\n" * 8


def function(tool_name, description, **params):
    return {
        "type": "function",
        "function": {
            "name": tool_name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {k: {"type": "string", "description": v} for k, v in params.items()},
                "required": list(params),
            },
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="gpt-4o")
    model = parser.parse_args().model
    if os.environ.get("CW_EXPORT"):
        cw.configure()  # CW_EXPORT (and OTEL_*) decide where the snapshots go
    else:
        cw.configure(export="none")  # nothing asked for: keep this example's telemetry to itself

    tools = [
        function("run_shell", "Run a shell command in the sandbox.", command="the command"),
        cw.tool(function("create_pull_request", "Open a pull request.", title="title", body="body"), cw.ToolSource.mcp("github")),
        cw.tool(function("list_issues", "List open issues.", repo="owner/name"), cw.ToolSource.mcp("github")),
        cw.tool(function("activate_skill", "Load a skill's instructions.", name="skill"), cw.ToolSource.skill("loader")),
    ]
    messages = [
        cw.message(
            "system",
            [
                cw.segment("You are a release engineer. Be careful and brief.", "system_prompt"),
                cw.segment(MEMORY_FILE, "memory", source="AGENTS.md"),
                cw.segment(SKILLS, "skills", source="skills:catalogue"),
            ],
        ),
        {"role": "user", "content": "Summarise the attached release notes PDF and open a PR with the changelog."},
    ]
    plan = [
        ("activate_skill", {"name": "pdf"}, cw.message),  # the skill's text arrives as a tagged tool result
        ("run_shell", {"command": "pdftotext -layout notes.pdf -"}, "Release 2.0: faster startup, new CLI, 14 fixes. " * 30),
        ("create_pull_request", {"title": "Changelog 2.0", "body": "..."}, '{"number": 42}'),
    ]
    with cw.stage(run_id="example-run", stage_id="release@1"):
        for turn, (tool_name, args, result) in enumerate(plan, start=1):
            cw.completion(model=model, messages=messages, tools=tools, mock_response=f"calling {tool_name}")
            print(render(cw.snapshots()[-1], title=f"\n== after call {turn}"))
            call_id = f"call_{turn}"
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": call_id, "type": "function", "function": {"name": tool_name, "arguments": json.dumps(args)}}
                    ],
                }
            )
            if result is cw.message:
                messages.append(cw.message("tool", PDF_SKILL, category="skills", source="skill:pdf", tool_call_id=call_id))
            else:
                messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
        cw.completion(model=model, messages=messages, tools=tools, mock_response="Done: PR #42 opened.")
        print(render(cw.snapshots()[-1], title="\n== final call"))


if __name__ == "__main__":
    main()
