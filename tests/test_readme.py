"""The Quick start and what runs after it, as written, in one directory: README's and the site's blocks
``quick-start`` (then `show`, the home page's ``show-output``, ``read-back``, ``stages-listing``) and
``responses``; the JSON form of a tag; the examples list; no outside paths.

These blocks carry ``run-by="tests/test_readme.py"``: one Quick start run serves every block that reads
what it exported (tests/test_docs_blocks.py runs the other blocks and checks every marker).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from docs_blocks import ROOT, block, documents, environment, run, workdir

README = (ROOT / "README.md").read_text(encoding="utf-8")


def _shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=environment(), capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def quick_started(tmp_path_factory) -> tuple[Path, str]:
    """A directory where the Quick start ran as written: its output, and the file it exported."""
    sandbox = workdir(tmp_path_factory.mktemp("quick-start"))
    done = run(block("quick-start"), sandbox)
    assert done.returncode == 0, done.stderr[-3000:]
    return sandbox, done.stdout


@pytest.mark.system  # fresh interpreters: the system tier
def test_the_quick_start_runs_as_written_and_its_stage_reads_back(quick_started):
    sandbox, out = quick_started
    memory, total, window = (int(x) for x in out.split())
    assert 0 < memory < total and window == 128_000
    assert (sandbox / "cw-telemetry.jsonl").stat().st_size > 0  # the default export, where `show` looks
    shown = _shell("cw-middleware show run-42 implement@1", sandbox)
    assert shown.returncode == 0, shown.stderr
    assert "AGENTS.md" in shown.stdout and "mcp:github" in shown.stdout

    def masked(text: str) -> str:
        return re.sub(r"at \d{4}-\d\d-\d\dT[\d:]+\+00:00", "at TIME", text).rstrip()

    assert masked(shown.stdout) == masked(block("show-output").code)  # the home page's output, as shown


@pytest.mark.system  # fresh interpreters: the system tier
def test_the_read_back_block_runs_as_written_after_the_quick_start(quick_started):
    sandbox, _ = quick_started
    reading = block("read-back")
    assert reading.code.startswith("import cw_middleware as cw\n")  # as written: it runs on its own
    done = subprocess.run(["python", "-c", reading.code], cwd=sandbox, env=environment(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.system  # fresh interpreters: the system tier
def test_the_stages_listing_names_the_quick_starts_stage(quick_started):
    sandbox, _ = quick_started
    done = _shell(block("stages-listing").code, sandbox)
    assert done.returncode == 0, done.stderr
    assert "implement@1" in done.stdout and "stored" in done.stdout


@pytest.mark.system  # fresh interpreters: the system tier
def test_the_responses_api_block_runs_after_the_quick_start(tmp_path):
    done = run(block("responses"), workdir(tmp_path))  # one program: it uses the Quick start's definitions
    assert done.returncode == 0, done.stderr[-3000:]
    kind, memory = done.stdout.split()[-2:]
    assert kind == "ResponsesAPIResponse" and int(memory) > 0


@pytest.mark.system  # fresh interpreters: the system tier
def test_the_json_form_of_a_tag_is_read_by_estimate_from_a_file(tmp_path):
    request = block("tag-json").code
    assert json.loads(request)["messages"][0]["content"][1]["cw_tag"] == {"category": "memory", "source": "AGENTS.md"}
    (tmp_path / "request.json").write_text(request, encoding="utf-8")
    done = _shell("cw-middleware estimate request.json", tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    snapshot = json.loads(done.stdout)
    tokens = {b["category"]: b["tokens"] for b in snapshot["breakdown"]}
    assert tokens["memory"] > 0 and tokens["mcp_tools"] > 0 and tokens["system_prompt"] > 0
    sources = {(d["category"], d["source"]) for d in snapshot["details"]}
    assert ("memory", "AGENTS.md") in sources and ("mcp_tools", "mcp:github") in sources


def test_every_example_is_listed_with_one_line():
    listed = {path for doc in documents() for path in re.findall(r"^- `(examples/[^`]+)`: \S.*$", doc.read_text(), flags=re.M)}
    present = {str(p.relative_to(ROOT)) for p in (ROOT / "examples").rglob("*.py")}
    assert {path for path in listed if path.endswith(".py")} == present
    assert all((ROOT / path).exists() for path in listed)


def test_the_docs_point_at_nothing_outside_the_repository():
    for doc in documents():
        text = doc.read_text(encoding="utf-8")
        assert "../shared" not in text and "DESIGN.md" not in text and "/work/" not in text, doc.name
        for path in re.findall(r"`((?:cw_middleware|tests|benchmarks|examples|dashboards|docs|\.ci)/[\w./-]*)`", text):
            assert (ROOT / path).exists(), f"{doc.name}: {path}"
