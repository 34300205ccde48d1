"""One run, every reader: the same answer from the file, Phoenix, Jaeger and Tempo, and what metrics tell.

A mocked agent (agent stages with tools, memory and a skill, a stream, a non-agent stage, a
stage entered twice) exports at once to the embedded file, to a real Phoenix over OTLP/HTTP,
and to the scrape endpoint that a real Prometheus and a real VictoriaMetrics scrape. The Jaeger
and Tempo stubs serve the file's spans as those backends would. Every trace reader must give
the file's StageContextWindow for every stage, the file's stage listing and the file's run
entry; the Prometheus reader, on both metrics backends, the file's numbers for every agent
stage (what metrics carry), and the backends themselves the same tokens by category, limit
and utilization. No answer carries the run's canary text.
"""

from __future__ import annotations

import json
import time

import pytest
from agent_run import AGENT_STAGES, CANARY, STAGES, run_agent
from embedded_helpers import exported_to
from servers import free_port, require_prometheus_extra
from stubs import TraceStore, serving
from stubs.jaeger import JaegerStub
from stubs.tempo import TempoStub
from test_prometheus import comparable  # what a metrics backend can tell of a stage

import cw_middleware as cw
from cw_middleware._kernel.contract import CATEGORIES

pytestmark = pytest.mark.system  # the system tier (pyproject.toml): `pytest -m system`

RUN = "run-cross-1"


def _trace_answers(reader: cw.Reader) -> dict:
    run = next(r.as_dict() for r in reader.runs() if r.run_id == RUN)
    return {
        "windows": {s: reader.context_window(RUN, s).model_dump(mode="json") for s in STAGES},
        # Phoenix and Jaeger's span model keep microseconds: compare the listing without sub-µs times.
        "stages": [(s.stage_id, s.kind, s.staleness.value) for s in reader.stages(RUN)],
        "run": {k: run[k] for k in ("run_id", "stages", "live_stages")},
    }


def _metric(server, name: str, stage: str) -> dict[str, float]:
    """{category or "": value} of one metric for one stage of the run."""
    result = server.query(f'{name}{{agent_run_id="{RUN}",agent_stage_id="{stage}"}}')
    return {r["metric"].get("agent_context_window_category", ""): float(r["value"][1]) for r in result}


def test_every_reader_gives_the_same_answer(tmp_path, phoenix_server, prometheus_server, victoria_metrics_server):
    require_prometheus_extra()
    port = free_port()
    metrics_servers = [prometheus_server([f"127.0.0.1:{port}"]), victoria_metrics_server([f"127.0.0.1:{port}"])]
    path = str(tmp_path / "telemetry.jsonl")
    series = f'agent_context_window_tokens{{agent_run_id="{RUN}"}}'
    metric_answers: dict[str, dict] = {}
    with exported_to(path, phoenix_server.traces_endpoint, metrics=f"prometheus:127.0.0.1:{port}", metric_run_labels=True) as rt:
        run_agent(RUN)
        rt.flush(5.0)
        ended = time.time()
        # Every category of every agent stage searchable (VictoriaMetrics indexes new series gradually),
        # from a scrape taken after the run's last call.
        every_series = len(AGENT_STAGES) * len(CATEGORIES)
        for server in metrics_servers:
            server.wait_for(f"count({series})", 30, lambda r: float(r[0]["value"][1]) == every_series)
            server.wait_for(f"min(timestamp({series}))", 30, lambda r: float(r[0]["value"][1]) > ended)
        # The scrape endpoint lives as long as the runtime: ask the metrics backends now.
        file_reader = cw.reader(f"file:{path}")
        expected = _trace_answers(file_reader)
        # What metrics can tell, through the Prometheus reader (Prometheus and VictoriaMetrics alike):
        # per agent stage (run labels on) the latest request's numbers; no details, kind or event_seq.
        for server in metrics_servers:
            metrics = cw.reader(server.reader_url)
            for stage in AGENT_STAGES:
                got = metrics.context_window(RUN, stage).model_dump(mode="json")
                assert comparable(got) == comparable(expected["windows"][stage]), stage
                assert (
                    got["details"] == [] and got["event_seq"] is None and [w["code"] for w in got["warnings"]] == ["from_metrics"]
                )
                assert got["staleness"] == "live"  # its producer still exports the stage's series
            with pytest.raises(cw.NotFound):  # a stage that calls no model has no series
                metrics.context_window(RUN, "tests@1")
            # the listing's order comes from sample times (coarse over a long lookback): compare as a set
            assert sorted((s.stage_id, s.kind) for s in metrics.stages(RUN)) == sorted((s, None) for s in AGENT_STAGES)
            listed = next(r for r in metrics.runs() if r.run_id == RUN)
            assert listed.stages == len(AGENT_STAGES)
            metric_answers[server.kind] = got
        # The raw series: the latest breakdown, limit and utilization per agent stage.
        for stage in AGENT_STAGES:
            window = expected["windows"][stage]
            tokens = {b["category"]: float(b["tokens"]) for b in window["breakdown"]}
            for server in metrics_servers:
                assert _metric(server, "agent_context_window_tokens", stage) == tokens, f"{server.kind} {stage}"
                assert _metric(server, "agent_context_window_limit", stage) == {"": window["context_window_tokens"]}
                (utilization,) = _metric(server, "agent_context_window_utilization", stage).values()
                assert utilization == pytest.approx(window["input_tokens"] / window["context_window_tokens"])
        for server in metrics_servers:  # a stage that calls no model leaves no series: metrics cannot tell it exists
            assert _metric(server, "agent_context_window_tokens", "tests@1") == {}
    store = TraceStore()
    store.feed_file(path)
    phoenix_server.wait_for_run(RUN, store.span_count(RUN))

    assert [s for s, _, _ in expected["stages"]] == STAGES
    assert expected["run"] == {"run_id": RUN, "stages": len(STAGES), "live_stages": 0}
    with serving(JaegerStub(store)) as jaeger, serving(TempoStub(store)) as tempo:
        answers = {
            "phoenix": _trace_answers(cw.reader(phoenix_server.backend)),
            "jaeger": _trace_answers(cw.reader(f"jaeger+{jaeger.url}")),
            "tempo": _trace_answers(cw.reader(f"tempo+{tempo.url}")),
        }
    for backend, got in answers.items():
        for stage in STAGES:
            assert got["windows"][stage] == expected["windows"][stage], f"{backend} differs from the file on {stage}"
        assert got["stages"] == expected["stages"], backend
        assert got["run"] == expected["run"], backend
    everything = json.dumps([expected, answers, metric_answers])
    assert CANARY not in everything
