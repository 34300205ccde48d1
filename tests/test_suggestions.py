"""A stage's suggestions (issue 39 item 2): what to cut and what it would have saved, largest saving first.

Real LiteLLM calls (mocked, or to the local server reporting chosen totals) exported to a file and read
back; the expected savings are added up here from the answer's own per-tool rows and forecast.
"""

from __future__ import annotations

from embedded_helpers import embedded_runtime
from providers import CHAT, provider  # noqa: F401 - the fixture

import cw_middleware as cw

GITHUB = cw.ToolSource.mcp("github")
MCP_TOOLS = [
    cw.tool({"type": "function", "function": {"name": f"gh_{i}", "description": "GitHub API " * 30, "parameters": {}}}, GITHUB)
    for i in range(4)
]
READ = {"type": "function", "function": {"name": "read_file", "description": "Read a file.", "parameters": {}}}
CALL = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}


def _agent_stage(path, stage_id: str, calls: int = 3):
    history = [{"role": "system", "content": "You are a coding agent."}]
    with embedded_runtime(export=f"file:{path}") as runtime:
        with cw.stage("advice", stage_id):
            for i in range(calls):
                history.append({"role": "user", "content": f"step {i}"})
                cw.completion(model="gpt-4o", messages=history, tools=[*MCP_TOOLS, READ], mock_response="ok")
                history.append({"role": "assistant", "content": None, "tool_calls": [CALL]})
                history.append({"role": "tool", "tool_call_id": "c1", "content": "source line of the file " * 120})
        assert runtime.flush(10)
    return cw.reader(f"file:{path}").context_window("advice", stage_id)


def test_an_mcp_server_never_called_and_a_tool_whose_results_dominate_are_named_with_their_savings(tmp_path):
    answer = _agent_stage(tmp_path / "t.jsonl", "agent@1")
    kinds = {(s.kind.value, s.target): s for s in answer.suggestions}
    unused = kinds[("unused_tools", "mcp:github")]
    rows = [u for u in answer.unused_tools if u.source == "mcp:github"]
    assert len(rows) == 4  # every gh_ tool, none called
    assert unused.tokens_per_request == sum(u.definition_tokens for u in rows)
    assert unused.tokens_in_stage == sum(u.stage_definition_tokens for u in rows)
    assert "4 of 4 tool(s) never called" in unused.message and "drop the server" in unused.message
    results = kinds[("large_tool_results", "read_file")]
    (row,) = [t for t in answer.tools if t.name == "read_file"]
    assert results.tokens_per_request == row.result_tokens and results.tokens_per_request > 0.25 * answer.input_tokens
    savings = [s.tokens_in_stage for s in answer.suggestions]
    assert savings == sorted(savings, reverse=True)


def test_a_stage_near_its_threshold_is_told_so(tmp_path, provider):  # noqa: F811
    path = tmp_path / "t.jsonl"
    with embedded_runtime(export=f"file:{path}") as runtime:
        with cw.stage("advice", "near@1"):
            for total in (90_000, 95_000, 100_000):
                provider[CHAT].tokens = total
                cw.completion(
                    model="openai/gpt-4o",
                    messages=[{"role": "user", "content": "go"}],
                    api_base=f"{provider.url}/v1",
                    api_key="sk-test",
                )
        assert runtime.flush(10)
    answer = cw.reader(f"file:{path}").context_window("advice", "near@1")
    (near,) = [s for s in answer.suggestions if s.kind.value == "near_threshold"]
    assert answer.forecast.calls_until_threshold <= 5
    assert near.tokens_per_request == 5_000 and f"within {answer.forecast.calls_until_threshold} call(s)" in near.message


def test_show_lists_the_suggestions_under_the_breakdown(tmp_path, capsys):
    from cw_middleware._cli import main as cli

    path = tmp_path / "t.jsonl"
    answer = _agent_stage(path, "shown@1")
    assert cli.main(["show", "advice", "shown@1", "--backend", f"file:{path}"]) == 0
    out = capsys.readouterr().out
    assert "Suggestions (largest saving first):" in out
    assert all(s.message in out for s in answer.suggestions)
