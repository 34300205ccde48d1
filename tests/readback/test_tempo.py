"""The Tempo reader against the TraceQL stub (fed with our exporter's real output) and MockTransport."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from agent_run import CANARY, STAGES
from conftest import RUN
from embedded_helpers import embedded_runtime
from stubs import TraceStore, serving
from stubs.tempo import TempoStub

import cw_middleware as cw

SECRET = "tempo-CANARY-token"


def _answers(reader: cw.Reader, run_id: str = RUN, stages=STAGES) -> dict:
    return {
        "stages": [s.as_dict() for s in reader.stages(run_id)],
        "windows": {s: reader.context_window(run_id, s).model_dump(mode="json") for s in stages},
        "runs": [r.as_dict() for r in reader.runs()],
    }


@pytest.mark.parametrize("v2", [True, False], ids=["api-v2", "api-v1-only"])
def test_tempo_answers_what_the_file_answers(exported_run, store, v2):
    expected = _answers(cw.reader(f"file:{exported_run}"))
    with serving(TempoStub(store, v2=v2)) as tempo:
        got = _answers(cw.reader(f"tempo+{tempo.url}"))
    assert got == expected
    assert got["windows"]["implement@1"]["details"] and got["windows"]["tests@1"]["unavailable_reason"] == "not_agent_stage"
    assert CANARY not in json.dumps(got)


def test_listings_come_from_search_alone_and_stages_from_their_traces(store):
    with serving(TempoStub(store)) as tempo:
        reader = cw.reader(f"tempo+{tempo.url}")
        reader.stages(RUN)
        listing_requests = list(tempo.requests)
        reader.context_window(RUN, "review@1")
    assert [p for p, _ in listing_requests] == ["/api/search"]
    query = listing_requests[0][1]["q"][0]
    assert query.startswith('{ span.agent.run.id = "run-traces-1" && (span.agent.stage.state = "started"')
    assert query.endswith("| select(span.agent.run.id, span.agent.stage.id, span.agent.stage.kind, span.agent.stage.state)")
    stage_requests = tempo.requests[len(listing_requests) :]
    assert stage_requests[0][1]["q"] == ['{ span.agent.run.id = "run-traces-1" && span.agent.stage.id = "review@1" }']
    assert int(stage_requests[0][1]["end"][0]) - int(stage_requests[0][1]["start"][0]) <= 7 * 86400 + 61
    # The answer's forecast reads the stage's calls too (its history: the same search, the same traces).
    fetched = {p for p, _ in stage_requests if p != "/api/search"}
    assert fetched == {"/api/v2/traces/" + t.lstrip("0") for t in _traces_of(store, "review@1")}


def _traces_of(store: TraceStore, stage_id: str) -> list[str]:
    from stubs import attribute_map

    return [
        t
        for t, spans in store.traces.items()
        if any(attribute_map(s.get("attributes")).get("agent.stage.id") == stage_id for _, _, s in spans)
    ]


def test_an_old_tempo_is_asked_the_old_api_once_then_only_that(store):
    with serving(TempoStub(store, v2=False)) as tempo:
        reader = cw.reader(f"tempo+{tempo.url}")
        reader.context_window(RUN, "plan@1")
        reader.context_window(RUN, "implement@1")
    trace_paths = [p for p, _ in tempo.requests if p != "/api/search"]
    versions = [p.split("/")[2] for p in trace_paths]
    assert versions[0] == "v2" and set(versions[1:]) == {"traces"}  # v2 refused once, then the old API only


def test_a_cut_short_span_set_fetches_the_whole_trace(exported_run, store):
    expected = [s.as_dict() for s in cw.reader(f"file:{exported_run}").stages(RUN)]
    with serving(TempoStub(store)) as tempo:
        assert [s.as_dict() for s in cw.reader(f"tempo+{tempo.url}?spss=1").stages(RUN)] == expected
    assert any(p.startswith("/api/v2/traces/") for p, _ in tempo.requests)


@pytest.mark.parametrize("run_id", ['quote"and\\backslash', "résumé-ü-run", "42"])
def test_ids_are_quoted_as_traceql_strings(tmp_path, run_id):
    path = tmp_path / "t.jsonl"
    from agent_run import run_agent

    with embedded_runtime(export=f"file:{path}"):
        run_agent(run_id)
    store = TraceStore()
    store.feed_file(str(path))
    expected = _answers(cw.reader(f"file:{path}"), run_id, ["review@1"])
    with serving(TempoStub(store)) as tempo:
        assert _answers(cw.reader(f"tempo+{tempo.url}"), run_id, ["review@1"]) == expected


def test_unknown_run_and_stage_are_not_found(store):
    with serving(TempoStub(store)) as tempo:
        reader = cw.reader(f"tempo+{tempo.url}")
        with pytest.raises(cw.NotFound, match="run 'nope' not found"):
            reader.context_window("nope", "plan@1")
        with pytest.raises(cw.NotFound, match="stage 'nope@1' not found"):
            reader.context_window(RUN, "nope@1")


def test_credentials_reach_tempo_and_never_an_error(store, caplog):
    caplog.set_level(logging.DEBUG)
    with serving(TempoStub(store, token=SECRET)) as tempo:
        assert cw.reader(f"tempo+{tempo.url}", bearer_token=SECRET).context_window(RUN, "plan@1").available
        with pytest.raises(cw.BackendResponseError, match="refused the request \\(HTTP 401\\)") as err:
            cw.reader(f"tempo+{tempo.url}", bearer_token="wrong" + SECRET).stages(RUN)
    assert SECRET not in str(err.value) and SECRET not in caplog.text


def test_bad_url_options_are_config_errors():
    for bad in ("limit=0", "spss=many", "lookback=-1d"):
        with pytest.raises(cw.ConfigError):
            cw.reader(f"tempo+http://127.0.0.1:1/?{bad}")


# ---------------------------------------------------------------- MockTransport: documented shapes, failures


def _mock_reader(handler, **options) -> cw.Reader:
    return cw.reader("tempo+http://tempo.local:3200", client=httpx.Client(transport=httpx.MockTransport(handler)), **options)


def test_the_documented_search_example_decodes():
    """The search answer of Tempo's API docs: foreign spans, no run of ours."""
    documented = {
        "traces": [
            {
                "traceID": "2f3e0cee77ae5dc9c17ade3689eb2e54",
                "rootServiceName": "shop-backend",
                "rootTraceName": "update-billing",
                "startTimeUnixNano": "1684778327699392724",
                "durationMs": 557,
                "spanSets": [
                    {
                        "spans": [
                            {
                                "spanID": "563d623c76514f8e",
                                "startTimeUnixNano": "1684778327735077898",
                                "durationNanos": "446979497",
                                "attributes": [{"key": "status", "value": {"stringValue": "error"}}],
                            }
                        ],
                        "matched": 1,
                    }
                ],
            }
        ],
        "metrics": {"totalBlocks": 13},
    }
    reader = _mock_reader(lambda request: httpx.Response(200, json=documented))
    assert reader.runs() == []


def test_failures_are_clear_and_bounded(monkeypatch):
    monkeypatch.setattr("cw_middleware._readback.http.time.sleep", lambda s: sleeps.append(s))
    sleeps: list[float] = []
    answers = iter([httpx.Response(502), httpx.Response(500), httpx.Response(200, json={"traces": []})])
    assert _mock_reader(lambda request: next(answers)).runs() == []
    assert sleeps == [0.2, 0.4]
    for body, message in ((f"oops {SECRET}", "not JSON"), (json.dumps({"traces": SECRET}), "not Tempo's shape")):
        with pytest.raises(cw.BackendResponseError, match=message) as err:
            _mock_reader(lambda request, b=body: httpx.Response(200, text=b)).runs()
        assert "Tempo at tempo+http://tempo.local:3200" in str(err.value) and SECRET not in str(err.value)

    def slow(request):
        raise httpx.ConnectTimeout("slow")

    with pytest.raises(cw.BackendUnavailable, match="did not answer within 0.5 s"):
        _mock_reader(slow, timeout=0.5, retries=0).stages(RUN)


def test_stub_search_results_carry_no_events_and_trimmed_hex_ids(store):
    with serving(TempoStub(store)) as tempo:
        q = '{ event:name = "agent.context_window.snapshot" && span.agent.stage.id = "review@1" } | select(span.agent.run.id)'
        found = httpx.get(f"{tempo.url}/api/search", params={"q": q, "spss": 5}).json()["traces"]
        trace = httpx.get(f"{tempo.url}/api/v2/traces/{found[0]['traceID']}").json()
        bad = httpx.get(f"{tempo.url}/api/search", params={"q": "{ span.x =~ 1 }"})
    assert len(found) == 2  # review@1 was entered twice
    spans = [s for t in found for s in t["spanSets"][0]["spans"]]
    assert spans and all("events" not in s for s in spans)
    assert all({a["key"] for a in s["attributes"]} == {"agent.stage.id", "agent.run.id"} for s in spans)
    assert all(not t["traceID"].startswith("0") for t in found)
    span = trace["trace"]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(span["traceId"]) == 24 and span["traceId"].endswith("==")  # base64, as Tempo's jsonpb writes bytes
    assert bad.status_code == 400


def test_the_cli_takes_the_tempo_url(store, capsys):
    from cw_middleware._cli import main as cli

    with serving(TempoStub(store)) as tempo:
        assert cli.main(["show", RUN, "implement@1", "--backend", f"tempo+{tempo.url}", "--json"]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert shown["stage_id"] == "implement@1" and shown["available"] is True
        assert cli.main(["stages", RUN, "--backend", f"tempo+{tempo.url}"]) == 0
        assert "tests@1" in capsys.readouterr().out
    port = tempo.httpd.server_address[1]  # closed now: nothing listens there
    assert cli.main(["show", RUN, "plan@1", "--backend", f"tempo+http://127.0.0.1:{port}?retries=0"]) == 4
    err = capsys.readouterr().err
    assert f"Tempo at tempo+http://127.0.0.1:{port} could not be reached" in err and "Traceback" not in err


def test_a_search_cut_at_its_limit_says_so(store, caplog):
    caplog.set_level(logging.WARNING, logger="cw_middleware")
    with serving(TempoStub(store)) as tempo:
        listed = cw.reader(f"tempo+{tempo.url}?limit=2").stages(RUN)
    assert len(listed) <= 2
    assert any("limit=2 traces" in r.getMessage() and "older spans may be missing" in r.getMessage() for r in caplog.records)
