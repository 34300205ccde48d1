"""The examples run as documented and show what they claim to show."""

import subprocess
import sys
from pathlib import Path

import pytest

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
