"""Every fenced block of README.md, SECURITY.md and docs/ runs as written, or says which test runs it or why it cannot.

The markers are described in tests/docs_blocks.py. Here: the markers themselves are checked (a known
attribute, a reason for every skip, a run-by file that exists and names the block or holds its lines,
an ``after`` that names a block), every python and shell block without ``skip``/``run-by`` runs in a
directory laid out like the repository (``tier="system"`` ones in the system tier), and the blocks
that are configuration or shown output are checked against what they show.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml
from docs_blocks import KNOWN, ROOT, Block, all_blocks, block, run, workdir

BLOCKS = [b for b in all_blocks() if "docs/reference/" not in str(b.path)]  # generated: tests/test_docs_reference.py


def _unique(blocks: list[Block]) -> list[Block]:
    """One of each block README repeats word for word from a page (it runs once)."""
    seen: set[tuple[str, str, str]] = set()
    out = []
    for b in blocks:
        key = (b.lang, b.code, repr(sorted(b.attrs.items())))
        if key not in seen:
            seen.add(key)
            out.append(b)
    return out


def _runs_here(b: Block) -> bool:
    return b.runnable and "skip" not in b.attrs and "run-by" not in b.attrs


RUNNABLE = [
    pytest.param(b, id=b.name or b.where, marks=[pytest.mark.system] if b.attrs.get("tier") == "system" else [])
    for b in _unique(BLOCKS)
    if _runs_here(b)
]


@pytest.mark.parametrize("b", BLOCKS, ids=lambda b: b.where)
def test_each_block_is_run_or_says_who_runs_it_or_why_not(b):
    assert b.lang, f"{b.where}: a fence without a language (text, python, bash, yaml, json, ...)"
    assert set(b.attrs) <= KNOWN, f"{b.where}: unknown marker attribute {set(b.attrs) - KNOWN}"
    if not b.runnable:
        assert "skip" in b.attrs or "run-by" in b.attrs, f"{b.where}: a {b.lang} block needs run-by= or skip="
    if "skip" in b.attrs:
        assert len(b.attrs["skip"].split()) >= 4, f"{b.where}: skip= needs a reason"
        assert "run-by" not in b.attrs
    if "run-by" in b.attrs:
        runner = ROOT / b.attrs["run-by"]
        assert runner.is_file(), f"{b.where}: run-by names no file: {runner}"
        text = runner.read_text(encoding="utf-8")
        lines = [line.split("  #")[0].strip() for line in b.code.splitlines()]
        named = b.name is not None and f'"{b.name}"' in text
        assert named or all(line in text for line in lines if line), f"{b.where}: {runner.name} neither names nor runs it"
    if "after" in b.attrs:
        block(b.attrs["after"])
    if b.name:
        block(b.name)  # same-named blocks are word for word the same


@pytest.mark.parametrize("b", RUNNABLE)
def test_the_block_runs_as_written(b, tmp_path):
    done = run(b, workdir(tmp_path), timeout=900 if b.attrs.get("tier") == "system" else 300)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-5000:])


def test_the_proxy_callback_snippet_is_what_the_example_config_says():
    snippet = yaml.safe_load(block("proxy-callback").code)
    config = yaml.safe_load((ROOT / "examples/proxy/config.yaml").read_text(encoding="utf-8"))
    assert snippet == {"litellm_settings": config["litellm_settings"]}


def test_the_scrape_config_snippet_is_a_valid_prometheus_configuration(tmp_path):
    from servers import require_binary

    promtool = require_binary("promtool", "apt-get install -y --no-install-recommends prometheus")
    (tmp_path / "prometheus.yml").write_text(block("scrape-config").code, encoding="utf-8")
    done = subprocess.run([promtool, "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert yaml.safe_load(block("scrape-config").code)["scrape_configs"][0]["static_configs"][0]["targets"] == ["127.0.0.1:9464"]
