"""metrics="prometheus:HOST:PORT": a scrape endpoint of our own, opened only when asked, on HOST only."""

from __future__ import annotations

import logging
import socket

import httpx
import pytest
from embedded_helpers import embedded_runtime
from http_servers import OpenAIStub, running
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from servers import free_port, require_prometheus_extra
from test_content_free import CANARIES, _request

import cw_middleware as cw
from cw_middleware._embedded.readers import takes_series_limits
from cw_middleware._kernel.config import resolve
from cw_middleware._kernel.errors import ConfigError

require_prometheus_extra()  # skips the module (fails it under CW_CI=1) before prometheus_client is imported
import prometheus_client  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]


def _scrape(url: str) -> dict[str, list]:
    """{family name: [(sample name, labels, value)]} of one scrape."""
    body = httpx.get(url, timeout=5).text
    return {f.name: [(s.name, s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(body)}


def _refused(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(2)
        return sock.connect_ex((host, port)) != 0


# ---------------------------------------------------------------- settings


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("prometheus:127.0.0.1:9464", "prometheus:127.0.0.1:9464"),
        ("prometheus:9464", "prometheus:127.0.0.1:9464"),  # loopback unless a wider host is written out
        ("prometheus:[::1]:9464", "prometheus:[::1]:9464"),
        ("prometheus:0.0.0.0:9000", "prometheus:0.0.0.0:9000"),
        (" export ", "export"),
        ("none", "none"),
    ],
)
def test_metrics_setting_is_normalised(value, expected):
    assert resolve(metrics=value, environ={}).metrics == expected


@pytest.mark.parametrize(
    "value",
    ["prometheus:", "prometheus:host", "prometheus:127.0.0.1:0", "prometheus:127.0.0.1:70000", "prom:9464", "prometheus:a:b:9464",
     "prometheus:[::1:9464", "prometheus:[nope]:9464", "prometheus:http://x:9464", "file:x"],
)  # fmt: skip
def test_bad_metrics_setting_is_a_config_error(value):
    with pytest.raises(ConfigError, match="prometheus:HOST:PORT"):
        resolve(metrics=value, environ={})


def test_metrics_setting_from_the_environment_and_argument_precedence():
    env = {"CW_METRICS": "prometheus:9999", "CW_METRIC_SERIES_LIMIT": "50"}
    cfg = resolve(environ=env)
    assert (cfg.metrics, cfg.metrics_endpoint, cfg.metric_series_limit) == ("prometheus:127.0.0.1:9999", ("127.0.0.1", 9999), 50)
    assert resolve(metrics="none", environ=env).metrics == "none"
    assert resolve(environ={}).metrics == "export" and resolve(environ={}).metrics_endpoint is None
    with pytest.raises(ConfigError, match="CW_METRIC_SERIES_LIMIT|metric_series_limit"):
        resolve(environ={"CW_METRIC_SERIES_LIMIT": "many"})


# ---------------------------------------------------------------- the endpoint


def test_endpoint_serves_the_contract_metrics_on_the_given_host_only(tmp_path):
    port = free_port()
    with (
        running(OpenAIStub) as provider,
        embedded_runtime(export=f"file:{tmp_path / 't.jsonl'}", metrics=f"prometheus:127.0.0.1:{port}") as rt,
    ):
        endpoint = rt.pipeline.metrics_endpoint
        assert endpoint.address == ("127.0.0.1", port) and endpoint.url == f"http://127.0.0.1:{port}/metrics"
        with cw.stage(run_id="run-m", stage_id="plan@1"):
            cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="hi")
            # A local OpenAI-compatible endpoint: real usage (1234 prompt tokens) reconciles the breakdown.
            cw.completion(model="openai/gpt-4o", messages=MESSAGES, api_base=provider.url, api_key="sk-test")
        families = _scrape(endpoint.url)
        tokens = {labels["agent_context_window_category"]: value for _, labels, value in families["agent_context_window_tokens"]}
        assert set(tokens) == {"system_prompt", "tools", "mcp_tools", "skills", "memory", "conversation", "other"}
        assert sum(tokens.values()) == 1234 and tokens["system_prompt"] > 0 and tokens["conversation"] > 0
        assert tokens["tools"] == 0
        ((_, limit_labels, limit),) = families["agent_context_window_limit"]
        ((_, _, utilization),) = families["agent_context_window_utilization"]
        assert limit == 128000 and utilization == pytest.approx(sum(tokens.values()) / 128000)
        assert limit_labels["gen_ai_provider_name"] == "openai" and limit_labels["service_name"] == "cw-middleware"
        assert "agent_run_id" not in limit_labels  # run/stage labels only when asked (cardinality)
        snapshots = {
            labels["agent_context_window_count_method"]: value
            for name, labels, value in families["agent_context_window_snapshots"]
            if name == "agent_context_window_snapshots_total"
        }
        # Two estimates and the mocked call's unreconciled usage; the real usage: one series for both model spellings.
        assert snapshots == {"local_estimate": 3.0, "response_usage_scaled_breakdown": 1.0}
        usage = {
            labels["gen_ai_token_type"]: value
            for name, labels, value in families["gen_ai_client_token_usage"]
            if name == "gen_ai_client_token_usage_sum"
        }
        assert usage == {"input": 1234.0, "output": 3.0}
        # Bound to 127.0.0.1 alone: another loopback address of this machine gets no answer.
        assert _refused("127.0.0.2", port)
        # Our registry is our own: prometheus_client's global one carries none of it.
        assert b"agent_context_window" not in prometheus_client.generate_latest(prometheus_client.REGISTRY)
        rt.flush(5)
    # Spans still went to the file; metrics went to the endpoint instead.
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert any(line.startswith('{"resourceSpans"') for line in lines)
    assert not any(line.startswith('{"resourceMetrics"') for line in lines)
    assert _refused("127.0.0.1", port)  # shutdown closed it


def test_no_port_is_opened_unless_asked(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a scrape endpoint was started without metrics=prometheus:...")

    monkeypatch.setattr(prometheus_client, "start_http_server", refuse)
    with embedded_runtime(export=f"file:{tmp_path / 't.jsonl'}") as rt:
        cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="hi")
        assert rt.pipeline.metrics_endpoint is None
        rt.flush(5)
    assert any(line.startswith('{"resourceMetrics"') for line in (tmp_path / "t.jsonl").read_text().splitlines())


def test_endpoint_without_any_span_export(monkeypatch):
    port = free_port()
    with embedded_runtime(export="none", metrics=f"prometheus:{port}") as rt:
        cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="hi")
        assert rt.pipeline.span_processor is None
        assert "agent_context_window_tokens" in _scrape(f"http://127.0.0.1:{port}/metrics")


def test_a_busy_port_logs_once_and_the_call_proceeds(caplog):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with caplog.at_level(logging.WARNING, logger="cw_middleware"):
            with embedded_runtime(export="none", metrics=f"prometheus:127.0.0.1:{port}") as rt:
                response = cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="hi")
                assert response.choices[0].message.content == "hi"
                assert rt.pipeline.metrics_endpoint is None
    assert [r.getMessage() for r in caplog.records if f"127.0.0.1:{port}" in r.getMessage()] == [
        f"cw_middleware: cannot serve metrics on 127.0.0.1:{port} (OSError: Address already in use); "
        "metrics are not exported from this process, the LLM calls proceed"
    ]


def test_the_applications_own_providers_are_never_given_a_port(monkeypatch, caplog):
    from opentelemetry import metrics, trace

    # The application installed its own SDK providers, as seen through OpenTelemetry's API.
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: TracerProvider())
    monkeypatch.setattr(metrics, "get_meter_provider", lambda: MeterProvider())
    monkeypatch.setattr(prometheus_client, "start_http_server", lambda *a, **k: pytest.fail("port opened"))
    with caplog.at_level(logging.WARNING, logger="cw_middleware"):
        runtime = cw.configure(metrics=f"prometheus:{free_port()}", tracer_provider=None)
    try:
        assert any("opens no endpoint" in r.getMessage() for r in caplog.records)
    finally:
        cw.configure(export="none", tracer_provider=TracerProvider(), meter_provider=MeterProvider())
        runtime.shutdown()


@pytest.mark.skipif(
    not takes_series_limits(PeriodicExportingMetricReader), reason="this opentelemetry-sdk has no cardinality limits (1.45.2 on)"
)
def test_series_beyond_the_limit_fold_into_the_overflow_series():
    port = free_port()
    with embedded_runtime(export="none", metrics=f"prometheus:{port}", metric_run_labels=True, metric_series_limit=10):
        for i in range(3):
            with cw.stage(run_id="run-many", stage_id=f"s{i}"):
                cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="hi")
        tokens = _scrape(f"http://127.0.0.1:{port}/metrics")["agent_context_window_tokens"]
    # 3 stages x 7 categories = 21 series asked for, 10 allowed: 10 kept, the rest in one overflow series beside them.
    assert len(tokens) == 11
    assert sum(1 for _, labels, _ in tokens if labels.get("otel_metric_overflow") == "true") == 1


def test_scrape_is_content_free():
    port = free_port()
    with embedded_runtime(export="none", metrics=f"prometheus:{port}", metric_run_labels=True):
        with cw.stage(run_id="run-canary", stage_id="agent@1"):
            cw.completion(model="gpt-4o", mock_response="ok", **_request())
        body = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    assert "agent_context_window_tokens" in body
    for canary in CANARIES.values():
        assert canary not in body


# ---------------------------------------------------------------- one model label


def _points(telemetry, name):
    data = telemetry.metrics.get_metrics_data()
    metric = next(m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics if m.name == name)
    return list(metric.data.data_points)


def test_a_models_routing_prefix_does_not_split_its_series(telemetry, runtime):
    with cw.stage(run_id="run-n", stage_id="s"):
        cw.completion(model="openai/gpt-4o", messages=MESSAGES, mock_response="hi")
        cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="hi")
        cw.completion(model="anthropic/claude-sonnet-4-5", messages=MESSAGES, mock_response="hi", cw_provider_count="never")
    calls = [s for s in telemetry.spans.get_finished_spans() if s.name.startswith("chat")]
    assert [(s.name, s.attributes["gen_ai.request.model"], s.attributes["gen_ai.provider.name"]) for s in calls] == [
        ("chat gpt-4o", "gpt-4o", "openai"),
        ("chat gpt-4o", "gpt-4o", "openai"),
        ("chat claude-sonnet-4-5", "claude-sonnet-4-5", "anthropic"),
    ]
    assert [s.model for s in cw.snapshots()][::2] == ["gpt-4o", "gpt-4o", "claude-sonnet-4-5"]
    models = sorted(p.attributes["gen_ai.request.model"] for p in _points(telemetry, "agent.context_window.limit"))
    assert models == ["claude-sonnet-4-5", "gpt-4o"]  # one gpt-4o series for both spellings


def test_a_model_litellm_does_not_know_keeps_its_name(runtime):
    assert cw.estimate(model="my-org/custom-model", messages=MESSAGES).model == "my-org/custom-model"


def test_configured_context_window_matches_either_spelling(telemetry):
    from cw_middleware._capture.runtime import Runtime, set_runtime

    config = resolve(export="none", context_windows={"gpt-4o": 1000}, environ={})
    previous = set_runtime(Runtime(config, telemetry.tracer_provider, telemetry.meter_provider))
    try:
        cw.completion(model="openai/gpt-4o", messages=MESSAGES, mock_response="hi")
        assert cw.snapshots()[-1].context_window_tokens == 1000
    finally:
        set_runtime(previous)


def test_concurrent_scrapes_each_get_the_whole_answer_once():
    """Two servers scraping one process at once (HA Prometheus, or Prometheus and VictoriaMetrics)."""
    import threading

    port = free_port()
    with embedded_runtime(export="none", metrics=f"prometheus:{port}", metric_run_labels=True):
        for i in range(20):
            with cw.stage(run_id="run-c", stage_id=f"s{i}"):
                cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="hi")
        counts: list[int] = []
        lock = threading.Lock()

        def scrape() -> None:
            with httpx.Client() as client:
                for _ in range(10):
                    body = client.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
                    with lock:
                        counts.append(body.count("agent_context_window_limit{"))

        threads = [threading.Thread(target=scrape) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert counts == [20] * 60  # one limit series per stage, never doubled, never empty


def test_flushing_never_doubles_the_next_scrape():
    """cw.flush() (also run at exit and by the CLI) must not queue collections for the pull endpoint."""
    port = free_port()
    with embedded_runtime(export="none", metrics=f"prometheus:{port}") as rt:
        cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="hi")
        for _ in range(3):
            assert rt.flush(5)
        body = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    assert body.count("agent_context_window_limit{") == 1
    assert body.count("# TYPE agent_context_window_limit gauge") == 1
