"""One real agent run through `cw.completion`, scraped by a real Prometheus and VictoriaMetrics.

The session fixture `agent_metrics` starts both servers, then three producer processes'
worth of runtimes, each with its own scrape endpoint (`metrics="prometheus:..."`):

- "agent" (run labels on, still running at read time, spans also to a file): run
  `RUN` with the stages below, each engineered to show one thing;
- "unlabelled" (run labels off): run `UNLABELLED_RUN`, stage "s@1";
- "finished" (run labels on, shut down before reading): run `FINISHED_RUN`, stage "only@1".

It waits until both servers hold every snapshot the runtimes made (the snapshot counters
sum to what the runtimes published, in a scrape after the last call ended). Readers,
dashboard queries and alert expressions then read the same data. Cost: ~10-12 s, once.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from providers import ANTHROPIC, CHAT, FakeProvider, running_provider
from test_content_free import _request as canary_request

import cw_middleware as cw
from cw_middleware._capture.runtime import Runtime, set_runtime
from cw_middleware._embedded import install
from cw_middleware._kernel.config import resolve

from . import free_port, require_binary, require_prometheus_extra
from .prometheus import PROMETHEUS_HINT, VICTORIA_HINT, MetricsServer, running_prometheus, running_victoria_metrics

RUN = "run-agent"
UNLABELLED_RUN = "run-unlabelled"
FINISHED_RUN = "run-finished"
ODD_STAGE = 'odd "stage" \\ id'
SHORT = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Plan the fix."}]
LONG = [*SHORT, {"role": "assistant", "content": "Done planning."}, {"role": "user", "content": "Now implement it, please."}]

# stage -> what it shows (the fixture runs them in this order)
STAGES = {
    "plan@1": "a mocked call: two local estimates",
    "implement@1": "a mocked call, then a local OpenAI endpoint: response usage of 1234 tokens",
    "review@1": "a mocked stream",
    "switch@1": "gpt-4o, then claude-sonnet-4-5: the latest model wins",
    ODD_STAGE: "quotes and a backslash in the stage id",
    "hot@1": "1234 tokens in a 1250-token window: utilization 0.987",
    "exceeded@1": "1234 tokens in a 1000-token window: utilization 1.234",
    "cached@1": "a local OpenAI endpoint that served 1024 of the 1234 input tokens from its prompt cache",
    "count-failed@1": "a provider count that fails (HTTP 500)",
    "canary@1": "the content-free canary request",
}
NON_AGENT_STAGE = "tool@1"  # a stage without LLM calls: no metrics at all


@dataclass
class AgentMetrics:
    prometheus: MetricsServer
    victoria_metrics: MetricsServer
    agent_file: Path  # the "agent" runtime's spans: what the file reader answers
    finished_file: Path
    agent: Runtime
    instances: dict[str, str] = field(default_factory=dict)  # runtime name -> scrape target
    done_at: float = 0.0  # when the last call ended (time.time())

    @property
    def servers(self) -> tuple[MetricsServer, MetricsServer]:
        return (self.prometheus, self.victoria_metrics)


class _Producer:
    """A runtime with its own scrape endpoint, as one process of an application would have it."""

    def __init__(self, name: str, port: int, export: str, run_labels: bool) -> None:
        self.name, self.port = name, port
        self.config = resolve(
            environ={},
            export=export,
            metrics=f"prometheus:127.0.0.1:{port}",
            metric_run_labels=run_labels,
            service_name=f"cw-{name}",
        )
        self.pipeline = install(self.config)
        self.runtime = Runtime(
            self.config,
            self.pipeline.tracer_provider,
            self.pipeline.meter_provider,
            shutdown=self.pipeline.shutdown,
            flush=self.pipeline.flush,
        )
        self.closed = False

    @contextlib.contextmanager
    def active(self) -> Iterator[Runtime]:
        previous = set_runtime(self.runtime)
        try:
            yield self.runtime
        finally:
            set_runtime(previous)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.runtime.flush(5)
            self.runtime.shutdown()


def _wait_until_scraped(server: MetricsServer, producer: _Producer, after: float, timeout: float = 30) -> None:
    """Until the server holds all of the producer's snapshots, from a scrape taken after `after`."""
    published = len(producer.runtime.snapshots())
    service = f'service_name="cw-{producer.name}"'

    def complete(result: list[Any]) -> bool:
        return float(result[0]["value"][1]) >= published

    server.wait_for(f"sum(agent_context_window_snapshots_total{{{service}}})", timeout, complete)
    server.wait_for(f"max(timestamp(agent_context_window_snapshots_total{{{service}}})) > {after:.3f}", timeout)


def _agent_run(provider: FakeProvider) -> None:
    openai = {"api_base": f"{provider.url}/v1", "api_key": "sk-test"}
    with cw.stage(RUN, "plan@1"):
        cw.completion(model="gpt-4o", messages=SHORT, mock_response="ok")
    with cw.stage(RUN, "implement@1"):
        cw.completion(model="gpt-4o", messages=SHORT, mock_response="ok")
        cw.completion(model="openai/gpt-4o", messages=LONG, **openai)
    with cw.stage(RUN, "review@1"):
        stream = cw.completion(model="gpt-4o", messages=LONG, mock_response="looks good", stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream) == "looks good"
    with cw.stage(RUN, "switch@1"):
        cw.completion(model="gpt-4o", messages=SHORT, mock_response="ok")
        time.sleep(1.5)  # one scrape (every 1 s) in between: metrics cannot order two models within one scrape
        cw.completion(model="anthropic/claude-sonnet-4-5", messages=LONG, mock_response="ok", cw_provider_count="never")
    with cw.stage(RUN, ODD_STAGE):
        cw.completion(model="gpt-4o", messages=SHORT, mock_response="ok")
    with cw.stage(RUN, "hot@1"):
        cw.completion(model="openai/gpt-4o", messages=LONG, cw_context_window=1250, **openai)
    with cw.stage(RUN, "exceeded@1"):
        cw.completion(model="openai/gpt-4o", messages=LONG, cw_context_window=1000, **openai)
    provider[CHAT].cached_tokens = 1024
    with cw.stage(RUN, "cached@1"):
        cw.completion(model="openai/gpt-4o", messages=LONG, **openai)
    provider[CHAT].cached_tokens = 0
    provider[ANTHROPIC].status = 500
    with cw.stage(RUN, "count-failed@1"):
        cw.completion(
            model="anthropic/claude-sonnet-4-5",
            messages=SHORT,
            mock_response="ok",
            api_key="sk-test",
            api_base=provider.url,
            cw_provider_count="always",
        )
        provider.wait_for_hits(ANTHROPIC, 1)
        assert cw.flush(10)  # the failed count is recorded (the counter waits for its worker)
    with cw.stage(RUN, "canary@1"):
        cw.completion(model="gpt-4o", mock_response="ok", **canary_request())
    with cw.stage(RUN, NON_AGENT_STAGE, kind="tool"):
        pass


@pytest.fixture(scope="session")
def agent_metrics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentMetrics]:
    require_binary("prometheus", PROMETHEUS_HINT)
    require_binary("victoria-metrics", VICTORIA_HINT)
    require_prometheus_extra()
    root = tmp_path_factory.mktemp("agent-metrics")
    ports = {name: free_port() for name in ("agent", "unlabelled", "finished")}
    targets = [f"127.0.0.1:{port}" for port in ports.values()]
    rule_files = _rule_files()
    with (
        running_prometheus(targets, root / "prometheus", rule_files=rule_files) as prom,
        running_victoria_metrics(targets, root / "victoria-metrics") as vm,
        running_provider() as provider,
    ):
        producers: list[_Producer] = []
        try:
            finished = _Producer("finished", ports["finished"], f"file:{root / 'finished.jsonl'}", run_labels=True)
            producers.append(finished)
            with finished.active():
                with cw.stage(FINISHED_RUN, "only@1"):
                    cw.completion(model="gpt-4o", messages=SHORT, mock_response="ok")
            done = time.time()
            for server in (prom, vm):
                _wait_until_scraped(server, finished, done)
            finished.close()  # its process "exits": the servers see the target go away

            agent = _Producer("agent", ports["agent"], f"file:{root / 'agent.jsonl'}", run_labels=True)
            unlabelled = _Producer("unlabelled", ports["unlabelled"], "none", run_labels=False)
            producers += [agent, unlabelled]
            with agent.active():
                _agent_run(provider)
                assert cw.flush(10)
            with unlabelled.active():
                with cw.stage(UNLABELLED_RUN, "s@1"):
                    cw.completion(model="gpt-4o", messages=SHORT, mock_response="ok")
            done = time.time()
            for server in (prom, vm):
                _wait_until_scraped(server, agent, done)
                _wait_until_scraped(server, unlabelled, done)
            yield AgentMetrics(
                prom,
                vm,
                root / "agent.jsonl",
                root / "finished.jsonl",
                agent.runtime,
                {name: f"127.0.0.1:{port}" for name, port in ports.items()},
                done,
            )
        finally:
            for producer in producers:
                producer.close()


def _rule_files() -> list[str]:
    """The repository's alert rules, loaded by the Prometheus under test (tests/test_dashboards.py)."""
    return [str(Path(__file__).resolve().parents[2] / "dashboards" / "alerts.yml")]
