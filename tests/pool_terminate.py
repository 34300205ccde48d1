"""``python pool_terminate.py TELEMETRY_FILE WORKERS CALLS [METHOD [END]]``: calls on a ``multiprocessing.Pool``.

``METHOD`` is the start method (``fork`` by default, ``spawn``, ``forkserver``); ``END`` how the pool ends:
``with`` (the default: leaving a ``with multiprocessing.Pool() as pool:`` block calls ``terminate()``, which
SIGTERMs the workers) or ``close`` (``close(); join()``: the workers end by themselves). Each call is a stage of its
own (run ``pool``, stage ``s<i>``), on real LiteLLM with ``mock_response``, exported to the file
through the embedded default. Prints one JSON line: ``{"calls": n, "exit_codes": [...]}``. Should it hang, every
process's stacks go to stderr (faulthandler) and it exits with 3 before the test gives up.
"""

from __future__ import annotations

import faulthandler
import json
import multiprocessing
import os
import signal
import sys
import threading
import time

import litellm  # imported before the fork, as an application has it  # noqa: F401

import cw_middleware as cw


def call(i: int) -> int:
    with cw.stage("pool", f"s{i}"):
        reply = cw.completion(model="gpt-4o", messages=[{"role": "user", "content": f"question {i}"}], mock_response="ok")
    assert reply.choices[0].message.content == "ok"
    return i


def _dumps_on_sigusr1() -> None:
    faulthandler.register(signal.SIGUSR1, all_threads=True)


def _watchdog(processes: list, after: float) -> None:
    """Past ``after`` seconds (a hang: the test gives up at 180), every process's stacks go to stderr, then this exits."""

    def dump() -> None:
        for p in processes:
            if p.exitcode is None:
                os.kill(p.pid, signal.SIGUSR1)
        faulthandler.dump_traceback(all_threads=True)
        time.sleep(2)  # the workers' dumps
        os._exit(3)

    timer = threading.Timer(after, dump)
    timer.daemon = True
    timer.start()


def main(workers: int, calls: int, method: str = "fork", end: str = "with") -> None:
    pool = multiprocessing.get_context(method).Pool(workers, initializer=_dumps_on_sigusr1)
    processes = list(pool._pool)  # type: ignore[attr-defined]
    _watchdog(processes, 150.0)
    if end == "with":
        with pool:
            done = pool.map(call, range(calls))
    else:
        done = pool.map(call, range(calls))
        pool.close()
        pool.join()
    for p in processes:
        p.join(30)
    print(json.dumps({"calls": len(done), "exit_codes": sorted({p.exitcode for p in processes})}))


if __name__ == "__main__":
    main(int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:6])
