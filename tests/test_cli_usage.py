"""The CLI's issue-21 answers: `show` (tools, unused definitions, cost, cache, the stage so far), `show --history`, `summary`."""

from __future__ import annotations

import json
import re

from embedded_helpers import exported_to
from providers import CHAT, provider  # noqa: F401 - the fixture
from test_stage_totals import RUN, TOOLS, _agent_stage

import cw_middleware as cw
from cw_middleware._cli import main as cli
from cw_middleware._kernel.formats import format_tokens, format_usd


def _export(tmp_path, provider=None):  # noqa: F811
    path = tmp_path / "t.jsonl"
    with exported_to(str(path)) as rt:
        finals = _agent_stage("agent@1")
        if provider is not None:
            provider[CHAT].tokens, provider[CHAT].cached_tokens = 1600, 1024
            with cw.stage(RUN, "cached@1"):
                messages = [{"role": "system", "content": "You are terse. " * 200}, {"role": "user", "content": "Go."}]
                kwargs = {"api_base": f"{provider.url}/v1", "api_key": "sk-test"}
                cw.completion(model="openai/gpt-4o", messages=messages, tools=TOOLS, **kwargs)
        rt.flush(5.0)
    return f"file:{path}", finals


def test_show_prints_the_tools_the_unused_ones_the_cost_and_the_stage_so_far(tmp_path, capsys, provider):  # noqa: F811
    backend, finals = _export(tmp_path, provider)
    assert cli.main(["show", RUN, "agent@1", "--backend", backend]) == 0
    out = capsys.readouterr().out
    last = finals[-1]
    rows = {t.name: t for t in last.tools}
    assert "Tools" in out and "definition" in out and "invoked" in out
    read_line = next(line for line in out.splitlines() if line.strip().startswith("read_file"))
    assert format_tokens(rows["read_file"].definition_tokens) in read_line and read_line.rstrip().endswith("3x")
    assert any(line.strip().startswith("never_used  (unused)") for line in out.splitlines())
    assert "Unused definitions: 1 tool(s)" in out and "over its 4 request(s)" in out
    assert f"this request {format_usd(last.cost.input_cost)} input (USD)" in out
    assert "Stage so far: 4 call(s)" in out and format_usd(last.stage_totals.input_cost) in out
    assert "1 compaction(s)" in out and "this request was compacted" in out
    assert cli.main(["show", RUN, "cached@1", "--backend", backend]) == 0
    cached = capsys.readouterr().out
    assert "cached 1,024 of 1,600 (64.0%)" in cached
    # the prefix: the tool definitions first (cached whole), then the long system prompt (in part)
    assert "cached 100%" in next(line for line in cached.splitlines() if line.strip().startswith("T Tools"))
    assert "cached 100%" not in next(line for line in cached.splitlines() if "System prompt" in line)


def test_show_history_draws_one_row_per_call_and_marks_the_compaction(tmp_path, capsys):
    backend, finals = _export(tmp_path)
    assert cli.main(["show", RUN, "agent@1", "--history", "--backend", backend]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if re.match(r"\s+\d+ \d\d:\d\d:\d\d ", line)]
    assert len(rows) == len(finals) == 4
    for row, snap in zip(rows, finals):
        assert format_tokens(snap.input_tokens) in row and format_usd(snap.cost.input_cost) in row
    assert "↓ compacted" in rows[3] and all("compacted" not in r for r in rows[:3])
    assert rows[2].count("█") > rows[3].count("█")  # to scale: the compacted request is the smaller one
    assert cli.main(["show", RUN, "agent@1", "--history", "--limit", "2", "--json", "--backend", backend]) == 0
    body = json.loads(capsys.readouterr().out)
    assert [p["input_tokens"] for p in body["snapshots"]] == [s.input_tokens for s in finals[-2:]]
    assert cli.main(["show", RUN, "nowhere@1", "--history", "--backend", backend]) == cli.EXIT_NOT_FOUND


def test_summary_prints_the_run_over_its_stages(tmp_path, capsys, provider):  # noqa: F811
    backend, finals = _export(tmp_path, provider)
    assert cli.main(["summary", RUN, "--backend", backend]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"run {RUN}: 2 stage(s), 5 call(s)")
    agent_line = next(line for line in out.splitlines() if line.strip().startswith("agent@1"))
    assert format_usd(finals[-1].stage_totals.input_cost) in agent_line and " 4 " in agent_line
    assert cli.main(["summary", RUN, "--json", "--backend", backend]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["totals"]["calls"] == 5 and [s["stage_id"] for s in report["stages"]] == ["agent@1", "cached@1"]
    assert cli.main(["summary", "run-nowhere", "--backend", backend]) == cli.EXIT_NOT_FOUND
