"""Accuracy of the local estimate against real provider-reported input tokens.

Run from the repository root:

    /work/.venv/bin/python benchmarks/accuracy.py [--baseline] [--halves]

It runs the shared scorer (../shared/tools/accuracy.py) on ../shared/data/gt_dev.jsonl
(clean records) and prints its tables; ``--baseline`` also prints LiteLLM's
``token_counter`` on the same records for comparison (slow: imports LiteLLM).
``--halves`` re-scores the dev set split in two by source file (a stand-in for the
sealed holdout, which comes from other source files) and by source repository: a
rule that helps only one half, or one repository, is fitting a quirk.
"""

from __future__ import annotations

import json
import runpy
import statistics
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
SCORER = SHARED / "tools" / "accuracy.py"
DEV = SHARED / "data" / "gt_dev.jsonl"

# The scorer calls cw_middleware.estimate(); configure first so no telemetry is exported.
_RUN = (
    "import sys, runpy, cw_middleware; cw_middleware.configure(export='none');"
    f"sys.argv=['accuracy.py', {str(DEV)!r}] + sys.argv[1:]; runpy.run_path({str(SCORER)!r}, run_name='__main__')"
)


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    f = int(k)
    c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


def halves(rows_file: str) -> None:
    """Per provider: each half of the records split by source file, and each source repository."""
    meta = {}
    for line in DEV.open():
        r = json.loads(line)
        meta[r["id"]] = (r["source_path"], r["source_repo"])
    rows = [json.loads(line) for line in open(rows_file)]
    print("\nRobustness: halves split by source file, then per source repository")
    for provider in sorted({x["provider"] for x in rows}):
        groups: dict[str, list[float]] = {}
        for x in rows:
            if x["provider"] != provider:
                continue
            path, repo = meta[x["id"]]
            groups.setdefault(f"half {zlib.crc32(path.encode()) % 2}", []).append(x["ape"])
            groups.setdefault(f"  {repo}", []).append(x["ape"])
        print(provider)
        for name, apes in sorted(groups.items(), key=lambda kv: (not kv[0].startswith("half"), kv[0])):
            print(
                f"  {name:40} n={len(apes):4d} medAPE={statistics.median(apes):6.2f}% "
                f"p90={_pct(apes, 0.9):6.1f}% within2%={sum(a <= 2 for a in apes) / len(apes):.2f}"
            )


def baseline() -> None:
    scorer = runpy.run_path(str(SCORER))
    import litellm

    by: dict[str, list[float]] = {}
    for line in DEV.open():
        r = json.loads(line)
        if not r.get("clean", True):
            continue
        kw = scorer["to_kwargs"](r)
        try:
            est = litellm.token_counter(model=kw["model"], messages=kw["messages"], tools=kw.get("tools"))
        except Exception:  # noqa: BLE001 - a failure is a scored miss
            est = 0
        rep = r["reported_input_tokens"]
        by.setdefault(r["provider"], []).append(abs(est - rep) / rep * 100)
    print("\nLiteLLM token_counter baseline")
    for p, apes in sorted(by.items()):
        apes.sort()
        print(
            f"{p:12} n={len(apes):4d} medAPE={statistics.median(apes):6.2f}% "
            f"p90={apes[int(0.9 * (len(apes) - 1))]:6.1f}% within2%={sum(a <= 2 for a in apes) / len(apes):.2f}"
        )


if __name__ == "__main__":
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as rows:
        extra = ["--json", rows.name] if "--halves" in sys.argv else []
        subprocess.run([sys.executable, "-c", _RUN, *extra], cwd=ROOT, check=False)
        if extra:
            halves(rows.name)
    if "--baseline" in sys.argv:
        baseline()
