"""docs/reference/ is what docs/gen_reference.py writes from the code: a change to a setting, a name, the CLI or
the HTTP API without its page fails here (regenerate with ``python docs/gen_reference.py``)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATED = _generator().generate()


@pytest.mark.parametrize("path", sorted(GENERATED), ids=lambda p: p.name)
def test_the_committed_reference_page_is_what_the_generator_writes(path):
    assert path.exists(), f"{path.relative_to(ROOT)} is missing: run python docs/gen_reference.py"
    assert path.read_text(encoding="utf-8") == GENERATED[path], (
        f"{path.relative_to(ROOT)} is stale: run python docs/gen_reference.py and commit the page"
    )


def test_every_setting_and_variable_is_on_the_settings_page():
    page = GENERATED[ROOT / "docs/reference/settings.md"]
    # Spelled out here, not read from _kernel/config.py: a setting dropped from the page (or renamed) must show.
    for name in ("export", "service_name", "provider_count", "metrics", "metric_run_labels", "stream_usage", "exit_timeout"):
        assert f"| `{name}` |" in page
    for variable in ("CW_EXPORT", "CW_METRICS", "CW_STALE_AFTER", "CW_INDEX_DIR", "CW_BACKEND", "CW_BACKEND_TOKEN",
                     "CW_BACKEND_USER", "CW_BACKEND_PASSWORD", "CW_BACKEND_HEADERS", "CW_BACKEND_TIMEOUT", "CW_SERVE_TOKEN",
                     "OTEL_SERVICE_NAME", "OTEL_SDK_DISABLED"):  # fmt: skip
        assert f"`{variable}`" in page, variable
    from cw_middleware._kernel.config import READ_SETTINGS, SETTINGS

    listed = re.findall(r"^\| `(\w+)` \|", page, flags=re.M)
    assert listed == [s.name for s in SETTINGS] + [s.name for s in READ_SETTINGS]


def test_the_telemetry_page_names_the_contract():
    page = GENERATED[ROOT / "docs/reference/telemetry.md"]
    for name in (
        "agent.context_window.snapshot",
        "agent.stage.start",
        "agent.context_window.late_snapshot",
        "agent.run.id",
        "agent.stage.id",
        "agent.context_window.tokens.memory",
        "agent.context_window.utilization",
        "agent_context_window_snapshots_total",
        "gen_ai.client.token.usage",
        "context_window_exceeded",
    ):
        assert f"`{name}`" in page, name


def test_the_cli_page_has_every_command_and_the_http_page_every_route():
    cli = GENERATED[ROOT / "docs/reference/cli.md"]
    for command in ("estimate", "demo", "runs", "show", "stages", "serve"):
        assert f"\n## {command}\n" in cli and f"usage: cw-middleware {command}" in cli
    http = GENERATED[ROOT / "docs/reference/http-api.md"]
    for route in ("/api/v1/runs", "/api/v1/runs/{run_id}/stages/{stage_id}/context-window", "/api/v1/runs/{run_id}/events",
                  "/openapi.json", "/healthz", "/static/{name}"):  # fmt: skip
        assert f"## `GET {route}`" in http, route
