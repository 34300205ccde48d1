"""The real LiteLLM Proxy (a process on 127.0.0.1) loading our callback, in front of the scripted local model.

The proxy comes from the frameworks venv and loads ``cw_middleware.litellm_proxy.handler``
from its config.yaml exactly as README documents it. A client sends chat requests
with the stage in headers, in the body's metadata, and with none; streamed and not;
tagged; failing upstream. Each stage is read back from the proxy's export file with
``cw.reader``; totals are the server's usage; no canary reaches an exported byte.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from agent_server import CANARIES, FINAL_ANSWER, start
from fw_harness import call_spans, final_snapshot, frameworks_python, read_spans, scenario_env

import cw_middleware as cw

pytestmark = pytest.mark.system  # the system tier (pyproject.toml): `pytest -m system`

RUN = "proxy-run"
SERVICE = "cw-proxy-test"
TAG = "proxy"  # every upstream request of the proxy arrives under this prefix


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proxy:
    def __init__(self, url: str, key: str, export: Path, log: Path, server) -> None:
        self.url, self.key, self.export, self.log, self.server = url, key, export, log, server
        self.client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)

    def chat(self, body: dict, headers: dict | None = None) -> tuple[int, dict, int]:
        """(status, answer, the upstream prompt_tokens of this request or 0)."""
        before = len(self.server.requests(TAG))
        response = self.client.post("/v1/chat/completions", json=body, headers=headers or {})
        served = self.server.requests(TAG)[before:]
        return response.status_code, response.json(), sum(s.prompt_tokens for s in served)

    def stream(self, body: dict, headers: dict | None = None) -> tuple[list[dict], int]:
        before = len(self.server.requests(TAG))
        with self.client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}, headers=headers or {}) as r:
            assert r.status_code == 200
            events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        served = self.server.requests(TAG)[before:]
        return [json.loads(e) for e in events[:-1]], sum(s.prompt_tokens for s in served)

    def wait_for_calls(self, n: int, timeout: float = 20.0) -> None:
        """Until the export file holds ``n`` finished call spans (the proxy exports in the background)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len([s for s in read_spans(self.export) if "gen_ai.operation.name" in s.attributes]) >= n:
                return
            time.sleep(0.1)
        raise AssertionError(f"the proxy exported fewer than {n} call spans in {timeout} s")


@pytest.fixture(scope="module")
def proxy(tmp_path_factory) -> Iterator[Proxy]:
    python = frameworks_python()
    litellm_cli = python.parent / "litellm"
    agent, httpd, thread = start()
    tmp = Path(tmp_path_factory.mktemp("proxy"))
    key = f"sk-{secrets.token_hex(24)}"
    (tmp / "config.yaml").write_text(
        f"""
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: {agent.url}/{TAG}/v1
      api_key: sk-upstream
  - model_name: broken
    litellm_params:
      model: openai/gpt-4o
      api_base: {agent.url}/{TAG}-fail400/v1
      api_key: sk-upstream
litellm_settings:
  callbacks: cw_middleware.litellm_proxy.handler
general_settings:
  master_key: {key}
"""
    )
    export, log = tmp / "telemetry.jsonl", tmp / "proxy.log"
    port = _free_port()
    env = scenario_env(HOME=str(tmp), CW_EXPORT=f"file:{export}", OTEL_SERVICE_NAME=SERVICE, OTEL_BSP_SCHEDULE_DELAY="100")
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(litellm_cli), "--config", str(tmp / "config.yaml"), "--host", "127.0.0.1", "--port", str(port)],
            cwd=tmp,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise AssertionError(f"the proxy exited ({process.returncode}):\n{log.read_text()[-4000:]}")
            try:
                if httpx.get(f"{url}/health/liveliness", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"the proxy was not ready in 120 s:\n{log.read_text()[-4000:]}")
            time.sleep(0.25)
        yield Proxy(url, key, export, log, agent)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def _request(*, tool_round: bool = False, **extra) -> dict:
    """An agent's chat request with a canary in the system prompt, the task, the tool schema (and the tool round)."""
    messages = [
        {"role": "system", "content": f"You are a careful research agent. {CANARIES['system']}"},
        {"role": "user", "content": f"Find the answer for {CANARIES['user']}."},
    ]
    if tool_round:
        arguments = json.dumps({"query": CANARIES["arguments"]})
        messages += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": arguments}}],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": f"entry: {CANARIES['result']}"},
        ]
    tool = {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": f"Look a query up ({CANARIES['schema']}).",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    }
    return {"model": "gpt-4o", "messages": messages, "tools": [tool], **extra}


def _stage_headers(stage: str, kind: str | None = None) -> dict:
    headers = {"x-cw-run-id": RUN, "x-cw-stage-id": stage}
    if kind:
        headers["x-cw-stage-kind"] = kind
    return headers


@pytest.fixture(scope="module")
def served(proxy) -> dict:
    """Every request of the scenario, sent once; what the client got and what the server reported, by stage."""
    seen: dict = {}

    status, answer, tokens = proxy.chat(_request(), _stage_headers("headers@1"))
    assert status == 200 and answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "lookup"
    seen["headers@1"] = [tokens]
    status, answer, tokens = proxy.chat(_request(tool_round=True), _stage_headers("headers@1"))
    assert status == 200 and answer["choices"][0]["message"]["content"] == FINAL_ANSWER
    seen["headers@1"].append(tokens)

    metadata = {"cw_run_id": RUN, "cw_stage_id": "metadata@1", "cw_stage_kind": "planner"}
    status, answer, tokens = proxy.chat(_request(tool_round=True, metadata=metadata))
    assert status == 200
    seen["metadata@1"] = [tokens]

    chunks, tokens = proxy.stream(_request(tool_round=True), _stage_headers("stream@1"))
    seen["stream@1"] = [tokens]
    seen["stream-chunks"] = chunks
    chunks, tokens = proxy.stream(
        _request(tool_round=True, stream_options={"include_usage": True}), _stage_headers("stream-usage@1")
    )
    seen["stream-usage@1"] = [tokens]
    seen["stream-usage-chunks"] = chunks

    tagged = _request(tool_round=True)
    tagged["messages"][0] = {**tagged["messages"][0], "cw_tag": {"category": "memory", "source": "AGENTS.md"}}
    before = len(proxy.server.requests(TAG))
    status, _, tokens = proxy.chat(tagged, _stage_headers("tagged@1"))
    assert status == 200
    seen["tagged@1"] = [tokens]
    seen["tagged-upstream"] = proxy.server.requests(TAG)[before].body

    status, _, tokens = proxy.chat(_request(tool_round=True))  # no stage at all
    assert status == 200
    seen["default"] = [tokens]
    status, _, tokens = proxy.chat(_request(tool_round=True), {"x-cw-run-id": RUN, "x-cw-stage-id": "x" * 300})
    assert status == 200  # a bad id never breaks the call
    seen["default"].append(tokens)

    before = len(proxy.server.requests(TAG))
    response = proxy.client.post(
        "/v1/responses",
        json={"model": "gpt-4o", "instructions": f"Be careful. {CANARIES['system']}", "input": f"Find {CANARIES['user']}."},
        headers=_stage_headers("responses@1"),
    )
    assert response.status_code == 200, response.text
    assert response.json()["output"][0]["content"][0]["text"] == FINAL_ANSWER
    seen["responses@1"] = [s.prompt_tokens for s in proxy.server.requests(TAG)[before:]]

    status, _, tokens = proxy.chat(_request(tool_round=True), {"x-cw-run-id": "run-only"})
    assert status == 200
    seen["run-only"] = [tokens]

    status, error, _ = proxy.chat(_request(model="broken"), _stage_headers("failing@1"))
    seen["failing"] = (status, error)
    proxy.wait_for_calls(11)
    return seen


def test_the_stage_comes_from_headers_or_body_metadata(proxy, served):
    reader = cw.reader(f"file:{proxy.export}")
    for stage in ("headers@1", "metadata@1", "stream@1", "stream-usage@1", "tagged@1"):
        answer = reader.context_window(RUN, stage)
        assert answer.count_method is cw.CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN, stage
        assert answer.input_tokens == served[stage][-1], stage  # the latest call's usage, as the server reported it
        seen = {b.category.value for b in answer.breakdown if b.tokens > 0}
        assert {"system_prompt", "tools", "conversation"} <= seen or stage == "tagged@1", (stage, seen)
    kinds = {s.stage_id: s.kind for s in reader.stages(RUN)}
    assert kinds["metadata@1"] == "planner" and kinds["headers@1"] == "agent"
    assert "x" * 300 not in kinds


def test_every_reconciled_total_is_the_servers_usage(proxy, served):
    spans = read_spans(proxy.export)
    for stage in ("headers@1", "metadata@1", "stream@1", "stream-usage@1", "tagged@1"):
        finals = [final_snapshot(s) for s in call_spans(spans, RUN, stage)]
        assert sorted(f["agent.context_window.input_tokens"] for f in finals) == sorted(served[stage]), stage
        assert all(f["agent.context_window.count_method"] == "response_usage_scaled_breakdown" for f in finals)


def test_responses_api_requests_are_observed_too(proxy, served):
    answer = cw.reader(f"file:{proxy.export}").context_window(RUN, "responses@1")
    assert answer.count_method is cw.CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN
    assert [answer.input_tokens] == served["responses@1"]
    assert answer.breakdown[0].category.value == "system_prompt" and answer.breakdown[0].tokens > 0  # instructions


def test_a_stream_keeps_its_usage_chunk_only_when_the_client_asked(served):
    assert not [c for c in served["stream-chunks"] if c.get("usage")]  # we asked upstream; the client sees no extra chunk
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in served["stream-chunks"]) == FINAL_ANSWER
    usage = [c["usage"] for c in served["stream-usage-chunks"] if c.get("usage")]
    assert usage and usage[-1]["prompt_tokens"] == served["stream-usage@1"][0]


def test_tags_are_stripped_before_the_provider_and_counted(proxy, served):
    upstream = served["tagged-upstream"]
    assert "cw_tag" not in json.dumps(upstream)
    assert upstream["messages"][0] == {"role": "system", "content": f"You are a careful research agent. {CANARIES['system']}"}
    answer = cw.reader(f"file:{proxy.export}").context_window(RUN, "tagged@1")
    assert answer.breakdown[[b.category.value for b in answer.breakdown].index("memory")].tokens > 0
    assert ("memory", "AGENTS.md") in {(d.category.value, d.source) for d in answer.details}


def test_a_run_id_alone_names_that_runs_stage_of_the_day(proxy, served):
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    answer = cw.reader(f"file:{proxy.export}").context_window("run-only", day)
    assert [answer.input_tokens] == served["run-only"]


def test_a_bad_id_is_a_warning_that_names_the_rule_not_the_value(proxy, served):
    log = proxy.log.read_text()
    assert "request goes to the default run: x-cw-stage-id must be at most 256 characters" in log
    assert "x" * 300 not in log


def test_calls_without_a_stage_or_with_a_bad_id_go_to_the_default_run(proxy, served):
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    spans = call_spans(read_spans(proxy.export), f"default:{SERVICE}", day)
    assert sorted(final_snapshot(s)["agent.context_window.input_tokens"] for s in spans) == sorted(served["default"])


def test_an_upstream_error_reaches_the_client_and_is_recorded_content_free(proxy, served):
    status, error = served["failing"]
    assert status == 400 and CANARIES["error"] in json.dumps(error)  # the client gets the provider's answer
    spans = call_spans(read_spans(proxy.export), RUN, "failing@1")
    assert spans and all(s.attributes.get("error.type") for s in spans)


def test_no_canary_in_any_exported_byte(proxy, served):
    exported = proxy.export.read_bytes()
    ours = "\n".join(line for line in proxy.log.read_text().splitlines() if "cw_middleware" in line)
    assert b"agent.context_window.snapshot" in exported and "cw_middleware" in ours
    assert [c for c in CANARIES.values() if c in exported.decode() or c in ours] == []
    assert os.path.getsize(proxy.export) > 0
