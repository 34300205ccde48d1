"""The examples run as documented and show what they claim to show."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from http_servers import OtlpReceiver, running

pytestmark = pytest.mark.system  # the system tier (pyproject.toml): `pytest -m system`

ROOT = Path(__file__).resolve().parents[1]


def run(script: str) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_plain_wrap_prints_a_breakdown():
    out = run("plain_wrap.py")
    assert "reply: Paris." in out
    assert "system_prompt" in out and "conversation" in out


def test_agent_loop_attributes_memory_mcp_and_skills():
    out = run("agent_loop.py")
    final = out.split("== final call")[1]
    for source in ("AGENTS.md", "mcp:github", "skill:pdf"):
        assert source in final


def _shell(command: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``command`` in bash as a user types it, with this venv's python and cw-middleware first on PATH."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CW_", "OTEL_"))}
    clean.update(env, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=clean, capture_output=True, text=True, timeout=180)


def test_agent_loop_exports_where_cw_export_says_and_show_reads_it_back(tmp_path):
    # The example's own docstring command, in a copy of the repository's layout (examples/ beside the file).
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    done = _shell("CW_EXPORT=file:$PWD/a.jsonl python examples/agent_loop.py", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "a.jsonl").stat().st_size > 0
    shown = _shell("cw-middleware show example-run release@1 --backend file:$PWD/a.jsonl", tmp_path)
    assert shown.returncode == 0, shown.stderr
    for source in ("AGENTS.md", "mcp:github", "skill:pdf"):
        assert source in shown.stdout


def test_agent_loop_without_cw_export_writes_no_file(tmp_path):
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    done = _shell("python examples/agent_loop.py", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (tmp_path / "cw-telemetry.jsonl").exists()


def test_the_compose_files_otlp_command_sends_the_run_over_otlp(tmp_path):
    # docker-compose.yaml's header command, with the Collector's port replaced by a local OTLP/HTTP receiver.
    header = (ROOT / "examples/collector/docker-compose.yaml").read_text(encoding="utf-8")
    command = next(line[1:].strip() for line in header.splitlines() if "examples/agent_loop.py" in line)
    assert command == "CW_EXPORT=otlp OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 python examples/agent_loop.py"
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    with running(OtlpReceiver) as receiver:
        done = _shell(command.replace("http://localhost:4318", receiver.url), tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        assert b"example-run" in receiver.all_bytes() and b"release@1" in receiver.all_bytes()
