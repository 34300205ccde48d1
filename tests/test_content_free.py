"""Content-free, proven: every exported byte and every read-back answer is scanned for canaries."""

from __future__ import annotations

import json
import logging
import threading
import urllib.request

import httpx
import litellm
import pytest
from embedded_helpers import embedded_runtime, exported_to
from http_servers import OpenAIStub, OtlpReceiver, running
from servers import free_port, require_prometheus_extra
from stubs import TraceStore, serving
from stubs.jaeger import JaegerStub
from stubs.tempo import TempoStub

import cw_middleware as cw
from cw_middleware._cli import main as cli
from cw_middleware._serve.server import make_server

CANARIES = {
    "system": "CANARY-SYSTEM-7f3a",
    "memory": "CANARY-MEMORY-91bc",
    "schema": "CANARY-SCHEMA-22de",
    # A tool name the model calls without the request defining it: model output, never exported.
    # (The names of the request's own tool definitions are exported since issue 21: TOOL_NAME.)
    "undefined_tool_name": "canary_tool_5e1f",
    "arguments": "CANARY-ARGS-4c0d",
    "tool_result": "CANARY-RESULT-8a6b",
    "user": "CANARY-USER-3f9e",
    "error_body": "CANARY-ERRORBODY-0d2c",
}
RUN, STAGE = "run-canary", "agent@1"
TOOL_NAME = "lookup"  # a defined tool: its name is a name, exported in the per-tool rows


def _request() -> dict:
    tools = [
        cw.tool(
            {
                "type": "function",
                "function": {
                    "name": TOOL_NAME,
                    "description": f"does things {CANARIES['schema']}",
                    "parameters": {"type": "object", "properties": {"q": {"type": "string", "description": CANARIES["schema"]}}},
                },
            }
        ),
        cw.tool(
            {
                "type": "function",
                "function": {
                    "name": "search",
                    "description": f"search {CANARIES['schema']}",
                    "parameters": {"type": "object", "properties": {}},
                },
            },
            cw.ToolSource.mcp("github"),
        ),
    ]
    messages = [
        cw.message(
            "system",
            [
                cw.segment(f"You are careful. {CANARIES['system']}", "system_prompt"),
                cw.segment(f"# AGENTS.md {CANARIES['memory']}", "memory", "AGENTS.md"),
            ],
        ),
        {"role": "user", "content": f"please {CANARIES['user']}"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": TOOL_NAME, "arguments": json.dumps({"q": CANARIES["arguments"]})},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": CANARIES["undefined_tool_name"], "arguments": json.dumps({"q": CANARIES["arguments"]})},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": f"result {CANARIES['tool_result']}"},
        {"role": "tool", "tool_call_id": "call_2", "content": f"result {CANARIES['tool_result']}"},
    ]
    return {"messages": messages, "tools": tools}


def _scenario(provider: OpenAIStub) -> None:
    with cw.stage(RUN, STAGE):
        cw.completion(model="gpt-4o", mock_response="ok", **_request())
        stream = cw.completion(model="gpt-4o", mock_response="streamed ok", stream=True, **_request())
        for _ in stream:
            pass
        provider.fail(
            400,
            {
                "error": {
                    "message": f"bad request {CANARIES['error_body']}",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "bad",
                }
            },
        )
        with pytest.raises(litellm.BadRequestError) as raised:
            cw.completion(model="openai/gpt-4o", api_base=provider.url, api_key="sk-test", max_retries=0, **_request())
        assert CANARIES["error_body"] in str(raised.value)  # the caller sees LiteLLM's error as is
        provider.fail(500, {"error": {"message": f"server {CANARIES['error_body']}", "type": "server_error"}})
        with pytest.raises(litellm.InternalServerError):
            cw.completion(
                model="openai/gpt-4o", api_base=provider.url, api_key="sk-test", max_retries=0, num_retries=0, **_request()
            )
        provider.status, provider.body = 200, None
        cw.completion(model="openai/gpt-4o", api_base=provider.url, api_key="sk-test", **_request())
    assert provider.requests and all(CANARIES["user"] in json.dumps(r) for r in provider.requests)  # the provider got it all


def _assert_clean(blob: bytes | str, where: str) -> None:
    text = blob.decode("utf-8", "replace") if isinstance(blob, bytes) else blob
    found = [name for name, canary in CANARIES.items() if canary in text or canary.lower() in text.lower()]
    assert not found, f"content leaked into {where}: {found}"


@pytest.fixture
def cw_logs(caplog):
    caplog.set_level(logging.DEBUG, logger="cw_middleware")
    caplog.set_level(logging.DEBUG, logger="opentelemetry")
    return caplog


def test_file_export_and_every_answer_is_content_free(tmp_path, capsys, cw_logs):
    path = tmp_path / "t.jsonl"
    backend = f"file:{path}"
    with running(OpenAIStub) as provider, embedded_runtime(export=backend, metric_run_labels=True, log_events=True):
        _scenario(provider)
    exported = path.read_bytes()
    assert b'"resourceSpans"' in exported and b'"resourceMetrics"' in exported and b'"resourceLogs"' in exported
    assert b"agent.context_window.snapshot" in exported and b"error.type" in exported
    _assert_clean(exported, "the telemetry file")

    reader = cw.reader(backend)
    answer = reader.context_window(RUN, STAGE)
    assert answer.available and answer.count_method.value == "response_usage_scaled_breakdown"
    # the defined tool's row is there, its results under its name; the undefined one's under plain "tool"
    assert [(t.name, t.invocations) for t in answer.tools if t.name == TOOL_NAME] == [(TOOL_NAME, 1)]
    assert {d.source for d in answer.details} >= {f"tool:{TOOL_NAME}", "tool"}
    _assert_clean(answer.model_dump_json(), "the library answer")
    _assert_clean(json.dumps([p.model_dump(mode="json") for p in reader.history(RUN, STAGE)]), "the library's history")
    _assert_clean(reader.summary(RUN).model_dump_json(), "the library's run summary")
    for argv in (
        ["show", RUN, STAGE],
        ["show", RUN, STAGE, "--json"],
        ["show", RUN, STAGE, "--history"],
        ["summary", RUN],
        ["summary", RUN, "--json"],
        ["stages", RUN],
        ["stages", RUN, "--json"],
    ):
        assert cli.main([*argv, "--backend", backend]) == 0
        out = capsys.readouterr()
        _assert_clean(out.out + out.err, f"cw-middleware {' '.join(argv)}")

    server = make_server(reader, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for route in (
            f"/api/v1/runs/{RUN}/stages/{STAGE}/context-window",
            f"/api/v1/runs/{RUN}/stages/{STAGE}/history",
            f"/api/v1/runs/{RUN}/summary",
            f"/api/v1/runs/{RUN}/stages",
            "/openapi.json",
        ):
            with urllib.request.urlopen(server.url + route, timeout=10) as response:
                _assert_clean(response.read(), route)
    finally:
        server.shutdown()
        server.server_close()
    _assert_clean("\n".join(r.getMessage() for r in cw_logs.records), "the middleware's log")


def test_otlp_request_bodies_are_content_free(monkeypatch, cw_logs):
    with running(OtlpReceiver) as collector, running(OpenAIStub) as provider:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        with embedded_runtime(export="otlp", metric_run_labels=True, log_events=True):
            _scenario(provider)
        assert collector.bodies.get("/v1/traces") and collector.bodies.get("/v1/metrics") and collector.bodies.get("/v1/logs")
        sent = collector.all_bytes()
        assert b"agent.context_window.snapshot" in sent and b"agent.context_window.tokens" in sent
        _assert_clean(sent, "OTLP request bodies")
    _assert_clean("\n".join(r.getMessage() for r in cw_logs.records), "the middleware's log")


@pytest.mark.system
def test_every_backend_and_every_readers_answer_is_content_free(
    tmp_path, cw_logs, phoenix_server, prometheus_server, victoria_metrics_server
):
    """The same scenario into a real Phoenix, Prometheus and VictoriaMetrics, and the Jaeger/Tempo stubs."""
    require_prometheus_extra()
    port = free_port()
    metrics_servers = [prometheus_server([f"127.0.0.1:{port}"]), victoria_metrics_server([f"127.0.0.1:{port}"])]
    path = str(tmp_path / "t.jsonl")
    with (
        running(OpenAIStub) as provider,
        exported_to(path, phoenix_server.traces_endpoint, metrics=f"prometheus:127.0.0.1:{port}", metric_run_labels=True) as rt,
    ):
        _scenario(provider)
        rt.flush(5.0)
        for server in metrics_servers:  # what each metrics backend stored: every series of the run, labels and all
            server.wait_for(f'agent_context_window_tokens{{agent_run_id="{RUN}"}}', timeout=30)
            _assert_clean(json.dumps(server.api("series", **{"match[]": f'{{agent_run_id="{RUN}"}}'})), f"{server.kind} series")
            metrics = cw.reader(server.reader_url)  # the Prometheus reader, while the producer still exports
            _assert_clean(metrics.context_window(RUN, STAGE).model_dump_json(), f"the Prometheus reader on {server.kind}")
            _assert_clean(
                json.dumps([s.as_dict() for s in metrics.stages(RUN)] + [r.as_dict() for r in metrics.runs()]), server.kind
            )
    store = TraceStore()
    store.feed_file(path)
    phoenix_server.wait_for_run(RUN, store.span_count(RUN))
    stored = httpx.get(f"{phoenix_server.url}/v1/projects/default/spans", params={"limit": 1000}, timeout=10)
    assert RUN in stored.text
    _assert_clean(stored.content, "what Phoenix stored")
    with serving(JaegerStub(store)) as jaeger, serving(TempoStub(store)) as tempo:
        for backend in (f"file:{path}", phoenix_server.backend, f"jaeger+{jaeger.url}", f"tempo+{tempo.url}"):
            reader = cw.reader(backend)
            answer = reader.context_window(RUN, STAGE)
            assert answer.available and answer.details and answer.tools
            _assert_clean(answer.model_dump_json(), f"the answer of {backend}")
            _assert_clean(json.dumps([p.model_dump(mode="json") for p in reader.history(RUN, STAGE)]), f"history of {backend}")
            _assert_clean(json.dumps([s.as_dict() for s in reader.stages(RUN)] + [r.as_dict() for r in reader.runs()]), backend)
    _assert_clean("\n".join(r.getMessage() for r in cw_logs.records), "the middleware's log")
