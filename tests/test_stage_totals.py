"""A stage over its calls with real LiteLLM: totals, invocations over the stage, compaction, history and the run summary.

Each expected number comes from the snapshots the calls published (``cw.snapshots()``, one
call's last snapshot after each call), never from the code that folds them.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
from embedded_helpers import exported_to
from providers import CHAT, provider  # noqa: F401 - the fixture
from stubs import TraceStore, serving
from stubs.jaeger import JaegerStub
from stubs.tempo import TempoStub

import cw_middleware as cw
from cw_middleware._kernel.contract import CATEGORIES
from cw_middleware._serve.server import make_server

RUN = "run-totals"
TOOLS = [
    {"type": "function", "function": {"name": "read_file", "description": "Read a file.", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "never_used", "description": "Deploy it all.", "parameters": {"type": "object"}}},
]


def _call(i: int) -> dict:
    return {"id": f"c{i}", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}


def _agent_stage(stage_id: str, turns: int = 3) -> list:
    """``turns`` calls that each ask for read_file and get its result, then one after a compaction."""
    finals = []
    messages = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix it."}]
    with cw.stage(RUN, stage_id):
        for i in range(turns):
            cw.completion(model="gpt-4o", messages=messages, tools=TOOLS, mock_response="", mock_tool_calls=[_call(i)])
            finals.append(cw.snapshots()[-1])
            messages = [
                *messages,
                {"role": "assistant", "content": None, "tool_calls": [_call(i)]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": f"file {i}\n" * 80},
            ]
        compacted = [messages[0], {"role": "user", "content": "Summary so far: three files read."}]
        cw.completion(model="gpt-4o", messages=compacted, tools=TOOLS, mock_response="done")
        finals.append(cw.snapshots()[-1])
    return finals


def _conversation(snapshot) -> int:
    return snapshot.tokens("conversation")


def test_stage_totals_count_each_call_once_at_its_latest_number(runtime):
    finals = _agent_stage("agent@1")
    totals = finals[-1].stage_totals
    assert totals.calls == len(finals) == 4
    assert totals.input_tokens == sum(f.input_tokens for f in finals)
    assert totals.input_cost == pytest.approx(sum(f.cost.input_cost for f in finals))
    assert totals.peak_usage_percent == max(f.usage_percent for f in finals)
    for category in CATEGORIES:
        assert totals.by_category[category].tokens == sum(f.tokens(category) for f in finals)
        assert totals.by_category[category].cost == pytest.approx(sum(f.cost.by_category[category] for f in finals))
    # the totals grow call by call: each snapshot says what the stage spent up to it
    assert [f.stage_totals.calls for f in finals] == [1, 2, 3, 4]


def test_the_peak_is_the_largest_final_number_of_a_call_not_an_estimate_its_usage_overruled(runtime, provider):  # noqa: F811
    """Issue 36 item 3: a local estimate far above the provider's usage must not stay the stage's peak."""
    provider[CHAT].tokens = 84  # the provider counts far less than the long prompt reads locally
    long_prompt = "word " * 2000
    with cw.stage("peak", "s@1"):
        cw.completion(
            model="openai/gpt-4o",
            messages=[{"role": "user", "content": long_prompt}],
            api_base=f"{provider.url}/v1",
            api_key="sk-test",
        )
    local, final = [s for s in cw.snapshots() if s.stage_id == "s@1"]
    assert local.input_tokens > 10 * 84  # the estimate the usage overruled
    window = final.context_window_tokens
    assert final.stage_totals.peak_usage_percent == round(100.0 * 84 / window, 4)


def test_a_compaction_is_decided_and_labelled_with_the_same_numbers_after_below_before(runtime, provider):  # noqa: F811
    """Issue 36 item 4: the provider reports the same total for both requests, so reconciled conversation tokens
    would say the second grew; the marker reads both requests' local counts, the numbers that decided it."""
    long_history = [{"role": "user", "content": f"turn {i}: " + "words " * 40} for i in range(12)]
    short_history = [{"role": "user", "content": "a summary of the twelve turns so far"}]
    with cw.stage("compact", "s@1"):
        for history in (long_history, short_history):
            cw.completion(model="openai/gpt-4o", messages=history, api_base=f"{provider.url}/v1", api_key="sk-test")
    local = {}
    for history in (long_history, short_history):
        estimate = cw.estimate(model="gpt-4o", messages=history)
        local[len(history)] = next(b.tokens for b in estimate.breakdown if b.category.value == "conversation")
    final = [s for s in cw.snapshots() if s.stage_id == "s@1" and s.count_method.value == "response_usage_scaled_breakdown"]
    marker = final[-1].compaction
    assert marker is not None and (marker.before_tokens, marker.after_tokens) == (local[12], local[1])
    assert marker.after_tokens < marker.before_tokens
    assert final[-1].stage_totals.compactions == 1


def test_invocations_over_the_stage_survive_a_compaction_which_is_marked(runtime):
    finals = _agent_stage("agent@1")
    rows = {t.name: t for t in finals[-1].tools}
    # read_file was called by each of the first three responses; the compacted request shows none of them
    assert [{t.name: t.invocations for t in f.tools}["read_file"] for f in finals] == [1, 2, 3, 3]
    assert finals[-1].compaction is not None and [f.compaction for f in finals[:3]] == [None, None, None]
    assert finals[-1].compaction.before_tokens == _conversation(finals[2])
    assert finals[-1].compaction.after_tokens == _conversation(finals[3]) < _conversation(finals[2])
    assert finals[-1].stage_totals.compactions == 1
    # the unused definition: its cost per request and over the stage's four requests
    assert rows["never_used"].invocations == 0
    (unused,) = finals[-1].unused_tools
    assert (unused.name, unused.requests, unused.definition_tokens) == ("never_used", 4, rows["never_used"].definition_tokens)
    assert unused.stage_definition_tokens == sum({t.name: t for t in f.tools}["never_used"].definition_tokens for f in finals)


def test_a_calls_republished_snapshot_carries_the_same_stage_numbers_and_the_next_call_moves_them(runtime):
    # A mocked call publishes its local estimate twice (at the request, then at the end with
    # mock_usage_not_reconciled): the second is the same numbers, and the stage's parts made for the
    # first are handed out again; the next call must still move every one of them.
    _agent_stage("agent@2", turns=3)
    snaps = [s for s in cw.snapshots() if s.stage_id == "agent@2"]
    assert len(snaps) == 8
    for n, (first, second) in enumerate(zip(snaps[::2], snaps[1::2]), start=1):
        assert first.stage_totals == second.stage_totals
        assert first.stage_totals.calls == n
        never = [{u.name: u for u in s.unused_tools}["never_used"] for s in (first, second)]
        assert [u.requests for u in never] == [n, n]
        assert [u.stage_definition_tokens for u in never] == [n * never[0].definition_tokens] * 2
        assert "mock_usage_not_reconciled" in {w.code for w in second.warnings}
    totals = [s.stage_totals.input_tokens for s in snaps[1::2]]
    assert totals == sorted(set(totals))  # each call adds its own input: strictly growing


def test_the_same_request_again_counts_its_definitions_once_more(runtime):
    # Identical requests give identical tool rows: the unused definitions' price over the stage still grows.
    messages = [{"role": "user", "content": "Again."}]
    with cw.stage(RUN, "agent@3"):
        for _ in range(3):
            cw.completion(model="gpt-4o", messages=messages, tools=TOOLS, mock_response="ok")
    snaps = [s for s in cw.snapshots() if s.stage_id == "agent@3"]
    never = [{u.name: u for u in s.unused_tools}["never_used"] for s in snaps]
    assert [u.requests for u in never] == [1, 1, 2, 2, 3, 3]
    assert [u.stage_definition_tokens for u in never] == [u.requests * u.definition_tokens for u in never]


def test_every_trace_reader_gives_totals_history_and_summary(tmp_path):
    path = str(tmp_path / "t.jsonl")
    with exported_to(path) as rt:
        first = _agent_stage("agent@1")
        second = _agent_stage("review@1", turns=1)
        rt.flush(5.0)
    store = TraceStore()
    store.feed_file(path)
    with serving(JaegerStub(store)) as jaeger, serving(TempoStub(store)) as tempo:
        for backend in (f"file:{path}", f"jaeger+{jaeger.url}", f"tempo+{tempo.url}"):
            reader = cw.reader(backend)
            answer = reader.context_window(RUN, "agent@1")
            assert answer.stage_totals == first[-1].stage_totals and answer.compaction == first[-1].compaction, backend
            unused = {u.name: u for u in answer.unused_tools}
            assert set(unused) == {"never_used"} and unused["never_used"].requests == 4
            history = reader.history(RUN, "agent@1")
            assert [p.input_tokens for p in history] == [f.input_tokens for f in first], backend
            assert [p.event_seq for p in history] == [f.event_seq for f in first]
            assert [p.compaction is not None for p in history] == [False, False, False, True]
            assert [p.input_cost for p in history] == pytest.approx([f.cost.input_cost for f in first])
            assert [p.input_tokens for p in reader.history(RUN, "agent@1", limit=2)] == [f.input_tokens for f in first[-2:]]
            report = reader.summary(RUN)
            assert [s.stage_id for s in report.stages] == ["agent@1", "review@1"]
            assert report.totals.calls == len(first) + len(second)
            stage_costs = first[-1].stage_totals.input_cost + second[-1].stage_totals.input_cost
            assert report.totals.input_cost == pytest.approx(stage_costs)
            assert report.totals.peak_usage_percent == max(f.usage_percent for f in first + second)
            assert report.model == "gpt-4o"
            with pytest.raises(cw.NotFound):
                reader.history(RUN, "nowhere@1")
            with pytest.raises(cw.NotFound):
                reader.summary("run-nowhere")


def test_the_http_api_serves_history_and_summary(tmp_path):
    path = str(tmp_path / "t.jsonl")
    with exported_to(path) as rt:
        finals = _agent_stage("agent@1")
        rt.flush(5.0)
    server = make_server(cw.reader(f"file:{path}"), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def get(route: str) -> tuple[int, dict]:
        try:
            with urllib.request.urlopen(server.url + route, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    try:
        status, body = get(f"/api/v1/runs/{RUN}/stages/agent@1/history?limit=3")
        assert status == 200 and body["run_id"] == RUN and body["stage_id"] == "agent@1" and body["limit"] == 3
        assert [p["input_tokens"] for p in body["snapshots"]] == [f.input_tokens for f in finals[-3:]]
        assert body["snapshots"][-1]["compaction"]["before_tokens"] == finals[-1].compaction.before_tokens
        status, body = get(f"/api/v1/runs/{RUN}/summary")
        assert status == 200 and body["run_id"] == RUN and body["totals"]["calls"] == 4
        assert body["stages"][0]["stage_totals"]["by_category"]["tools"]["tokens"] == sum(f.tokens("tools") for f in finals)
        status, body = get(f"/api/v1/runs/{RUN}/stages/agent@1/context-window")
        assert body["stage_totals"]["calls"] == 4 and body["tools"][0]["name"] in ("read_file", "never_used")
        assert get(f"/api/v1/runs/{RUN}/stages/agent@1/history?limit=0")[0] == 400
        assert get(f"/api/v1/runs/{RUN}/stages/nowhere@1/history")[0] == 404
        assert get("/api/v1/runs/run-nowhere/summary")[0] == 404
        status, doc = get("/openapi.json")
        assert {"/api/v1/runs/{run_id}/stages/{stage_id}/history", "/api/v1/runs/{run_id}/summary"} <= set(doc["paths"])
    finally:
        server.shutdown()
        server.server_close()


def test_a_stage_written_by_several_processes_has_one_set_of_totals_whoever_reads_it(tmp_path):
    """Issue 36 item 2: the Quick start run three times (each a fresh process: a ledger of its own, starting at zero)
    into one stage: its totals count every call once, at its latest number, in the reader's answer, `show --json`
    and `summary --json` alike, not the newest writer's own calls."""
    import subprocess
    import sys

    path = tmp_path / "telemetry.jsonl"
    finals = []
    for _ in range(3):  # three writers, one after another, each with its own runtime (and so its own ledger)
        with exported_to(str(path)) as runtime:
            finals += _agent_stage("agent@1", turns=1)
            runtime.flush(5.0)
    assert finals[-1].stage_totals.calls == 2  # the newest writer knows its own two calls only
    reader = cw.reader(f"file:{path}")
    totals = reader.context_window(RUN, "agent@1").stage_totals
    assert totals.calls == len(finals) == 6
    assert totals.input_tokens == sum(f.input_tokens for f in finals)
    assert totals.input_cost == pytest.approx(sum(f.cost.input_cost for f in finals))
    assert totals.peak_usage_percent == max(f.usage_percent for f in finals)
    assert totals.compactions == sum(1 for f in finals if f.compaction is not None)
    for category in CATEGORIES:
        assert totals.by_category[category].tokens == sum(f.tokens(category) for f in finals)
        assert totals.by_category[category].cost == pytest.approx(sum(f.cost.by_category[category] for f in finals))
    assert len(reader.history(RUN, "agent@1")) == 6

    def cli(*argv: str) -> dict:
        done = subprocess.run(
            [sys.executable, "-m", "cw_middleware", *argv, "--backend", f"file:{path}", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return json.loads(done.stdout)

    shown = cli("show", RUN, "agent@1")["stage_totals"]
    assert shown == totals.model_dump(mode="json")
    report = cli("summary", RUN)
    assert report["totals"]["calls"] == 6 and report["totals"]["input_tokens"] == totals.input_tokens
    assert report["stages"][0]["stage_totals"] == shown
