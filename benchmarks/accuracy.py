"""Accuracy of the local estimate against real provider-reported input tokens.

Run from the repository root:

    /work/.venv/bin/python benchmarks/accuracy.py [--baseline]

It runs the shared scorer (../shared/tools/accuracy.py) on ../shared/data/gt_dev.jsonl
(clean records) and prints its tables; ``--baseline`` also prints LiteLLM's
``token_counter`` on the same records for comparison (slow: imports LiteLLM).
"""

from __future__ import annotations

import json
import runpy
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
SCORER = SHARED / "tools" / "accuracy.py"
DEV = SHARED / "data" / "gt_dev.jsonl"

# The scorer calls cw_middleware.estimate(); configure first so no telemetry is exported.
_RUN = (
    "import sys, runpy, cw_middleware; cw_middleware.configure(export='none');"
    f"sys.argv=['accuracy.py', {str(DEV)!r}]; runpy.run_path({str(SCORER)!r}, run_name='__main__')"
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
        print(f"{p:12} n={len(apes):4d} medAPE={statistics.median(apes):6.2f}% "
              f"p90={apes[int(0.9 * (len(apes) - 1))]:6.1f}% within2%={sum(a <= 2 for a in apes) / len(apes):.2f}")


if __name__ == "__main__":
    subprocess.run([sys.executable, "-c", _RUN], cwd=ROOT, check=False)
    if "--baseline" in sys.argv:
        baseline()
