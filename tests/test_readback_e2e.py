"""Done-when: a multi-stage agent exported to the embedded file, read back by library, CLI and HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest
from embedded_helpers import embedded_runtime
from http_servers import OpenAIStub, running

import cw_middleware as cw
from cw_middleware._cli import main as cli
from cw_middleware._kernel.contract import Category, CountMethod, Staleness, UnavailableReason
from cw_middleware._serve.server import make_server

RUN = "run-42"


def _agent_messages(turn: int) -> list:
    messages = [
        cw.message(
            "system",
            [
                cw.segment("You are a coding agent.", "system_prompt"),
                cw.segment("# AGENTS.md\n- run pytest\n" * 20, "memory", "AGENTS.md"),
            ],
        ),
        {"role": "user", "content": "Fix the failing test."},
    ]
    for i in range(turn):
        messages.append({"role": "assistant", "content": f"step {i}: looked at the code " * 10})
        messages.append({"role": "user", "content": "continue"})
    return messages


TOOLS = [
    cw.tool(
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file.",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        }
    ),
    cw.tool(
        {
            "type": "function",
            "function": {
                "name": "create_issue",
                "description": "Open an issue.",
                "parameters": {"type": "object", "properties": {"title": {"type": "string"}}},
            },
        },
        cw.ToolSource.mcp("github"),
    ),
]


def _http(url: str, token: str | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture
def served():
    servers = []

    def start(backend: str, token: str | None = None):
        server = make_server(cw.reader(backend), "127.0.0.1", 0, token)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_multi_stage_agent_read_back_everywhere(tmp_path, capsys, served):
    path = tmp_path / "telemetry.jsonl"
    backend = f"file:{path}"
    with running(OpenAIStub) as provider, embedded_runtime(export=backend, service_name="e2e") as rt:
        with cw.stage(RUN, "plan@1", kind="planning"):
            pass  # a non-agent stage
        with cw.stage(RUN, "implement@1"):
            cw.completion(model="gpt-4o", messages=_agent_messages(0), tools=TOOLS, mock_response="ok")
            stream = cw.completion(
                model="gpt-4o", messages=_agent_messages(1), tools=TOOLS, mock_response="streamed", stream=True
            )
            assert "".join(c.choices[0].delta.content or "" for c in stream) == "streamed"
            # A live agent stage, read while it runs.
            cw.flush()
            live = cw.reader(backend).context_window(RUN, "implement@1")
            assert live.available and live.staleness is Staleness.LIVE
            assert live.count_method is CountMethod.LOCAL_ESTIMATE
            # The last call goes to a real (local) OpenAI endpoint: its usage reconciles the breakdown.
            cw.completion(
                model="openai/gpt-4o", api_base=provider.url, api_key="sk-test", messages=_agent_messages(2), tools=TOOLS
            )
        last_snapshot = rt.snapshots()[-1]
        with cw.stage(RUN, "review@1"):  # an agent stage with no calls yet, still running
            cw.flush()
            reader = cw.reader(backend)
            waiting = reader.context_window(RUN, "review@1")
            assert waiting.available is False
            assert waiting.unavailable_reason is UnavailableReason.NOT_OBSERVED
            assert [w.code for w in waiting.warnings] == ["not_observed"]
            listing = {s.stage_id: s for s in reader.stages(RUN)}
            assert listing["review@1"].staleness is Staleness.LIVE
    assert provider.requests and "cw" not in json.dumps(provider.requests[0].get("tools"))

    # ---- library
    reader = cw.reader(backend)
    impl = reader.context_window(RUN, "implement@1")
    assert impl.available and impl.staleness is Staleness.STORED
    assert impl.count_method is CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN
    assert impl.input_tokens == 1234 == sum(b.tokens for b in impl.breakdown)
    assert impl.event_seq == last_snapshot.event_seq
    assert impl.breakdown == last_snapshot.breakdown
    assert impl.context_window_tokens == last_snapshot.context_window_tokens
    assert {b.category for b in impl.breakdown if b.tokens} >= {
        Category.SYSTEM_PROMPT,
        Category.MEMORY,
        Category.TOOLS,
        Category.MCP_TOOLS,
        Category.CONVERSATION,
    }
    assert any(d.source == "AGENTS.md" and d.category is Category.MEMORY for d in impl.details)
    plan = reader.context_window(RUN, "plan@1")
    assert (plan.available, plan.unavailable_reason, plan.staleness) == (
        False,
        UnavailableReason.NOT_AGENT_STAGE,
        Staleness.UNAVAILABLE,
    )
    review = reader.context_window(RUN, "review@1")
    assert review.unavailable_reason is UnavailableReason.NOT_OBSERVED
    stages = {s.stage_id: s for s in reader.stages(RUN)}
    assert list(stages) == ["plan@1", "implement@1", "review@1"]
    assert stages["plan@1"].kind == "planning" and stages["implement@1"].kind == "agent"
    assert all(s.staleness is Staleness.STORED for s in stages.values())
    with pytest.raises(cw.NotFound):
        reader.context_window(RUN, "deploy@1")
    with pytest.raises(cw.NotFound):
        reader.context_window("run-0", "implement@1")
    with pytest.raises(cw.NotFound):
        reader.stages("run-0")

    # ---- CLI
    assert cli.main(["show", RUN, "implement@1", "--backend", backend, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown == json.loads(impl.model_dump_json())
    assert cli.main(["show", RUN, "implement@1", "--backend", backend]) == 0
    text = capsys.readouterr().out
    assert "Memory" in text and "Free space" in text and "AGENTS.md" in text and "stored" in text
    assert cli.main(["show", RUN, "plan@1", "--backend", backend]) == 0
    assert "not_agent_stage" in capsys.readouterr().out
    assert cli.main(["show", RUN, "nope", "--backend", backend]) == cli.EXIT_NOT_FOUND
    assert cli.main(["show", RUN, "x" * 300, "--backend", backend]) == cli.EXIT_USAGE
    assert cli.main(["show", RUN, "plan@1", "--backend", "nosuch:thing"]) == cli.EXIT_USAGE
    assert cli.main(["stages", RUN, "--backend", backend, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [s["stage_id"] for s in listed["stages"]] == ["plan@1", "implement@1", "review@1"]
    assert [s["agent_stage"] for s in listed["stages"]] == [False, True, True]

    # ---- HTTP
    server = served(backend)
    status, body = _http(f"{server.url}/api/v1/runs/{RUN}/stages/implement@1/context-window")
    assert status == 200 and body == shown
    status, body = _http(f"{server.url}/api/v1/runs/{RUN}/stages/plan@1/context-window")
    assert status == 200 and body["available"] is False and body["unavailable_reason"] == "not_agent_stage"
    status, body = _http(f"{server.url}/api/v1/runs/{RUN}/stages/review@1/context-window")
    assert status == 200 and body["unavailable_reason"] == "not_observed" and body["staleness"] == "unavailable"
    status, body = _http(f"{server.url}/api/v1/runs/{RUN}/stages/deploy@1/context-window")
    assert status == 404 and body["error"]["code"] == "not_found"
    status, body = _http(f"{server.url}/api/v1/runs/{RUN}/stages")
    assert status == 200 and [s["stage_id"] for s in body["stages"]] == ["plan@1", "implement@1", "review@1"]


def test_show_subprocess_never_imports_litellm(tmp_path):
    path = tmp_path / "t.jsonl"
    with embedded_runtime(export=f"file:{path}"):
        with cw.stage("r", "s"):
            cw.completion(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], mock_response="ok")
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['cw-middleware', 'show', 'r', 's', '--backend', 'file:{path}', '--json']\n"
        "from cw_middleware._cli.main import main\n"
        "rc = main(sys.argv[1:])\n"
        "heavy = sorted(m for m in ('litellm', 'tiktoken') if m in sys.modules)\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
        "sys.exit(rc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stderr
    assert json.loads(done.stdout)["available"] is True


def test_a_stream_consumed_after_its_stage_ended_leaves_the_stage_stored(tmp_path):
    from embedded_helpers import embedded_runtime

    path = tmp_path / "t.jsonl"
    with embedded_runtime(export=f"file:{path}") as runtime:
        with cw.stage(run_id="run-s", stage_id="impl@1"):
            stream = cw.completion(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True, mock_response="a b c"
            )
        chunks = list(stream)  # the call span ends now, after the stage span
        assert chunks and runtime.flush(5)
    reader = cw.reader(f"file:{path}")
    assert reader.context_window("run-s", "impl@1").staleness.value == "stored"
    assert [s.staleness.value for s in reader.stages("run-s")] == ["stored"]


@pytest.mark.parametrize("kind", ["planning", "tool"])
def test_a_stage_of_any_kind_that_called_a_model_reads_back_its_breakdown(tmp_path, capsys, served, kind):
    # The kind is a label: not_agent_stage is only for a stage that made no model call.
    path = tmp_path / "telemetry.jsonl"
    backend = f"file:{path}"
    with embedded_runtime(export=backend) as rt:
        with cw.stage(run_id="r", stage_id="planning@1", kind=kind):
            cw.completion(model="gpt-4o", messages=_agent_messages(0), mock_response="ok")
            rt.flush(5.0)  # the call's snapshots in one export line, the stage's end in a later one
        with cw.stage(run_id="r", stage_id="lookup@1", kind=kind):
            pass
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.startswith('{"resourceSpans"')]
    events = [
        e
        for line in lines
        for rs in line["resourceSpans"]
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
        for e in s.get("events", [])
    ]
    assert [e["name"] for e in events].count("agent.context_window.snapshot") >= 2  # the file holds the call's snapshots

    answer = cw.reader(backend).context_window("r", "planning@1")
    assert answer.available and answer.unavailable_reason is None and answer.input_tokens
    assert sum(item.tokens for item in answer.breakdown) == answer.input_tokens
    quiet = cw.reader(backend).context_window("r", "lookup@1")
    assert not quiet.available and quiet.unavailable_reason == UnavailableReason.NOT_AGENT_STAGE

    assert cli.main(["show", "r", "planning@1", "--backend", backend, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["available"] is True and shown["unavailable_reason"] is None
    assert cli.main(["show", "r", "planning@1", "--backend", backend]) == 0
    assert "not_agent_stage" not in capsys.readouterr().out

    server = served(backend)
    status, body = _http(f"{server.url}/api/v1/runs/r/stages/planning%401/context-window")
    assert status == 200 and body["available"] is True and body["input_tokens"] == answer.input_tokens
