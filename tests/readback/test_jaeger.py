"""The Jaeger reader against the api_v3 stub (fed with our exporter's real output) and MockTransport."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx
import pytest
from agent_run import CANARY, STAGES, run_agent
from conftest import RUN
from embedded_helpers import embedded_runtime
from stubs import TraceStore, serving
from stubs.jaeger import JaegerStub

import cw_middleware as cw

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "jaeger-apiv3"
SECRET = "jaeger-CANARY-token"


def _answers(reader: cw.Reader) -> dict:
    return {
        "stages": [s.as_dict() for s in reader.stages(RUN)],
        "windows": {s: reader.context_window(RUN, s).model_dump(mode="json") for s in STAGES},
        "runs": [r.as_dict() for r in reader.runs()],
    }


@pytest.mark.parametrize(
    "version, storage",
    [((2, 19), "memory"), ((2, 18), "memory"), ((2, 19), "elasticsearch")],
    ids=["v2.19-memory", "v2.18-memory", "v2.19-elasticsearch"],
)
def test_jaeger_answers_what_the_file_answers(exported_run, store, version, storage):
    expected = _answers(cw.reader(f"file:{exported_run}"))
    with serving(JaegerStub(store, version=version, storage=storage)) as jaeger:
        got = _answers(cw.reader(f"jaeger+{jaeger.url}"))
    assert got["windows"] == expected["windows"]
    plan = got["windows"]["plan@1"]
    assert plan["available"] and plan["details"] and plan["staleness"] == "stored"
    assert got["windows"]["tests@1"]["unavailable_reason"] == "not_agent_stage"
    if storage == "memory":
        assert got["stages"] == expected["stages"] and got["runs"] == expected["runs"]
    else:  # Jaeger's span model keeps microseconds
        assert [(s["stage_id"], s["kind"], s["staleness"]) for s in got["stages"]] == [
            (s["stage_id"], s["kind"], s["staleness"]) for s in expected["stages"]
        ]
    assert CANARY not in json.dumps(got)


def test_jaeger_search_names_the_schema_marker_and_the_ids_in_snake_case(store):
    with serving(JaegerStub(store, version=(2, 18))) as jaeger:
        cw.reader(f"jaeger+{jaeger.url}?service=cw-middleware").context_window(RUN, "plan@1")
    path, query = jaeger.requests[0]
    assert path == "/api/v3/traces"
    assert json.loads(query["query.attributes"][0]) == {
        "agent.context_window.schema": "1",
        "agent.run.id": RUN,
        "agent.stage.id": "plan@1",
    }
    assert query["query.service_name"] == ["cw-middleware"]
    assert query["query.start_time_min"][0].endswith("Z") and query["query.start_time_max"][0] > query["query.start_time_min"][0]
    assert "query.serviceName" not in query  # before v2.19 only the snake_case names exist


def test_an_older_jaeger_ignores_the_attributes_and_the_answer_stays_right(tmp_path, store):
    other = tmp_path / "other.jsonl"
    with embedded_runtime(export=f"file:{other}"):
        run_agent("another-run")
    store.feed_file(str(other))  # now the newest traces belong to another run
    with serving(JaegerStub(store, version=(2, 18))) as jaeger:
        reader = cw.reader(f"jaeger+{jaeger.url}")
        assert [s.stage_id for s in reader.stages(RUN)] == STAGES
        assert reader.context_window(RUN, "review@1").model == "gpt-4o-mini"
        assert {r.run_id for r in reader.runs()} == {RUN, "another-run"}


def test_a_run_larger_than_one_search_is_read_page_by_page(exported_run, store):
    expected = [s.as_dict() for s in cw.reader(f"file:{exported_run}").stages(RUN)]
    with serving(JaegerStub(store)) as jaeger:
        got = [s.as_dict() for s in cw.reader(f"jaeger+{jaeger.url}?search_depth=2").stages(RUN)]
    assert got == expected
    assert len(jaeger.requests) >= 3  # 5 traces, 2 a page


def test_unknown_run_and_stage_are_not_found(store):
    with serving(JaegerStub(store)) as jaeger:
        reader = cw.reader(f"jaeger+{jaeger.url}")
        with pytest.raises(cw.NotFound, match="run 'nope' not found"):
            reader.context_window("nope", "plan@1")
        with pytest.raises(cw.NotFound, match="stage 'nope@1' not found"):
            reader.context_window(RUN, "nope@1")
        with pytest.raises(cw.NotFound):
            cw.reader(f"jaeger+{jaeger.url}?service=someone-else").stages(RUN)


def test_a_missing_stage_costs_its_search_and_one_probe_not_a_run_listing(store):
    with serving(JaegerStub(store)) as jaeger:
        reader = cw.reader(f"jaeger+{jaeger.url}?search_depth=2")  # the run's listing takes 3 searches here
        with pytest.raises(cw.NotFound, match="stage 'nope@1' not found in run"):
            reader.context_window(RUN, "nope@1")
        asked = [json.loads(query["query.attributes"][0]) for _, query in jaeger.requests]
    assert [a.get("agent.stage.id") for a in asked] == ["nope@1", None]
    assert asked[1]["agent.run.id"] == RUN


def test_a_search_deeper_than_the_store_is_a_clear_error(store, monkeypatch):
    monkeypatch.setattr("cw_middleware._readback.http.time.sleep", lambda s: None)
    with serving(JaegerStub(store, max_traces=100)) as jaeger:
        with pytest.raises(cw.BackendUnavailable, match=r"Jaeger at jaeger\+http://127\.0\.0\.1:\d+ answered HTTP 500"):
            cw.reader(f"jaeger+{jaeger.url}").stages(RUN)
        assert [s.stage_id for s in cw.reader(f"jaeger+{jaeger.url}?search_depth=100").stages(RUN)] == STAGES


def test_credentials_reach_jaeger_and_never_an_error(store, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    with serving(JaegerStub(store, token=SECRET)) as jaeger:
        monkeypatch.setenv("CW_BACKEND_TOKEN", SECRET)
        assert cw.reader(f"jaeger+{jaeger.url}").context_window(RUN, "implement@1").available
        monkeypatch.setenv("CW_BACKEND_TOKEN", "wrong-" + SECRET)
        with pytest.raises(cw.BackendResponseError, match="HTTP 401") as err:
            cw.reader(f"jaeger+{jaeger.url}").context_window(RUN, "implement@1")
    assert SECRET not in str(err.value) and SECRET not in caplog.text


def test_bad_url_options_are_config_errors():
    for bad in ("search_depth=0", "search_depth=lots", "lookback=soon", "max_pages=0"):
        with pytest.raises(cw.ConfigError):
            cw.reader(f"jaeger+http://127.0.0.1:1/?{bad}")


# ---------------------------------------------------------------- MockTransport: recorded shapes, failures


def _mock_reader(handler, **options) -> cw.Reader:
    return cw.reader("jaeger+http://jaeger.local:16686", client=httpx.Client(transport=httpx.MockTransport(handler)), **options)


def test_recorded_api_v3_answers_decode():
    """Jaeger's own FindTraces snapshot: a foreign trace without our attributes is simply no run."""
    recorded = json.loads((FIXTURES / "FindTraces.json").read_text())
    reader = _mock_reader(lambda request: httpx.Response(200, json=recorded))
    assert reader.runs() == []
    with pytest.raises(cw.NotFound):
        reader.stages(RUN)


def test_no_traces_found_is_absence_and_errors_are_clear(monkeypatch):
    monkeypatch.setattr("cw_middleware._readback.http.time.sleep", lambda s: None)
    answers = {
        "none": httpx.Response(404, json={"error": {"httpCode": 404, "message": "No traces found"}}),
        "garbage": httpx.Response(200, text=f"<html>{SECRET}</html>"),
        "list": httpx.Response(200, json=[SECRET]),
        "down": httpx.Response(503, text=SECRET),
    }
    calls = []
    now = {"mode": "none"}

    def handler(request):
        calls.append(request)
        if now["mode"] == "timeout":
            raise httpx.ReadTimeout("slow")
        return answers[now["mode"]]

    for mode, error, message in [
        ("garbage", cw.BackendResponseError, "not JSON"),
        ("list", cw.BackendResponseError, "not api_v3's shape"),
        ("down", cw.BackendUnavailable, "HTTP 503 3 time"),
        ("timeout", cw.BackendUnavailable, "did not answer within"),
    ]:
        now["mode"] = mode
        with pytest.raises(error, match=message) as err:
            _mock_reader(handler, bearer_token=SECRET).stages(RUN)
        assert "Jaeger at jaeger+http://jaeger.local:16686" in str(err.value) and SECRET not in str(err.value)
    now["mode"] = "none"
    with pytest.raises(cw.NotFound):
        _mock_reader(handler).context_window(RUN, "plan@1")
    assert all(c.headers.get("authorization") in (None, f"Bearer {SECRET}") for c in calls)


# ---------------------------------------------------------------- the stub keeps to the recorded shapes


def test_stub_answers_in_the_recorded_shapes():
    store = TraceStore()
    store.feed(json.loads((FIXTURES / "otel_traces_01.json").read_text()))
    recorded = json.loads((FIXTURES / "GetTrace.json").read_text())
    with serving(JaegerStub(store)) as jaeger:
        trace_id = next(iter(store.traces))
        got = httpx.get(f"{jaeger.url}/api/v3/traces/{trace_id}").json()
        missing = httpx.get(
            f"{jaeger.url}/api/v3/traces",
            params={"query.start_time_min": "2000-01-01T00:00:00Z", "query.start_time_max": "2000-01-02T00:00:00Z"},
        )
        no_window = httpx.get(f"{jaeger.url}/api/v3/traces")
    assert set(got) == set(recorded) == {"result"} and set(got["result"]) == set(recorded["result"])
    span = got["result"]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert span["traceId"] == trace_id and len(span["spanId"]) == 16  # hex, as recorded
    assert missing.status_code == 404 and missing.json() == {"error": {"httpCode": 404, "message": "No traces found"}}
    assert no_window.status_code == 400


def test_the_cli_takes_the_jaeger_url(store, capsys):
    from cw_middleware._cli import main as cli

    with serving(JaegerStub(store)) as jaeger:
        assert cli.main(["show", RUN, "review@1", "--backend", f"jaeger+{jaeger.url}", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["model"] == "gpt-4o-mini"
        assert cli.main(["show", "no-such-run", "review@1", "--backend", f"jaeger+{jaeger.url}"]) == 3
        assert "not found" in capsys.readouterr().err


def test_a_search_out_of_pages_says_so(store, caplog):
    caplog.set_level(logging.WARNING, logger="cw_middleware")
    with serving(JaegerStub(store)) as jaeger:
        listed = cw.reader(f"jaeger+{jaeger.url}?search_depth=1&max_pages=3").stages(RUN)
    assert [s.stage_id for s in listed] == ["tests@1", "review@1"]  # the newest three traces: review@1 twice, tests@1
    assert any("max_pages=3 searches of search_depth=1" in r.getMessage() for r in caplog.records)
