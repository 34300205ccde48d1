"""A count off the caller's thread beside a busy thread: the new texts to tiktoken together, or one by one.

    python benchmarks/busy_neighbour.py [--repeats 5]

tiktoken releases the GIL for each text it encodes, and a thread that gave the GIL away waits
for it while another thread computes (up to the interpreter's 5 ms switch interval). The
background estimate of a new ~100k-token conversation (200 turns, 801 messages, 30 tools: what
a call's first estimate, or any past the caller's budget, counts on the worker) is timed alone
and beside one thread running Python, three ways:

* as shipped: the new texts go to tiktoken together (`_tiktoken.batched`), after a dry run that
  finds them;
* one by one, as before: the same estimate with batching switched off for the run;

each alone (nothing beside it) and beside the busy thread. Reported: the median of ``--repeats``
estimates each, and the ratio to the floor, one by one alone. What depends on it: while that
first count is starved, every call of the process takes the background path (its request copied
on the caller's thread), as ``accounting.py`` bar 3's calls did.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from benchmarks.conversation import make_tools, make_turns, request_at  # noqa: E402
from cw_middleware._counting.estimator import Estimator  # noqa: E402
from cw_middleware._counting.rules import _tiktoken, rules_for  # noqa: E402

MODEL = "gpt-4o"


def _timed(messages: list, tools: list, beside_busy: bool) -> float:
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            sum(range(200))

    neighbour = threading.Thread(target=busy, daemon=True)
    if beside_busy:
        neighbour.start()
    try:
        start = time.perf_counter()
        Estimator().estimate(MODEL, messages, tools=tools)  # a fresh estimator: every text is new
        return time.perf_counter() - start
    finally:
        stop.set()
        if beside_busy:
            neighbour.join()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    _tiktoken.encoding("o200k_base")
    system, turns = make_turns(200)
    messages, tools = request_at(system, turns, 200), make_tools()
    rules = type(rules_for(MODEL))

    def median(beside_busy: bool, batches: bool) -> float:
        saved = rules.counts_in_batches
        rules.counts_in_batches = batches  # type: ignore[misc]
        try:
            return statistics.median(_timed(messages, tools, beside_busy) for _ in range(args.repeats))
        finally:
            rules.counts_in_batches = saved  # type: ignore[misc]

    floor = median(beside_busy=False, batches=False)
    alone_together = median(beside_busy=False, batches=True)
    together = median(beside_busy=True, batches=True)
    one_by_one = median(beside_busy=True, batches=False)
    print(f"load {os.getloadavg()[0]:.1f}; {len(messages)} messages, {len(tools)} tools; median of {args.repeats}")
    print(f"  alone, one by one (the floor)      {1000 * floor:8.1f} ms")
    print(f"  alone, together                    {1000 * alone_together:8.1f} ms   {alone_together / floor:6.2f}x")
    print(f"  beside a busy thread, one by one   {1000 * one_by_one:8.1f} ms   {one_by_one / floor:6.2f}x")
    print(f"  beside a busy thread, together     {1000 * together:8.1f} ms   {together / floor:6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
