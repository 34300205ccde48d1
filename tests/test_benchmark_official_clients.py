"""The official-client benchmark docs/performance.md quotes runs as its docstring says, every variant reported.

A smoke run (one call a variant, a small conversation): what it checks is that the command the docs
name still runs against the clients installed here and prints a ratio for each variant, not its figures.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = (
    "cw",
    "cw, ends on the caller",
    "cw, no snapshot",
    "cw, no first snapshot",
    "cw, neither",
    "cw, events through the SDK",
)


def test_official_clients_parts_reports_every_variant_for_each_client():
    done = subprocess.run(
        [sys.executable, "benchmarks/official_clients.py", "--calls", "1", "--turns", "2", "--parts"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("  ")}
    assert set(lines) == {"openai", "anthropic", "litellm"}, done.stdout
    for client, line in lines.items():
        bare = float(re.search(r"bare\s+([\d.]+)", line).group(1))
        assert bare > 0, line
        for name in VARIANTS:
            found = re.search(re.escape(f"  {name} ") + r"\s*([\d.]+) \(([\d.]+)x, ([+-][\d.]+) ms\)", line)
            assert found, f"{client}: no figure for {name!r} in {line!r}"
            median, ratio = float(found.group(1)), float(found.group(2))
            assert ratio == pytest.approx(median / bare, abs=0.01), line
