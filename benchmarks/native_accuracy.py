"""The official clients' requests count as the same requests sent through LiteLLM: accuracy both ways.

    python benchmarks/native_accuracy.py [--data FILE] [--scorer FILE]

Every clean OpenAI (Chat Completions, Responses) and Anthropic Messages record of the data set
(see benchmarks/accuracy.py: one request a line in its provider's native format, with the input
tokens the provider reported) is estimated twice: as the scorer turns it into LiteLLM arguments
(``cw.estimate``), and as the official client sends it, through the adapter of its wire format
(``apis/``: the Anthropic request read natively by the Messages adapter). The bar: per provider and
API, the median APE and the share within 2% agree within 0.5 points.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import cw_middleware as cw  # noqa: E402
from benchmarks.accuracy import DEFAULT_DATA, DEFAULT_SCORER, _pct  # noqa: E402
from cw_middleware._capture.apis import CHAT, MESSAGES, RESPONSES, Api  # noqa: E402
from cw_middleware._capture.runtime import get_runtime  # noqa: E402

# (provider, api of the record) -> the adapter the official client's request goes through, and the facts provider.
NATIVE: dict[tuple[str, str], tuple[Api, str]] = {
    ("openai", "chat_completions"): (CHAT, "openai"),
    ("openai", "responses"): (RESPONSES, "openai"),
    ("anthropic", "messages"): (MESSAGES, "anthropic"),
}
BAR_POINTS = 0.5


def native_estimate(record: dict[str, Any]) -> int:
    """The local estimate of the record's request as its official client sends it (what cw.wrap(client) counts)."""
    api, facts = NATIVE[(record["provider"], record["api"])]
    request = dict(record["request"])
    request["model"] = record["model"]
    parsed = api.parse((), request)
    parsed = replace(parsed, options={**parsed.options, "custom_llm_provider": facts})
    estimate = get_runtime().estimator.estimate(parsed.model, parsed.messages, api=parsed.api, **parsed.options)
    return estimate.total


def _stats(apes: list[float]) -> dict[str, float]:
    return {"median": statistics.median(apes), "p90": _pct(apes, 0.9), "w2": 100 * sum(a <= 2 for a in apes) / len(apes)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--scorer", type=Path, default=DEFAULT_SCORER)
    args = parser.parse_args(argv)
    if not args.data.exists() or not args.scorer.exists():
        print(f"needs the data set and the scorer: {args.data}, {args.scorer}", file=sys.stderr)
        return 2
    cw.configure(export="none")
    to_kwargs = runpy.run_path(str(args.scorer))["to_kwargs"]
    apes: dict[str, dict[str, list[float]]] = {}
    for line in args.data.open():
        record = json.loads(line)
        key = (record["provider"], record["api"])
        if key not in NATIVE or not record.get("clean", True):
            continue
        reported = record["reported_input_tokens"]
        via_litellm = cw.estimate(**to_kwargs(record, True)).input_tokens or 0
        via_client = native_estimate(record)
        group = apes.setdefault(f"{key[0]}/{key[1]}", {"litellm": [], "client": []})
        group["litellm"].append(abs(via_litellm - reported) / reported * 100)
        group["client"].append(abs(via_client - reported) / reported * 100)
    ok = True
    print(f"{'records':28} {'n':>5} {'path':>8} {'medAPE%':>8} {'p90%':>7} {'<=2%':>6}")
    for name, paths in sorted(apes.items()):
        litellm, client = _stats(paths["litellm"]), _stats(paths["client"])
        for path, s in (("litellm", litellm), ("client", client)):
            print(f"{name:28} {len(paths[path]):5d} {path:>8} {s['median']:8.2f} {s['p90']:7.2f} {s['w2']:6.1f}")
        close = abs(client["median"] - litellm["median"]) <= BAR_POINTS and abs(client["w2"] - litellm["w2"]) <= BAR_POINTS
        ok &= close
        print(f"{'':28} {'':5} {'':>8} within {BAR_POINTS} points: {'PASS' if close else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
