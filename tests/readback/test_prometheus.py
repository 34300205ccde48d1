"""The Prometheus reader: against a real Prometheus and VictoriaMetrics fed by a real agent run,
and against recorded Prometheus 2.42 answer shapes through httpx.MockTransport."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from servers.agent_metrics import FINISHED_RUN, NON_AGENT_STAGE, ODD_STAGE, RUN, STAGES, UNLABELLED_RUN
from test_content_free import CANARIES

import cw_middleware as cw
from cw_middleware._kernel.contract import CountMethod, Staleness, UnavailableReason
from cw_middleware._readback import BACKENDS
from cw_middleware._readback.prometheus import PrometheusReader, parse_duration, quote

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "recorded" / "prometheus-2.42-query-responses.json"
# What a metrics backend can tell; the rest (details, event_seq, the snapshot's own warnings) it cannot.
COMPARED = (
    "available",
    "provider",
    "model",
    "context_window_tokens",
    "input_tokens",
    "usage_percent",
    "count_method",
    "breakdown",
)


def comparable(answer) -> dict:
    """The COMPARED fields of an answer (a model or its JSON); breakdown items without cached_tokens (not a metric)."""
    body = answer if isinstance(answer, dict) else answer.model_dump(mode="json")
    out = {f: body[f] for f in COMPARED}
    out["breakdown"] = [{k: v for k, v in item.items() if k != "cached_tokens"} for item in body["breakdown"]]
    return out


def _codes(answer) -> list[str]:
    return [w.code for w in answer.warnings]


# ---------------------------------------------------------------- real servers


@pytest.fixture(params=["prometheus", "victoria-metrics"])
def server(request, agent_metrics):
    return agent_metrics.prometheus if request.param == "prometheus" else agent_metrics.victoria_metrics


@pytest.mark.system
def test_every_stage_reads_back_what_the_file_says_within_what_metrics_carry(server, agent_metrics):
    metrics = cw.reader(server.reader_url)
    spans = cw.reader(f"file:{agent_metrics.agent_file}")
    for stage_id in STAGES:
        got, expected = metrics.context_window(RUN, stage_id), spans.context_window(RUN, stage_id)
        assert comparable(got) == comparable(expected), stage_id
        assert got.stage_id == stage_id and got.staleness is Staleness.LIVE  # its process still exports it
        assert got.details == [] and got.event_seq is None and _codes(got) == ["from_metrics"]
        # The scrape that first showed the snapshot: after it was made, within a few scrape intervals.
        assert expected.generated_at - timedelta(seconds=0.5) <= got.generated_at <= expected.generated_at + timedelta(seconds=5)


@pytest.mark.system
def test_cost_and_unused_tools_read_back_from_their_metrics(server, agent_metrics):
    """agent.context_window.cost (a counter: the stage's calls, each once) and agent.context_window.unused_tool_tokens."""
    metrics = cw.reader(server.reader_url)
    spans = cw.reader(f"file:{agent_metrics.agent_file}")
    for stage_id in STAGES:
        got, expected = metrics.context_window(RUN, stage_id), spans.context_window(RUN, stage_id)
        assert got.stage_totals is not None and got.stage_totals.calls is None  # calls are not a metric
        assert got.stage_totals.input_cost == pytest.approx(expected.stage_totals.input_cost), stage_id
        for category, totals in expected.stage_totals.by_category.items():
            assert got.stage_totals.by_category[category].cost == pytest.approx(totals.cost), (stage_id, category)
        assert got.unused_tool_tokens == (expected.unused_tool_tokens or 0), stage_id
    canary = metrics.context_window(RUN, "canary@1")  # its request defines tools it never calls
    assert canary.unused_tool_tokens > 0


@pytest.mark.system
def test_engineered_stages_read_as_engineered(server):
    metrics = cw.reader(server.reader_url)
    implement = metrics.context_window(RUN, "implement@1")
    assert (implement.count_method, implement.input_tokens, implement.context_window_tokens) == (
        CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN,
        1234,
        128000,
    )
    assert sum(b.tokens for b in implement.breakdown) == 1234
    switched = metrics.context_window(RUN, "switch@1")
    assert (switched.provider, switched.model, switched.context_window_tokens) == ("anthropic", "claude-sonnet-4-5", 200000)
    exceeded = metrics.context_window(RUN, "exceeded@1")
    assert (exceeded.context_window_tokens, exceeded.usage_percent) == (1000, 123.4)
    assert metrics.context_window(RUN, ODD_STAGE).stage_id == ODD_STAGE


@pytest.mark.system
def test_stages_and_runs_are_listed_from_label_values(server):
    metrics = cw.reader(server.reader_url)
    stages = metrics.stages(RUN)
    assert {s.stage_id for s in stages} == set(STAGES)  # the stage without LLM calls has no metrics
    assert all(s.kind is None and s.staleness is Staleness.LIVE for s in stages)
    assert all(s.started_at is not None and s.started_at <= s.last_seen_at for s in stages), [
        (s.started_at, s.last_seen_at) for s in stages
    ]
    runs = {r.run_id: r for r in metrics.runs()}
    assert set(runs) == {RUN, FINISHED_RUN}  # the unlabelled run cannot be listed
    assert (runs[RUN].stages, runs[RUN].live_stages) == (len(STAGES), len(STAGES))
    assert (runs[FINISHED_RUN].stages, runs[FINISHED_RUN].live_stages) == (1, 0)
    # Newest activity first. Both runs were scraped within the last interval, by separate targets with
    # their own scrape offsets, so which one is newer is the samples' business, not the test's.
    listed = metrics.runs()
    assert [r.last_seen_at for r in listed] == sorted((r.last_seen_at for r in listed), reverse=True)


@pytest.mark.system
def test_a_stage_whose_process_exited_reads_stored(server, agent_metrics):
    got = cw.reader(server.reader_url).context_window(FINISHED_RUN, "only@1")
    expected = cw.reader(f"file:{agent_metrics.finished_file}").context_window(FINISHED_RUN, "only@1")
    assert got.staleness is Staleness.STORED and got.available
    assert comparable(got) == comparable(expected)


@pytest.mark.system
def test_a_quiet_stage_past_the_horizon_reads_stored(server, agent_metrics):
    newest = max(s.generated_at.timestamp() for s in agent_metrics.agent.snapshots())
    time.sleep(max(0.0, newest + 4 - time.time()))  # the run has been quiet for more than the 2 s horizon
    metrics = cw.reader(server.reader_url, stale_after=2)
    assert metrics.context_window(RUN, "plan@1").staleness is Staleness.STORED
    assert {s.staleness for s in metrics.stages(RUN)} == {Staleness.STORED}
    assert {r.run_id: r.live_stages for r in metrics.runs()}[RUN] == 0


@pytest.mark.system
def test_without_run_labels_it_says_so_and_never_guesses(server):
    metrics = cw.reader(server.reader_url)
    answer = metrics.context_window(UNLABELLED_RUN, "s@1")
    assert (answer.available, answer.unavailable_reason, answer.breakdown) == (False, UnavailableReason.NOT_OBSERVED, [])
    assert _codes(answer) == ["metrics_without_run_labels", "from_metrics"]
    assert "metric_run_labels" in answer.warnings[0].message
    # With an unlabelled producer in the backend, an unknown run cannot be ruled out either.
    assert _codes(metrics.context_window("no-such-run", "x")) == ["metrics_without_run_labels", "from_metrics"]
    with pytest.raises(cw.BackendError, match=r"without run/stage labels.*CW_METRIC_RUN_LABELS=1"):
        metrics.stages(UNLABELLED_RUN)


@pytest.mark.system
def test_unknown_stages_of_a_known_run_are_not_found(server):
    metrics = cw.reader(server.reader_url)
    with pytest.raises(cw.NotFound, match="stage 'nope'"):
        metrics.context_window(RUN, "nope")
    with pytest.raises(cw.NotFound, match=f"stage '{NON_AGENT_STAGE}'"):
        metrics.context_window(RUN, NON_AGENT_STAGE)


@pytest.mark.system
def test_answers_and_listings_are_content_free(server):
    metrics = cw.reader(server.reader_url)
    text = metrics.context_window(RUN, "canary@1").model_dump_json()
    text += json.dumps([s.as_dict() for s in metrics.stages(RUN)]) + json.dumps([r.as_dict() for r in metrics.runs()])
    assert '"input_tokens":' in text
    for canary in CANARIES.values():
        assert canary not in text


@pytest.mark.system
def test_the_cli_reads_from_prometheus(server, capsys):
    from cw_middleware._cli import main as cli

    assert cli.main(["show", RUN, "implement@1", "--backend", server.reader_url, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["input_tokens"], shown["count_method"]) == (1234, "response_usage_scaled_breakdown")


# ---------------------------------------------------------------- recorded shapes, MockTransport


def _recorded() -> dict[str, Any]:
    return json.loads(RECORDED.read_text())


def _with_ids(result: list[dict[str, Any]], **labels: str) -> list[dict[str, Any]]:
    """Recorded series with run/stage labels added (the recording's producer had them off)."""
    return [{**item, "metric": {**item["metric"], **labels}} for item in result]


def _vector(result: list[dict[str, Any]]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


class FakePrometheus:
    """Answers the reader's PromQL from canned series, by what each query asks for; records the queries."""

    def __init__(self, counters: list[dict[str, Any]], tokens: list[dict[str, Any]], limits: list[dict[str, Any]]):
        self.counters, self.tokens, self.limits = counters, tokens, limits
        self.raw: list[dict[str, Any]] = []  # matrix items: the raw samples; the sample-time queries derive from them
        self.overflow = False
        self.queries: list[str] = []
        self.headers: list[httpx.Headers] = []

    def _times(self, pick) -> list[dict[str, Any]]:
        return _times_of(self.raw, pick)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path.endswith("/api/v1/query")
        query = request.url.params["query"]
        self.queries.append(query)
        self.headers.append(request.headers)
        if "otel_metric_overflow" in query:
            return httpx.Response(200, json=_vector([{"metric": {}, "value": [1, "3"]}] if self.overflow else []))
        if query.startswith("last_over_time(agent_context_window_snapshots_total"):
            return httpx.Response(200, json=_vector(self.counters))
        if query.startswith("last_over_time(agent_context_window_tokens"):
            return httpx.Response(200, json=_vector(self.tokens))
        if query.startswith("last_over_time(agent_context_window_limit"):
            return httpx.Response(200, json=_vector(self.limits))
        if query.startswith("max without () (timestamp("):  # when each series' last sample came
            return httpx.Response(200, json=_vector(self._times(max)))
        if query.startswith("min without () (min_over_time((count_over_time("):  # when each series' first sample came
            return httpx.Response(200, json=_vector(self._times(min)))
        if query.startswith("max without () (max_over_time((("):  # the last step at which a series moved: older
            return httpx.Response(200, json=_vector([]))
        if query.endswith("s]"):
            return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": self.raw}})
        if query.startswith("count(") or query.startswith("count by"):
            return httpx.Response(200, json=_vector([]))
        return httpx.Response(200, json=_vector(self.counters))  # the plain selector: exported now


def _recorded_tokens(**ids: str) -> list[dict[str, Any]]:
    tokens = _with_ids(_recorded()["agent_context_window_tokens"]["data"]["result"], **ids)
    for item in tokens:
        item["metric"].pop("gen_ai_operation_name", None)  # the recording's producer added it; ours does not
    return tokens


def _source_labels(model: str = "gpt-4o") -> dict[str, str]:
    """A series' producer/model labels, as in the recording."""
    labels = dict(_recorded_tokens(agent_run_id="r", agent_stage_id="s")[0]["metric"])
    for key in ("__name__", "agent_context_window_category"):
        labels.pop(key)
    return {**labels, "gen_ai_request_model": model}


def _times_of(raw: list[dict[str, Any]], pick) -> list[dict[str, Any]]:
    out = []
    for item in raw:
        metric = {k: v for k, v in item["metric"].items() if k != "__name__"}
        out.append({"metric": metric, "value": [1796036958.6, str(pick(t for t, _ in item["values"]))]})
    return out


def _counter(method: str, model: str = "gpt-4o") -> dict[str, Any]:
    metric = {
        **_source_labels(model),
        "__name__": "agent_context_window_snapshots_total",
        "agent_context_window_count_method": method,
    }
    return {"metric": metric, "value": [1796036958.6, "1"]}


def _raw(counter: dict[str, Any], values: list[tuple[float, str]]) -> dict[str, Any]:
    return {"metric": counter["metric"], "values": [[t, v] for t, v in values]}


def _fake(*counters: dict[str, Any]) -> FakePrometheus:
    tokens = _recorded_tokens(agent_run_id="r", agent_stage_id="s")
    limit = [{"metric": {**_source_labels(), "__name__": "agent_context_window_limit"}, "value": [1796036958.6, "128000"]}]
    return FakePrometheus(list(counters) or [_counter("local_estimate")], tokens, limit)


def _reader(fake: FakePrometheus, url: str = "prometheus+http://prom.test:9090", **options: Any) -> cw.Reader:
    client = httpx.Client(transport=httpx.MockTransport(fake))
    return cw.reader(url, client=client, retries=0, **options)


def test_recorded_answer_shapes_decode_into_the_contract():
    fake = _fake(_counter("local_estimate"))
    answer = _reader(fake).context_window("r", "s")
    # The recording's numbers: 1200 + 3400 + 800 + 0 + 250 + 9000 + 10.
    assert {b.category.value: b.tokens for b in answer.breakdown} == {
        "system_prompt": 1200,
        "tools": 3400,
        "mcp_tools": 800,
        "skills": 0,
        "memory": 250,
        "conversation": 9000,
        "other": 10,
    }
    assert (answer.input_tokens, answer.context_window_tokens, answer.usage_percent) == (14660, 128000, 11.4531)
    assert (answer.provider, answer.model, answer.count_method) == ("openai", "gpt-4o", CountMethod.LOCAL_ESTIMATE)
    assert _codes(answer) == ["from_metrics"] and answer.details == []


def test_two_methods_in_one_scrape_the_better_one_is_the_latest():
    local, usage = _counter("local_estimate"), _counter("response_usage_scaled_breakdown")
    fake = _fake(local, usage)
    fake.raw = [_raw(local, [(100.0, "1"), (101.0, "1"), (102.0, "2")]), _raw(usage, [(101.0, "1"), (102.0, "2")])]
    answer = _reader(fake).context_window("r", "s")
    assert answer.count_method is CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN
    assert answer.generated_at.timestamp() == 102.0 and _codes(answer) == ["from_metrics"]


def test_a_later_scrape_beats_a_better_method():
    local, usage = _counter("local_estimate"), _counter("response_usage_scaled_breakdown")
    fake = _fake(local, usage)
    fake.raw = [_raw(local, [(100.0, "1"), (101.0, "1"), (102.0, "2")]), _raw(usage, [(100.0, "1"), (101.0, "2"), (102.0, "2")])]
    assert _reader(fake).context_window("r", "s").count_method is CountMethod.LOCAL_ESTIMATE


def test_two_models_in_one_scrape_are_flagged_ambiguous():
    a, b = _counter("local_estimate", "gpt-4o"), _counter("local_estimate", "gpt-4o-mini")
    fake = _fake(a, b)
    fake.raw = [_raw(a, [(100.0, "1"), (101.0, "2")]), _raw(b, [(100.0, "1"), (101.0, "2")])]
    fake.tokens += [{**t, "metric": {**t["metric"], "gen_ai_request_model": "gpt-4o-mini"}} for t in fake.tokens]
    assert _codes(_reader(fake).context_window("r", "s")) == ["from_metrics", "metrics_ambiguous"]


def test_a_request_whose_gauges_are_not_set_yet_yields_the_one_before():
    old, new = _counter("response_usage_scaled_breakdown", "gpt-4o"), _counter("local_estimate", "o3")
    fake = _fake(old, new)  # the gauges exist for gpt-4o only: o3's first call is in flight
    fake.raw = [_raw(old, [(100.0, "1"), (101.0, "2")]), _raw(new, [(100.0, "0"), (102.0, "1")])]
    answer = _reader(fake).context_window("r", "s")
    assert (answer.model, answer.count_method, answer.input_tokens) == (
        "gpt-4o",
        CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN,
        14660,
    )


def test_series_past_the_producers_limit_are_flagged_not_denied():
    fake = _fake()
    fake.counters, fake.overflow = [], True
    answer = _reader(fake).context_window("r", "s")
    assert (answer.available, _codes(answer)) == (False, ["metrics_series_overflow", "from_metrics"])


def test_ids_are_quoted_in_promql():
    fake = _fake()
    _reader(fake).context_window('run "1" \\ x', "s")
    assert 'agent_run_id="run \\"1\\" \\\\ x"' in fake.queries[0]
    assert quote('a"b\\c') == '"a\\"b\\\\c"'


def test_lookback_option_bounds_every_query():
    fake = _fake()
    _reader(fake, "prometheus+http://prom.test:9090?lookback=30d").context_window("r", "s")
    assert (
        fake.queries[0] == 'last_over_time(agent_context_window_snapshots_total{agent_run_id="r",agent_stage_id="s"}[2592000s])'
    )
    assert parse_duration("90") == 90 and parse_duration("15m") == 900 and parse_duration("2w") == 1209600
    for bad in ("soon", "0", "-1d", "7y"):
        with pytest.raises(cw.ConfigError, match="lookback"):
            cw.reader(f"prometheus+http://prom.test:9090?lookback={bad}")


def test_credentials_are_sent_and_never_shown():
    fake = _fake()
    fake.counters = [_counter("local_estimate")]
    _reader(fake, "prometheus+https://alice:s3cret-pw@prom.test/select/0/prometheus").context_window("r", "s")
    assert fake.headers[0]["authorization"] == "Basic YWxpY2U6czNjcmV0LXB3"

    def broken(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/select/0/prometheus/api/v1/query"
        return httpx.Response(400, json={"status": "error", "errorType": "bad_data", "error": "parse error at char 1"})

    reader = cw.reader(
        "prometheus+https://alice:s3cret-pw@prom.test/select/0/prometheus",
        client=httpx.Client(transport=httpx.MockTransport(broken)),
    )
    with pytest.raises(cw.BackendError) as err:
        reader.context_window("r", "s")
    assert "Prometheus at prometheus+https://prom.test/select/0/prometheus" in str(err.value)
    assert "s3cret" not in str(err.value) and "parse error" not in str(err.value)


def test_an_answer_that_is_not_a_result_is_a_backend_error():
    def odd(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"status": "success", "data": "nope"})

    with pytest.raises(cw.BackendError, match="not a result"):
        cw.reader("prometheus+http://prom.test:9090", client=httpx.Client(transport=httpx.MockTransport(odd))).runs()


def test_the_backend_is_registered_for_http_and_https():
    assert isinstance(cw.reader("prometheus+http://h:9090").backend, PrometheusReader)
    assert isinstance(cw.reader("prometheus+https://h").backend, PrometheusReader)
    assert BACKENDS["prometheus"].form == "prometheus+http://HOST:9090"
