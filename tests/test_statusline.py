"""``cw-middleware statusline`` (issue 39 item 4): one line, and one JSON object, with the numbers of the stage's answer.

A stage of real LiteLLM calls (mocked) with a memory file, MCP tools never called and a native tool that is,
exported to a file: each part of the line is checked against what the reader answers for that stage.
"""

from __future__ import annotations

import json

from embedded_helpers import embedded_runtime

import cw_middleware as cw
from cw_middleware._cli import main as cli
from cw_middleware._kernel.formats import format_tokens, format_usd

MCP = cw.ToolSource.mcp("github")
TOOLS = [
    cw.tool({"type": "function", "function": {"name": f"gh_{i}", "description": "GitHub " * 40, "parameters": {}}}, MCP)
    for i in range(3)
] + [{"type": "function", "function": {"name": "read_file", "description": "Read a file.", "parameters": {}}}]
CALL = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}


def _stage(path):
    history = [cw.message("system", "Notes: " + "remember this " * 60, category="memory", source="AGENTS.md")]
    with embedded_runtime(export=f"file:{path}") as runtime:
        with cw.stage("status", "work@1"):
            for i in range(3):
                history += [{"role": "user", "content": f"step {i} " + "please " * 50}]
                cw.completion(model="gpt-4o", messages=history, tools=TOOLS, mock_response="ok")
                history += [{"role": "assistant", "content": None, "tool_calls": [CALL]}]
                history += [{"role": "tool", "tool_call_id": "c1", "content": "file text " * 30}]
        assert runtime.flush(10)


def test_the_line_shows_the_stages_numbers_within_a_hundred_characters(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    _stage(path)
    answer = cw.reader(f"file:{path}").context_window("status", "work@1")
    assert cli.main(["statusline", "status", "work@1", "--backend", f"file:{path}"]) == 0
    line = capsys.readouterr().out.rstrip("\n")
    assert "\n" not in line and len(line) <= 100 and "\x1b[" not in line
    parts = line.split(" · ")
    share = f"{answer.usage_percent:.0f}%"
    assert parts[0] == f"ctx {share} {format_tokens(answer.input_tokens)}/{format_tokens(answer.context_window_tokens)}"
    tokens = {b.category.value: b.tokens for b in answer.breakdown}
    mcp = f"mcp {format_tokens(tokens['mcp_tools'])} (3 unused)"  # three gh_ tools, none called
    assert mcp in parts
    assert f"≈{answer.forecast.calls_until_threshold} calls to 80%" in parts
    assert parts[-1] == format_usd(answer.stage_totals.input_cost)


def test_without_ids_it_reads_the_newest_stage_and_json_gives_the_same_numbers(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    _stage(path)
    assert cli.main(["statusline", "--backend", f"file:{path}", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    answer = cw.reader(f"file:{path}").context_window("status", "work@1")
    assert (body["run_id"], body["stage_id"]) == ("status", "work@1")
    assert body["usage_percent"] == answer.usage_percent and body["input_tokens"] == answer.input_tokens
    assert body["unused_tools"] == {"mcp_tools": 3}
    assert body["calls_until_threshold"] == answer.forecast.calls_until_threshold
    assert body["line"].startswith("ctx ")
    assert cli.main(["statusline", "--backend", f"file:{path}", "--color"]) == 0
    assert "\x1b[32m" in capsys.readouterr().out  # a quarter of the window or less: green


def test_an_empty_backend_prints_a_placeholder_and_says_why(tmp_path, capsys):
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    assert cli.main(["statusline", "--backend", f"file:{path}"]) == 3
    captured = capsys.readouterr()
    assert captured.out == "ctx —\n" and "no runs" in captured.err
