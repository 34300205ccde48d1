"""What a call pays for new text it has never seen: the caller's added milliseconds by size (issue 20 item 7).

    python benchmarks/big_prompt.py [--sizes 0.06,1,4,16,50] [--messages 100000] [--rounds 3]

Each round sends, alternately, the same request through bare ``litellm.completion`` and
through ``cw.completion`` (``mock_response``, the default file export into a temporary
folder), each with text neither has seen before: a fresh user message of SIZE megabytes of
words, and then a conversation of N short messages. The added time is the median over the
rounds of (cw - bare), on the caller's thread: the call's return, not its estimate, which past
the caller's budget (estimator.py: `CALLER_TEXT_BUDGET`, `CALLER_MESSAGE_BUDGET`) is counted
on the background worker and published a little later. The last column is how long after the
call's return its ``local_estimate`` snapshot was there.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402

import cw_middleware as cw  # noqa: E402

MODEL = "gpt-4o"
_WORDS = "the model reads every token of the context window before it answers a call".split()


def _text(megabytes: float, rng: random.Random) -> str:
    """Fresh words: no two calls share a text, so no cache answers for it."""
    target = int(megabytes * 1024 * 1024)
    head = f"{rng.random()} "
    words = " ".join(rng.choices(_WORDS, k=target // 5 + 1))
    return (head + words)[:target]


def _conversation(n: int, rng: random.Random) -> list[dict[str, Any]]:
    tag = rng.random()
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"{tag} step {i}: {' '.join(rng.choices(_WORDS, k=6))}"}
        for i in range(n)
    ]


def _timed(fn: Any, messages: list[dict[str, Any]]) -> float:
    start = time.perf_counter()
    fn(model=MODEL, messages=messages, mock_response="On it.")
    return (time.perf_counter() - start) * 1000


def _estimate_after(before: int, returned: float) -> float:
    """Milliseconds from the call's return until its local estimate was published."""
    while len(cw.snapshots()) <= before:
        time.sleep(0.001)
    return (time.perf_counter() - returned) * 1000


def measure(label: str, make: Any, rounds: int) -> None:
    rng = random.Random(label)
    added, later = [], []
    for _ in range(rounds):
        bare = _timed(litellm.completion, make(rng))
        messages = make(rng)
        before = len(cw.snapshots())
        with cw.stage(run_id="big-prompt", stage_id=label):
            ms = _timed(cw.completion, messages)
        later.append(_estimate_after(before, time.perf_counter()))
        added.append(ms - bare)
        cw.flush(60)
    print(f"{label:<22} {statistics.median(added):+10.1f} ms {statistics.median(later):14.0f} ms", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="0.06,1,4,16,50", help="megabytes of new text per call, comma-separated")
    parser.add_argument("--messages", type=int, default=100_000, help="short new messages in one call (0: skip)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cw.configure(export=f"file:{Path(tmp) / 'telemetry.jsonl'}")
        cw.estimate(model=MODEL, messages=[{"role": "user", "content": "warm the tokenizer"}])
        _timed(litellm.completion, [{"role": "user", "content": "warm LiteLLM"}])
        print(f"load {os.getloadavg()[0]:.1f}; median of {args.rounds} rounds, each side with text it has not seen")
        print(f"{'new in the call':<22} {'added (cw - bare)':>13} {'estimate after':>14}")
        for size in (float(s) for s in args.sizes.split(",") if s):
            measure(f"{size:g} MB of text", lambda rng, size=size: [{"role": "user", "content": _text(size, rng)}], args.rounds)
        if args.messages:
            measure(f"{args.messages:,} messages", lambda rng: _conversation(args.messages, rng), args.rounds)
        cw.flush(60)


if __name__ == "__main__":
    main()
