"""README's promises, run as written: the Quick start, the read-back snippet, the examples list, no outside paths."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docs_blocks import block

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end > 0 else None]


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def _run(code: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CW_", "OTEL_"))}
    argv = [sys.executable, *args] if args else [sys.executable, "-c", code]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)


@pytest.mark.system
def test_the_quick_start_runs_as_written_and_its_stage_reads_back(tmp_path):
    quick_start = _python_blocks(_section("Quick start"))[0]
    done = _run(quick_start, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    memory, total, window = (int(x) for x in done.stdout.split())
    assert 0 < memory < total and window == 128_000
    assert (tmp_path / "cw-telemetry.jsonl").stat().st_size > 0  # the default export, where `show` looks
    shown = _run("", tmp_path, "-m", "cw_middleware", "show", "run-42", "implement@1")
    assert shown.returncode == 0, shown.stderr
    assert "AGENTS.md" in shown.stdout and "mcp:github" in shown.stdout
    # The read-back snippet, in the same directory after the Quick start.
    reading = _python_blocks(_section("Reading the breakdown back"))[0]
    assert reading.startswith("import cw_middleware as cw\n")  # as written: it runs on its own
    done = _run(reading, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]


def test_every_example_is_listed_with_one_line():
    listed = re.findall(r"^- `(examples/[^`]+)`: \S.*$", README, flags=re.M)
    present = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").rglob("*.py"))
    assert sorted(listed) == present


def test_readme_points_at_nothing_outside_the_repository():
    assert "../" not in README and "DESIGN.md" not in README and "/work/" not in README
    for path in re.findall(r"`((?:cw_middleware|tests|benchmarks|examples|dashboards)/[\w./-]*)`", README):
        assert (ROOT / path).exists(), path


@pytest.mark.system
def test_the_responses_api_block_runs_after_the_quick_start(tmp_path):
    quick_start = _python_blocks(_section("Quick start"))[0]
    block = _python_blocks(_section("Responses API"))[0]
    done = _run(quick_start + "\n" + block, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    kind, memory = done.stdout.split()[-2:]
    assert kind == "ResponsesAPIResponse" and int(memory) > 0


def test_the_json_form_of_a_tag_is_read_by_estimate_from_a_file(tmp_path):
    request = block("tag-json").code
    assert json.loads(request)["messages"][0]["content"][1]["cw_tag"] == {"category": "memory", "source": "AGENTS.md"}
    (tmp_path / "request.json").write_text(request, encoding="utf-8")
    done = _run("", tmp_path, "-m", "cw_middleware", "estimate", "request.json")
    assert done.returncode == 0, done.stderr[-3000:]
    snapshot = json.loads(done.stdout)
    tokens = {b["category"]: b["tokens"] for b in snapshot["breakdown"]}
    assert tokens["memory"] > 0 and tokens["mcp_tools"] > 0 and tokens["system_prompt"] > 0
    sources = {(d["category"], d["source"]) for d in snapshot["details"]}
    assert ("memory", "AGENTS.md") in sources and ("mcp_tools", "mcp:github") in sources
