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
from cw_middleware.cli import main
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
