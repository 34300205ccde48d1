"""The Phoenix reader against a real Arize Phoenix (own venv, loopback) and MockTransport."""

from __future__ import annotations

import calendar
import json
import logging
from pathlib import Path

import httpx
import pytest
from agent_run import CANARY, STAGES, run_agent
from embedded_helpers import embedded_runtime, exported_to
from servers.phoenix import is_loopback
from stubs import TraceStore

import cw_middleware as cw
from cw_middleware._readback.phoenix import decode_phoenix_span

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "recorded"
SECRET = "phoenix-CANARY-key"


@pytest.fixture
def phoenix(phoenix_server):
    return phoenix_server


def _answers(reader: cw.Reader, run_id: str) -> dict:
    return {
        "windows": {s: reader.context_window(run_id, s).model_dump(mode="json") for s in STAGES},
        "stages": [(s.stage_id, s.kind, s.staleness.value) for s in reader.stages(run_id)],
    }


def _export_run(phoenix, tmp_path, run_id: str) -> str:
    path = str(tmp_path / "telemetry.jsonl")
    with exported_to(path, phoenix.traces_endpoint):
        run_agent(run_id)
    store = TraceStore()
    store.feed_file(path)
    phoenix.wait_for_run(run_id, store.span_count(run_id))
    return path


@pytest.mark.system
def test_phoenix_listens_on_loopback_only(phoenix):
    sockets = phoenix.listening()
    assert {port for _, port in sockets} == {phoenix.port, phoenix.grpc_port}
    assert all(is_loopback(address) for address, _ in sockets), sockets


@pytest.mark.system
@pytest.mark.parametrize("run_id", ["phoenix-run-1", "42", "résumé-run"])
def test_phoenix_answers_what_the_file_answers(phoenix, tmp_path, run_id):
    path = _export_run(phoenix, tmp_path, run_id)
    expected = _answers(cw.reader(f"file:{path}"), run_id)
    got = _answers(cw.reader(phoenix.backend), run_id)
    assert got == expected
    assert got["windows"]["implement@1"]["available"] and got["windows"]["implement@1"]["details"]
    assert CANARY not in json.dumps(got)
    runs = {r.run_id: r for r in cw.reader(phoenix.backend).runs()}
    assert runs[run_id].stages == len(STAGES) and runs[run_id].live_stages == 0


@pytest.mark.system
def test_unknown_project_run_and_stage_are_not_found(phoenix, tmp_path):
    _export_run(phoenix, tmp_path, "phoenix-run-2")
    with pytest.raises(cw.NotFound, match="run 'phoenix-run-2' not found"):
        cw.reader(f"{phoenix.backend}?project=no-such-project").context_window("phoenix-run-2", "plan@1")
    reader = cw.reader(f"{phoenix.backend}?project=default")
    assert reader.context_window("phoenix-run-2", "plan@1").available
    with pytest.raises(cw.NotFound, match="stage 'nope@1' not found"):
        reader.context_window("phoenix-run-2", "nope@1")
    with pytest.raises(cw.NotFound, match="run 'nope' not found"):
        reader.stages("nope")


@pytest.mark.system
def test_metrics_refused_by_phoenix_break_nothing(phoenix, tmp_path, monkeypatch, caplog):
    """Phoenix answers OTLP metrics with 405: the calls and the spans go on, our log says so once."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", phoenix.url)  # traces and metrics both to Phoenix
    caplog.set_level(logging.WARNING, logger="cw_middleware")
    with embedded_runtime(export="otlp", metric_interval_ms=200) as runtime:
        run_agent("phoenix-run-405")
        runtime.flush(5.0)
        runtime.flush(5.0)
    ours = [r for r in caplog.records if r.name == "cw_middleware"]
    assert len(ours) <= 2 and all("metric export" in r.getMessage() for r in ours)
    reader = cw.reader(phoenix.backend)
    for _ in range(100):
        try:
            if reader.context_window("phoenix-run-405", "review@1").available:
                break
        except cw.NotFound:
            pass
    assert reader.context_window("phoenix-run-405", "review@1").model == "gpt-4o-mini"


# ---------------------------------------------------------------- MockTransport: recorded shapes, paging, failures


def _mock_reader(handler, url="phoenix+http://phoenix.local:6006", **options) -> cw.Reader:
    return cw.reader(url, client=httpx.Client(transport=httpx.MockTransport(handler)), **options)


def test_recorded_span_shape_decodes():
    recorded = json.loads((RECORDED / "phoenix-20.26.1-v1-projects-spans.json").read_text())
    span = decode_phoenix_span(recorded["data"][0])
    assert span is not None
    assert (span.trace_id, span.span_id, span.name) == ("291411ad3ce6da27679855ed0724a4aa", "19c45bd5ede1f520", "chat gpt-4o")
    second = calendar.timegm((2026, 11, 30, 11, 3, 18)) * 10**9  # "2026-11-30T11:03:18.164202+00:00"
    assert span.start_ns == second + 164_202_000 and span.end_ns == second + 164_361_000
    event = span.events[0]
    assert event.name == "agent.context_window.snapshot" and event.time_ns == second + 164_300_000
    assert event.attributes["agent.context_window.tokens.tools"] == 3400
    assert span.attributes["gen_ai.usage.input_tokens"] == 14660


def _span(run_id: str, stage_id: str, span_id: str, name: str, state: str, start: str) -> dict:
    return {
        "id": "U3Bhbjox",
        "name": name,
        "context": {"trace_id": "a" * 32, "span_id": span_id},
        "parent_id": None,
        "start_time": start,
        "end_time": start,
        "attributes": {
            "agent.context_window.schema": 1,
            "agent.run.id": run_id,
            "agent.stage.id": stage_id,
            "agent.stage.kind": "tool",
            "agent.stage.state": state,
        },
        "events": [],
    }


def test_pages_are_followed_and_ids_are_sent_json_quoted():
    seen = []
    pages = {
        None: {
            "data": [_span("42", "s@1", "b" * 16, "agent.stage tool", "ended", "2026-01-01T00:00:02+00:00")],
            "next_cursor": "U3Bhbjoy",
        },
        "U3Bhbjoy": {
            "data": [_span("42", "s@1", "c" * 16, "agent.stage.start", "started", "2026-01-01T00:00:01+00:00")],
            "next_cursor": None,
        },
    }

    def handler(request):
        seen.append(request.url)
        return httpx.Response(200, json=pages[request.url.params.get("cursor")])

    stages = _mock_reader(handler, "phoenix+http://phoenix.local:6006?project=my%20proj").stages("42")
    assert [(s.stage_id, s.kind, s.staleness.value) for s in stages] == [("s@1", "tool", "stored")]
    assert len(seen) == 2 and seen[0].raw_path.startswith(b"/v1/projects/my%20proj/spans?")
    assert seen[0].params.get_list("attribute") == ["agent.context_window.schema:1", 'agent.run.id:"42"']
    assert seen[0].params["limit"] == "1000" and seen[1].params["cursor"] == "U3Bhbjoy"


def test_failures_are_clear_and_never_show_the_key(monkeypatch, caplog):
    monkeypatch.setattr("cw_middleware._readback.http.time.sleep", lambda s: None)
    caplog.set_level(logging.DEBUG)
    for response, error, message in [
        (httpx.Response(401, json={"detail": SECRET}), cw.BackendResponseError, "refused the request"),
        (httpx.Response(200, text=SECRET), cw.BackendResponseError, "not JSON"),
        (httpx.Response(200, json={"data": SECRET}), cw.BackendResponseError, "not Phoenix's shape"),
        (httpx.Response(500, text=SECRET), cw.BackendUnavailable, "HTTP 500 3 time"),
    ]:
        with pytest.raises(error, match=message) as err:
            _mock_reader(lambda request, r=response: r, bearer_token=SECRET).runs()
        assert "Phoenix at phoenix+http://phoenix.local:6006" in str(err.value) and SECRET not in str(err.value)
    assert SECRET not in caplog.text
    with pytest.raises(cw.ConfigError, match="project name"):
        cw.reader("phoenix+http://phoenix.local:6006?project=a/b")


def test_pages_out_of_budget_say_so(caplog):
    caplog.set_level(logging.WARNING, logger="cw_middleware")
    span = _span("r", "s@1", "b" * 16, "agent.stage tool", "ended", "2026-01-01T00:00:02+00:00")
    page = {"data": [span], "next_cursor": "more"}
    reader = _mock_reader(lambda request: httpx.Response(200, json=page), "phoenix+http://phoenix.local:6006?max_pages=3")
    assert [s.stage_id for s in reader.stages("r")] == ["s@1"]
    assert any("max_pages=3 pages of 1000 spans" in r.getMessage() for r in caplog.records)
