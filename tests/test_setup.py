"""configure() says where telemetry goes when someone else decides: the application's providers, OTEL_SDK_DISABLED.

Both are process-wide (global providers, the environment), so each case runs in its own process.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.system  # the system tier (pyproject.toml): `pytest -m system`

CANARY = "CANARY-setup-prompt-text"

_APP_PROVIDERS = f"""
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
trace.set_tracer_provider(TracerProvider())
metrics.set_meter_provider(MeterProvider())
import cw_middleware as cw
cw.configure(export="file:PATH")
cw.configure(export="file:PATH")
with cw.stage("r", "s"):
    cw.completion(model="gpt-4o", messages=[{{"role": "user", "content": "{CANARY}"}}], mock_response="ok")
cw.flush()
"""

_SDK_DISABLED = f"""
import cw_middleware as cw
cw.configure(export="file:PATH")
cw.configure(export="file:PATH")
with cw.stage("r", "s"):
    cw.completion(model="gpt-4o", messages=[{{"role": "user", "content": "{CANARY}"}}], mock_response="ok")
cw.flush()
print("snapshots", len(cw.snapshots()))
from cw_middleware._cli.main import main
print("demo exit", main(["demo", "--turns", "1", "--export", "file:PATH.demo"]))
"""


def _run(code: str, tmp_path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CW_"))}
    environ.update(env)
    return subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_the_applications_own_providers_are_named_once_at_configure_time(tmp_path):
    path = tmp_path / "t.jsonl"
    done = _run(_APP_PROVIDERS.replace("PATH", str(path)), tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    warnings = [line for line in done.stderr.splitlines() if "own TracerProvider" in line]
    assert len(warnings) == 1, done.stderr  # once, however often configure() runs
    assert "opentelemetry.sdk.trace.TracerProvider" in warnings[0] and f"export=file:{path}" in warnings[0]
    assert not path.exists()  # the snapshots went to the application's provider, not to the file
    assert CANARY not in done.stderr


def test_otel_sdk_disabled_is_honoured_and_said_once(tmp_path):
    path = tmp_path / "t.jsonl"
    done = _run(_SDK_DISABLED.replace("PATH", str(path)), tmp_path, OTEL_SDK_DISABLED="TRUE")
    assert done.returncode == 0, done.stderr[-2000:]
    warnings = [line for line in done.stderr.splitlines() if line.startswith("cw_middleware: OTEL_SDK_DISABLED")]
    assert len(warnings) == 1, done.stderr
    assert "no snapshots are exported" in warnings[0]
    assert not path.exists() or path.stat().st_size == 0
    assert "snapshots 2" in done.stdout  # the process still has its snapshots
    assert CANARY not in done.stderr + done.stdout
    # The demo says why there is nothing to read back, instead of "run not found" or a traceback.
    assert "demo exit 0" in done.stdout and "nothing was exported" in done.stderr and "Traceback" not in done.stderr


# Each signal goes where the user said, whatever providers they passed (issue 17 item 3). The child sets
# up the case's providers (MINE: passed to configure(); GLOBAL: set globally), configures twice, makes a
# call in a stage and prints where the spans and the metrics landed.
_OWN_PROVIDERS = """
import json, sys
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import cw_middleware as cw

case, settings = sys.argv[1], json.loads(sys.argv[2])
spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
tp = TracerProvider()
tp.add_span_processor(SimpleSpanProcessor(spans))
mp = MeterProvider(metric_readers=[reader])
given = {}
if "tracer" in case:
    given["tracer_provider"] = tp
if "meter" in case:
    given["meter_provider"] = mp
if "global-tracer" in case:
    trace.set_tracer_provider(given.pop("tracer_provider"))
if "global-meter" in case:
    metrics.set_meter_provider(given.pop("meter_provider"))
cw.configure(**settings, **given)
cw.configure(**settings, **given)
with cw.stage("run-own", "agent@1"):
    cw.completion(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], mock_response="ok")
cw.flush()
data = reader.get_metrics_data()
mine_metrics = sorted({m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}) if data else []
print(json.dumps({"spans": sorted({s.name for s in spans.get_finished_spans()}), "metrics": mine_metrics}))
"""


def _own_providers(tmp_path, case: str, **settings: str) -> tuple[dict, list[str], dict[str, int]]:
    """(what the user's providers got, the cw warnings, the file's line kinds) of one case."""
    import json

    done = subprocess.run(
        [sys.executable, "-c", _OWN_PROVIDERS, case, json.dumps(settings)],
        env={k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CW_"))},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    warnings = [line for line in done.stderr.splitlines() if line.startswith("cw_middleware: snapshots (spans) go to")]
    path = tmp_path / "t.jsonl"
    kinds = {"resourceSpans": 0, "resourceMetrics": 0}
    for line in path.read_text().splitlines() if path.exists() else []:
        for kind in kinds:
            kinds[kind] += kind in json.loads(line)
    return got, warnings, kinds


def test_own_meter_provider_only_the_spans_go_to_the_export_and_it_is_said_once(tmp_path):
    got, warnings, kinds = _own_providers(tmp_path, "meter", export=f"file:{tmp_path / 't.jsonl'}")
    assert "agent.context_window.tokens" in got["metrics"] and got["spans"] == []
    assert kinds["resourceSpans"] > 0 and kinds["resourceMetrics"] == 0  # the file holds the spans, the metrics are theirs
    assert len(warnings) == 1, warnings
    assert "the MeterProvider passed to configure()" in warnings[0] and f"export=file:{tmp_path / 't.jsonl'}" in warnings[0]


def test_own_tracer_provider_only_the_metrics_go_to_the_export(tmp_path):
    got, warnings, kinds = _own_providers(tmp_path, "tracer", export=f"file:{tmp_path / 't.jsonl'}")
    assert "agent.stage.start" in got["spans"] and got["metrics"] == []
    assert kinds["resourceMetrics"] > 0 and kinds["resourceSpans"] == 0
    assert len(warnings) == 1 and "the TracerProvider passed to configure()" in warnings[0], warnings


def test_both_own_providers_get_everything_and_nothing_else_is_installed(tmp_path):
    got, warnings, kinds = _own_providers(tmp_path, "tracer+meter", export=f"file:{tmp_path / 't.jsonl'}")
    assert "agent.stage.start" in got["spans"] and "agent.context_window.tokens" in got["metrics"]
    assert kinds == {"resourceSpans": 0, "resourceMetrics": 0} and warnings == []


def test_a_global_tracer_provider_only_the_metrics_go_to_the_export(tmp_path):
    got, warnings, kinds = _own_providers(tmp_path, "global-tracer", export=f"file:{tmp_path / 't.jsonl'}")
    assert "agent.stage.start" in got["spans"]
    assert kinds["resourceMetrics"] > 0 and kinds["resourceSpans"] == 0
    assert len(warnings) == 1 and "the application's own TracerProvider" in warnings[0], warnings


def test_a_global_meter_provider_beside_a_passed_tracer_provider_is_used(tmp_path):
    got, warnings, kinds = _own_providers(tmp_path, "tracer+global-meter", export=f"file:{tmp_path / 't.jsonl'}")
    assert "agent.stage.start" in got["spans"] and "agent.context_window.tokens" in got["metrics"]
    assert kinds == {"resourceSpans": 0, "resourceMetrics": 0}
    assert len(warnings) == 1 and "is not installed" in warnings[0], warnings


def test_own_meter_provider_with_export_none_says_the_spans_go_nowhere(tmp_path):
    got, warnings, kinds = _own_providers(tmp_path, "meter", export="none")
    assert "agent.context_window.tokens" in got["metrics"]
    assert kinds == {"resourceSpans": 0, "resourceMetrics": 0}
    assert len(warnings) == 1 and "go to nowhere (export=none)" in warnings[0], warnings
