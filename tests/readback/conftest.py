"""Fixtures of the trace-backend suites: one real exported run and the store the stubs serve it from."""

from __future__ import annotations

import pytest
from agent_run import run_agent
from embedded_helpers import embedded_runtime
from stubs import TraceStore

RUN = "run-traces-1"


@pytest.fixture(scope="session")
def exported_run(tmp_path_factory) -> str:
    """The OTLP JSON lines file our embedded exporter wrote for one mocked agent run (`agent_run.run_agent`)."""
    path = tmp_path_factory.mktemp("exported") / "telemetry.jsonl"
    with embedded_runtime(export=f"file:{path}"):
        run_agent(RUN)
    return str(path)


@pytest.fixture
def store(exported_run) -> TraceStore:
    store = TraceStore()
    assert store.feed_file(exported_run) > 0
    return store
