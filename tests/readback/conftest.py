"""Fixtures of the trace-backend suites: a real exported run, its stores, and one Phoenix per session."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any, Optional

import httpx
import pytest
from agent_run import run_agent
from embedded_helpers import embedded_runtime
from servers.phoenix import Phoenix, running_phoenix
from stubs import TraceStore

RUN = "run-traces-1"


@pytest.fixture(scope="session")
def exported_run(tmp_path_factory) -> str:
    """The OTLP JSON lines file our embedded exporter wrote for one mocked agent run (`agent_run.run_agent`)."""
    path = tmp_path_factory.mktemp("exported") / "telemetry.jsonl"
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    with embedded_runtime(export=f"file:{path}"):
        run_agent(RUN)
    return str(path)


@pytest.fixture
def store(exported_run) -> TraceStore:
    store = TraceStore()
    assert store.feed_file(exported_run) > 0
    return store


@pytest.fixture(scope="session")
def phoenix() -> Iterator[Phoenix]:
    with running_phoenix() as server:
        yield server


@contextlib.contextmanager
def exported_to(file_path: str, traces_endpoint: Optional[str] = None, **settings: Any) -> Iterator[Any]:
    """The embedded file export, plus (when given) the same spans over OTLP/HTTP to ``traces_endpoint``."""
    with embedded_runtime(export=f"file:{file_path}", **settings) as runtime:
        if traces_endpoint is not None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            exporter = OTLPSpanExporter(endpoint=traces_endpoint)
            runtime.pipeline.tracer_provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=200))
        yield runtime


def span_count(path: str, run_id: str) -> int:
    """Spans of ``run_id`` in an OTLP JSON lines file (what a backend must have ingested)."""
    store = TraceStore()
    store.feed_file(path)
    needle = {"key": "agent.run.id", "value": {"stringValue": run_id}}
    return sum(needle in (span.get("attributes") or []) for trace in store.traces.values() for _, _, span in trace)


def wait_for_phoenix(phoenix: Phoenix, run_id: str, expected: int, timeout: float = 30.0) -> None:
    """Phoenix ingests in the background: wait until it holds every span of the run."""
    deadline = time.monotonic() + timeout
    got = 0
    while time.monotonic() < deadline:
        # By the schema marker, counted here: Phoenix's attribute filter misses non-ASCII ids.
        answer = httpx.get(
            f"{phoenix.url}/v1/projects/default/spans",
            params={"attribute": "agent.context_window.schema:1", "limit": 1000},
            timeout=5,
        )
        spans = answer.json().get("data", []) if answer.status_code == 200 else []
        got = sum(s.get("attributes", {}).get("agent.run.id") == run_id for s in spans)
        if got >= expected:
            return
        time.sleep(0.2)
    raise AssertionError(f"Phoenix holds {got} of the run's {expected} spans after {timeout:g} s")
