"""Running a scenario script in the frameworks venv and reading back what it exported.

The frameworks (and the LiteLLM Proxy's server dependencies) live in a separate
venv, ``.venv-frameworks/`` at the repository root, built by
``.ci/steps/40-frameworks`` from ``requirements-frameworks.lock``. Without it the
suites here skip with the reason; with ``CW_CI=1`` set they fail instead.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest

from cw_middleware._readback import otlp_json
from cw_middleware._readback.otlp_json import Span

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = Path(__file__).resolve().parent / "scenarios"
VENV_DIR = ROOT / ".venv-frameworks"
RESULT_MARKER = "CW-RESULT "
BUILD_HINT = "build it with .ci/steps/40-frameworks"


# The second venv: frameworks whose OpenTelemetry pins do not fit the first (.ci/steps/41-frameworks-otel).
OTEL_VENV = ".venv-frameworks-otel"
OTEL_BUILD_HINT = "build it with .ci/steps/41-frameworks-otel"


def frameworks_python(venv: str = VENV_DIR.name) -> Path:
    """The interpreter of a frameworks venv, or skip (fail under CW_CI=1) with the reason."""
    override = os.environ.get("CW_FRAMEWORKS_PYTHON") if venv == VENV_DIR.name else None
    python = Path(override) if override else ROOT / venv / "bin" / "python"
    if not python.exists():
        reason = f"frameworks venv missing ({python}): {BUILD_HINT if venv == VENV_DIR.name else OTEL_BUILD_HINT}"
        if os.environ.get("CW_CI") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return python


def scenario_env(**extra: str) -> dict[str, str]:
    """The environment of a scenario process: this checkout's cw_middleware first, everything offline."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "CW_", "OTEL_", "LITELLM_"))}
    env.update(
        PYTHONPATH=str(ROOT),
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        OPENAI_AGENTS_DISABLE_TRACING="1",
        HF_HUB_OFFLINE="1",
        PYTHONUNBUFFERED="1",
        **extra,
    )
    return env


@dataclass
class ScenarioRun:
    outcomes: dict[str, dict[str, Any]]
    versions: dict[str, str]
    export: Path
    log: Path
    stdout: str
    stderr: str

    def spans(self) -> list[Span]:
        return read_spans(self.export)


def run_scenario(script: str, config: dict[str, Any], tmp: Path, timeout: float = 300, venv: str = VENV_DIR.name) -> ScenarioRun:
    python = frameworks_python(venv)
    config = {**config, "export": str(tmp / "telemetry.jsonl"), "log": str(tmp / "cw.log")}
    proc = subprocess.run(
        [str(python), str(SCENARIOS / script), json.dumps(config)],
        capture_output=True,
        text=True,
        env=scenario_env(HOME=str(tmp)),
        cwd=tmp,
        timeout=timeout,
    )
    result: Optional[dict[str, Any]] = None
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARKER):
            result = json.loads(line[len(RESULT_MARKER) :])
    if proc.returncode != 0 or result is None:
        raise AssertionError(f"{script} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return ScenarioRun(result["outcomes"], result["versions"], tmp / "telemetry.jsonl", tmp / "cw.log", proc.stdout, proc.stderr)


def read_spans(path: Path) -> list[Span]:
    spans: list[Span] = []
    if not path.exists():
        return spans
    for line in path.read_text().splitlines():
        if line.strip():
            spans.extend(otlp_json.iter_spans(json.loads(line)))
    return spans


def call_spans(spans: list[Span], run_id: str, stage_id: str) -> list[Span]:
    """The LLM call spans of one stage (not the stage span, its start marker or late-snapshot carriers)."""
    return [
        s
        for s in spans
        if s.attributes.get("agent.run.id") == run_id
        and s.attributes.get("agent.stage.id") == stage_id
        and "gen_ai.operation.name" in s.attributes
    ]


def final_snapshot(span: Span) -> Optional[dict[str, Any]]:
    """The attributes of a call span's last snapshot event."""
    events = [e for e in span.events if e.name == "agent.context_window.snapshot"]
    return events[-1].attributes if events else None
