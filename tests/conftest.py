"""Shared fixtures: a Runtime per test with in-memory OpenTelemetry exporters."""

from __future__ import annotations

import os

from cw_middleware._kernel.offline import litellm_tokenizers_dir

# The test process itself, not the package: LiteLLM imported by tests uses its bundled model map,
# and tests that use tiktoken directly as an oracle load LiteLLM's encoding files.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(litellm_tokenizers_dir()))

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

# Real servers for every suite that needs them: Arize Phoenix (its own venv, one per session),
# Prometheus and VictoriaMetrics (factories), and one agent run scraped by both (session).
from servers.agent_metrics import agent_metrics  # noqa: F401
from servers.phoenix import phoenix_server  # noqa: F401
from servers.prometheus import prometheus_server, victoria_metrics_server  # noqa: F401

import cw_middleware  # noqa: F401
from cw_middleware._capture.runtime import Runtime, set_runtime
from cw_middleware._counting.rules import _tiktoken
from cw_middleware._kernel.config import resolve

# The first calls of a process estimate in the background while a tokenizer loads (tests/test_cold_start.py
# proves it in fresh processes); every other test sees the steady state, whatever runs first.
for _name in ("o200k_base", "cl100k_base"):
    _tiktoken.encoding(_name)


class Telemetry:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.metrics = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.metrics])


@pytest.fixture(scope="session", autouse=True)
def file_index_dir(tmp_path_factory):
    """The file reader's indexes (and those of the CLI and servers the tests start) in a temporary directory."""
    previous = os.environ.get("CW_INDEX_DIR")
    os.environ["CW_INDEX_DIR"] = str(tmp_path_factory.mktemp("cw-file-index"))
    yield os.environ["CW_INDEX_DIR"]
    if previous is None:
        os.environ.pop("CW_INDEX_DIR", None)
    else:
        os.environ["CW_INDEX_DIR"] = previous


@pytest.fixture
def telemetry():
    return Telemetry()


@pytest.fixture
def runtime(telemetry):
    """A fresh Runtime (empty caches, in-memory telemetry) installed for the test."""
    rt = Runtime(resolve(export="none", environ={}), telemetry.tracer_provider, telemetry.meter_provider)
    previous = set_runtime(rt)
    yield rt
    rt.shutdown()
    set_runtime(previous)


# What only the system tier may use: the real servers, the browser, the large file (each needs
# .ci/steps/* or minutes). A fast-tier test asking for one would skip on a clean clone and fail in CI.
SYSTEM_FIXTURES = frozenset(
    {"phoenix_server", "prometheus_server", "victoria_metrics_server", "agent_metrics", "browser", "large_file"}
)


def pytest_collection_modifyitems(config, items):
    unmarked = [
        f"{item.nodeid} (uses {', '.join(sorted(SYSTEM_FIXTURES.intersection(item.fixturenames)))})"
        for item in items
        if SYSTEM_FIXTURES.intersection(getattr(item, "fixturenames", ())) and item.get_closest_marker("system") is None
    ]
    if unmarked:
        raise pytest.UsageError("mark these @pytest.mark.system (the system tier):\n  " + "\n  ".join(unmarked))
