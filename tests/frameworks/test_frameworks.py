"""Real agent frameworks from PyPI, observed through cw.instrument(), against a scripted local model.

Through LiteLLM, or through the official openai client where a framework calls it directly.

Each framework runs in the frameworks venv as its own process (scenarios/*.py):
every scenario once on plain LiteLLM and once instrumented inside a stage. The
checks: the framework's answers and exceptions are the same; the snapshots land
in the scenario's stage with the categories of that framework's request; each
call's reconciled total is what the server reported; no canary (prompt, tool
schema, tool arguments, tool result, provider error body) is in any exported byte.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from agent_server import CANARIES, FINAL_ANSWER, start
from fw_harness import OTEL_VENV, ScenarioRun, call_spans, final_snapshot, run_scenario

import cw_middleware as cw

pytestmark = pytest.mark.system  # the system tier (pyproject.toml): `pytest -m system`


@dataclass(frozen=True)
class Framework:
    script: str
    answered: tuple[str, ...]  # scenarios that end in an answer (the others end in a provider error)
    categories: frozenset[str]  # what its requests must be seen to hold
    venv: str = ".venv-frameworks"  # where it is installed (fw_harness.OTEL_VENV: the second venv)
    refused_first: bool = False  # the client refuses the framework's first try of each call, then it streams

    @property
    def scenarios(self) -> tuple[str, ...]:
        return (*self.answered, "fail400", "fail500")


AGENT_REQUEST = frozenset({"system_prompt", "tools", "conversation"})  # instructions, the tool given, the task so far
FRAMEWORKS = {
    "langchain-litellm": Framework("langchain_litellm_chat.py", ("nonstream", "stream"), AGENT_REQUEST),
    "openai-agents": Framework("openai_agents_litellm.py", ("nonstream", "stream"), AGENT_REQUEST),
    # The official openai client, no LiteLLM: observed through the client's methods (cw_middleware/_capture/clients/).
    "openai-agents-client": Framework("openai_agents_openai_client.py", ("nonstream", "stream"), AGENT_REQUEST),
    "langchain-openai": Framework("langchain_openai_chat.py", ("nonstream", "stream"), AGENT_REQUEST),
    "langchain-openai-structured": Framework("langchain_openai_structured.py", ("nonstream", "stream"), AGENT_REQUEST),
    "langchain-google-genai": Framework("langchain_google_chat.py", ("nonstream", "stream"), AGENT_REQUEST),
    "pydantic-ai": Framework("pydantic_ai_openai.py", ("nonstream", "stream"), AGENT_REQUEST),
    # The other official clients (issue 35): anthropic's beta.messages, google-genai, Bedrock's Converse through boto3.
    # pydantic-ai asks for the model's whole output (64000 tokens): the anthropic SDK refuses that without a stream
    # (ValueError, nothing sent) and pydantic-ai streams it instead. The refused call is a call made: its span says so.
    "pydantic-ai-anthropic": Framework("pydantic_ai_anthropic.py", ("nonstream", "stream"), AGENT_REQUEST, refused_first=True),
    "pydantic-ai-google": Framework("pydantic_ai_google.py", ("nonstream", "stream"), AGENT_REQUEST),
    "pydantic-ai-bedrock": Framework("pydantic_ai_bedrock.py", ("nonstream", "stream"), AGENT_REQUEST),
    "smolagents": Framework("smolagents_tool_calling.py", ("nonstream", "stream"), AGENT_REQUEST),
    # DSPy's ReAct describes its tools in the prompt text, not as tool definitions: no `tools` tokens.
    "dspy": Framework("dspy_react.py", ("nonstream",), frozenset({"system_prompt", "conversation"})),
    # OpenTelemetry pins of their own: the second venv, resolved from pyproject's ranges (google-adk 2.13: SDK <= 1.44).
    "google-adk": Framework("google_adk_litellm.py", ("nonstream", "stream"), AGENT_REQUEST, OTEL_VENV),
    "strands-agents": Framework("strands_litellm.py", ("nonstream", "stream"), AGENT_REQUEST, OTEL_VENV),
    # Their default model classes: the official google-genai client and boto3's bedrock-runtime.
    "google-adk-gemini": Framework("google_adk_gemini.py", ("nonstream", "stream"), AGENT_REQUEST, OTEL_VENV),
    "strands-bedrock": Framework("strands_bedrock.py", ("nonstream", "stream"), AGENT_REQUEST, OTEL_VENV),
}


@pytest.fixture(scope="module")
def server() -> Iterator:
    agent, httpd, thread = start()
    yield agent
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


@pytest.fixture(scope="module", params=sorted(FRAMEWORKS))
def framework(request, server, tmp_path_factory) -> tuple[str, ScenarioRun]:
    name = request.param
    tmp = tmp_path_factory.mktemp(name)
    config = {
        "url": f"{server.url}/{name}",
        "run_id": f"fw-{name}",
        "service": f"fw-{name}",
        "canaries": CANARIES,
        "scenarios": list(FRAMEWORKS[name].scenarios),
    }
    return name, run_scenario(FRAMEWORKS[name].script, config, Path(tmp), venv=FRAMEWORKS[name].venv)


def test_answers_and_exceptions_are_the_same_with_and_without_instrument(framework):
    name, run = framework
    assert run.outcomes["observed"] == run.outcomes["plain"]
    for scenario in FRAMEWORKS[name].answered:
        assert FINAL_ANSWER in run.outcomes["plain"][scenario]["answer"]
    for scenario in ("fail400", "fail500"):
        outcome = run.outcomes["plain"][scenario]
        assert "error" in outcome, f"{name} {scenario}: the provider's error did not surface"


def test_snapshots_land_in_the_scenario_stage_with_the_request_categories(framework):
    name, run = framework
    reader = cw.reader(f"file:{run.export}")
    listed = {s.stage_id for s in reader.stages(f"fw-{name}")}
    assert listed == set(FRAMEWORKS[name].scenarios)
    for scenario in FRAMEWORKS[name].answered:
        answer = reader.context_window(f"fw-{name}", scenario)
        assert answer.available and answer.count_method is cw.CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN
        seen = {b.category.value for b in answer.breakdown if b.tokens > 0}
        assert FRAMEWORKS[name].categories <= seen, (scenario, seen)
        assert sum(b.tokens for b in answer.breakdown) == answer.input_tokens
    for scenario in ("fail400", "fail500"):
        spans = call_spans(run.spans(), f"fw-{name}", scenario)
        assert spans and all(s.attributes.get("error.type") for s in spans)
        assert all(final_snapshot(s)["agent.context_window.count_method"] == "local_estimate" for s in spans)


def test_each_reconciled_total_is_the_servers_usage(framework, server):
    name, run = framework
    for scenario in FRAMEWORKS[name].answered:
        served = sorted(server.prompt_tokens(f"{name}/observed-{scenario}"))
        spans = call_spans(run.spans(), f"fw-{name}", scenario)
        refused = [s for s in spans if s.attributes.get("error.type") == "ValueError"]
        if FRAMEWORKS[name].refused_first and scenario == "nonstream":
            assert len(refused) == len(served)
            assert all(final_snapshot(s)["agent.context_window.count_method"] == "local_estimate" for s in refused)
        else:
            assert refused == []
        finals = [final_snapshot(s) for s in spans if s not in refused]
        assert all(f["agent.context_window.count_method"] == "response_usage_scaled_breakdown" for f in finals), scenario
        assert sorted(f["agent.context_window.input_tokens"] for f in finals) == served, scenario
        assert len(served) >= 2  # a tool round, then the final answer


def test_no_canary_in_any_exported_byte(framework):
    name, run = framework
    exported = run.export.read_bytes() + (run.log.read_bytes() if run.log.exists() else b"")
    assert b"agent.context_window.snapshot" in exported  # the scan reads real output
    found = [c for c in CANARIES.values() if c.encode() in exported]
    assert found == []
