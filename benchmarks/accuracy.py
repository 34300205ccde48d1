"""Accuracy of the local estimate against real provider-reported input tokens.

Run from the repository root:

    python benchmarks/accuracy.py [--data FILE] [--scorer FILE] [--baseline] [--halves]

It needs two things this repository does not ship: a data set of recorded requests
(JSON lines, one request a line in its provider's native format, with the input
tokens the provider reported, its provider, source file and source repository), and
the scorer script that turns each record into ``cw_middleware.estimate()`` kwargs
(it defines ``to_kwargs(record)`` and, run as a script, prints the score tables).
``--data`` and ``--scorer`` name them; by default the project's shared data
(``../shared/data/gt_dev.jsonl`` and ``../shared/tools/accuracy.py``) is used when it
sits beside the checkout. ``--baseline`` also prints LiteLLM's ``token_counter`` on the
same records for comparison (slow: imports LiteLLM). ``--halves`` re-scores the data
split in two by source file and by source repository: a rule that helps only one
half, or one repository, is fitting a quirk.
"""

from __future__ import annotations

import argparse
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
DEFAULT_SCORER = SHARED / "tools" / "accuracy.py"
DEFAULT_DATA = SHARED / "data" / "gt_dev.jsonl"


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    f = int(k)
    c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


def halves(data: Path, rows_file: str) -> None:
    """Per provider: each half of the records split by source file, and each source repository."""
    meta = {}
    for line in data.open():
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
                f"p90={_pct(apes, 0.9):6.1f}% within2%={sum(a <= 2 for a in apes) / len(apes):.3f}"
            )


def baseline(data: Path, scorer: Path) -> None:
    """LiteLLM's token_counter on the same records, grouped as the scorer groups its own tables."""
    to_kwargs = runpy.run_path(str(scorer))["to_kwargs"]
    import litellm

    by: dict[str, list[float]] = {}
    for line in data.open():
        r = json.loads(line)
        if not r.get("clean", True):
            continue
        kw = to_kwargs(r)
        try:
            est = litellm.token_counter(model=kw["model"], messages=kw["messages"], tools=kw.get("tools"))
        except Exception:  # noqa: BLE001 - a failure is a scored miss
            est = 0
        rep = r["reported_input_tokens"]
        ape = abs(est - rep) / rep * 100
        shape = f"{'tools' if r.get('has_tools') else 'no-tools'}{'+schema' if r.get('has_response_schema') else ''}"
        for key in (r["provider"], f"{r['provider']}/{r['api']}", f"{r['provider']}/{shape}"):
            by.setdefault(key, []).append(ape)
    print("\nLiteLLM token_counter baseline")
    for key, apes in sorted(by.items(), key=lambda kv: (kv[0].split("/")[0], "/" in kv[0], kv[0])):
        print(
            f"{key:32} n={len(apes):4d} medAPE={statistics.median(apes):6.2f}% "
            f"p90={_pct(apes, 0.9):6.1f}% within2%={sum(a <= 2 for a in apes) / len(apes):.3f}"
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Score the local estimate against provider-reported input tokens.")
    parser.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA if DEFAULT_DATA.is_file() else None,
        help="recorded requests with their reported input tokens, JSON lines (default: the shared data beside the checkout)",
    )
    parser.add_argument(
        "--scorer",
        type=Path,
        default=DEFAULT_SCORER if DEFAULT_SCORER.is_file() else None,
        help="the scorer script defining to_kwargs(record) (default: the shared scorer beside the checkout)",
    )
    parser.add_argument("--baseline", action="store_true", help="also score LiteLLM's token_counter on the same records")
    parser.add_argument("--halves", action="store_true", help="re-score two halves split by source file, and per repository")
    args = parser.parse_args(argv)
    for name, what in (("data", "a data set of recorded requests (JSON lines)"), ("scorer", "the scorer script")):
        value = getattr(args, name)
        if value is None:
            parser.error(f"needs {what}: pass --{name} FILE (none was found beside the checkout)")
        if not value.is_file():
            parser.error(f"--{name} {value}: no such file")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # The scorer calls cw_middleware.estimate(); configure first so no telemetry is exported.
    run = (
        "import sys, runpy, cw_middleware; cw_middleware.configure(export='none');"
        f"sys.argv=['accuracy.py', {str(args.data)!r}] + sys.argv[1:]; runpy.run_path({str(args.scorer)!r}, run_name='__main__')"
    )
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as rows:
        extra = ["--json", rows.name] if args.halves else []
        done = subprocess.run([sys.executable, "-c", run, *extra], cwd=ROOT, check=False)
        if done.returncode != 0:
            return done.returncode
        if extra:
            halves(args.data, rows.name)
    if args.baseline:
        baseline(args.data, args.scorer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
