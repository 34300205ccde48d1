"""``python pool_terminate.py TELEMETRY_FILE WORKERS CALLS``: calls in a ``with multiprocessing.Pool() as pool:`` block.

Leaving the block calls ``terminate()``, which SIGTERMs the workers. Each call is a stage of its
own (run ``pool``, stage ``s<i>``), on real LiteLLM with ``mock_response``, exported to the file
through the embedded default. Prints one JSON line: ``{"calls": n, "exit_codes": [...]}``.
"""

from __future__ import annotations

import json
import multiprocessing
import sys

import litellm  # imported before the fork, as an application has it  # noqa: F401

import cw_middleware as cw


def call(i: int) -> int:
    with cw.stage("pool", f"s{i}"):
        reply = cw.completion(model="gpt-4o", messages=[{"role": "user", "content": f"question {i}"}], mock_response="ok")
    assert reply.choices[0].message.content == "ok"
    return i


def main(workers: int, calls: int) -> None:
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        done = pool.map(call, range(calls))
        processes = list(pool._pool)  # type: ignore[attr-defined]
    for p in processes:
        p.join(30)
    print(json.dumps({"calls": len(done), "exit_codes": sorted({p.exitcode for p in processes})}))


if __name__ == "__main__":
    main(int(sys.argv[2]), int(sys.argv[3]))
