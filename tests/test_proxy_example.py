"""examples/proxy/ as README shows it: a real LiteLLM Proxy process started by README's block, as written.

The proxy's venv (.venv-proxy/) is built by .ci/steps/45-proxy with README's install line (checked
here to be the same line). README's "proxy" block then runs verbatim in a copy of the repository's
layout, with one change: port 4000 becomes a free one. The block starts the proxy, waits for it,
sends one chat request naming its stage in headers, and reads the stage back with `show`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from docs_blocks import ROOT, block, run, workdir

pytestmark = pytest.mark.system


def _proxy_venv() -> Path:
    venv = ROOT / ".venv-proxy"
    if not (venv / "bin" / "litellm").exists():
        reason = f"the proxy venv is missing ({venv}): build it with .ci/steps/45-proxy"
        if os.environ.get("CW_CI") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return venv


def test_the_install_line_is_the_one_ci_runs():
    install = block("proxy-install").code.strip()
    assert install in [line.strip() for line in (ROOT / ".ci/steps/45-proxy").read_text(encoding="utf-8").splitlines()]
    assert "examples/proxy/requirements.lock" in install


def test_the_proxy_config_has_a_mock_model_the_callback_and_the_key_from_the_environment():
    config = yaml.safe_load((ROOT / "examples/proxy/config.yaml").read_text(encoding="utf-8"))
    assert config["litellm_settings"]["callbacks"] == "cw_middleware.litellm_proxy.handler"
    assert config["general_settings"]["master_key"] == "os.environ/LITELLM_MASTER_KEY"
    (model,) = config["model_list"]
    assert model["model_name"] == "gpt-4o" and model["litellm_params"]["mock_response"]


def test_the_proxy_requirements_carry_mcp_and_the_frameworks_venv_takes_them():
    lock = (ROOT / "examples/proxy/requirements.lock").read_text(encoding="utf-8")
    assert "\nmcp==" in lock and "\nlitellm==" in lock and "--hash=sha256:" in lock
    assert "-r examples/proxy/requirements.in" in (ROOT / "requirements-frameworks.in").read_text(encoding="utf-8")
    assert "\nmcp==" in (ROOT / "requirements-frameworks.lock").read_text(encoding="utf-8")


def test_readmes_proxy_block_starts_a_real_proxy_records_the_stage_and_reads_it_back(tmp_path):
    _proxy_venv()
    done = run(block("proxy"), workdir(tmp_path), timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    # The curl's answer: the mocked model's reply through the proxy.
    reply = next(line for line in done.stdout.splitlines() if '{"id"' in line)
    answer = json.loads(reply[reply.index('{"id"') :])
    assert answer["choices"][0]["message"]["content"] == "On it."
    # `show`'s answer: the stage the headers named, read back from the file CW_EXPORT named.
    assert "run-42 / research@1" in done.stdout and f"file:{tmp_path}/proxy-telemetry.jsonl" in done.stdout
    assert "Conversation" in done.stdout and "count: local_estimate" in done.stdout
    assert (tmp_path / "proxy-telemetry.jsonl").stat().st_size > 0
