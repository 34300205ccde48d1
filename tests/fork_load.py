"""Fork under load, in a process of its own: ``python fork_load.py TELEMETRY_FILE N_CHILDREN MODE``.

Four threads make cw calls in a loop (real LiteLLM ``acompletion``, mock_response, each
thread its own event loop) while the main thread forks: ``MODE=fork`` forks N children
with ``os.fork()`` (ending with ``os._exit``, as prefork servers' workers may),
``MODE=multiprocessing`` starts N processes with the ``fork`` start method; ``MODE=thread-fork``
forks as ``fork`` does while one thread calls LiteLLM's sync path through cw (``cw.completion``, whose
call ends run on cw's call-end worker: issue 37's probe). Each child
makes one call in a stage of its own (run ``forked``, stage ``child-<i>``) and exits; a
child still running after its deadline counts as hung and is killed (its stacks are in
``child-<i>.txt`` beside the telemetry file, as are those of a child whose flush failed). ``bare-`` before the mode runs the same
without cw: the baseline. One JSON line on stdout:
``{"hung": [...], "failed": {...}, "calls_during_forks": n}``.
"""

from __future__ import annotations

import asyncio
import faulthandler
import json
import logging
import multiprocessing
import os
import sys
import threading
import time

import cw_middleware as cw

DEADLINE = 20.0  # for all children together, from the last fork
STACKS = "."  # where a hung child's stacks are written (faulthandler, before its deadline)


def _messages(i: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You are terse."}, {"role": "user", "content": f"Question number {i}."}]


BARE = False  # MODE bare-fork: the same load and forks with bare LiteLLM, no cw at all (the baseline)


def child_call(i: int) -> int:
    """What each child does; its exit code (0: the call came back as LiteLLM's and telemetry flushed)."""
    stacks = open(f"{STACKS}/child-{i}.txt", "w")
    faulthandler.dump_traceback_later(DEADLINE - 2, exit=True, file=stacks)
    if BARE:
        import litellm

        reply = litellm.completion(model="gpt-4o", messages=_messages(i), mock_response=f"child {i}")
        return 0 if reply.choices[0].message.content == f"child {i}" else 3
    with cw.stage("forked", f"child-{i}"):
        reply = cw.completion(model="gpt-4o", messages=_messages(i), mock_response=f"child {i}")
    if reply.choices[0].message.content != f"child {i}":
        return 3
    # A bound, not a measure: forty children calling and flushing at once beside four threads of load
    # share two cores, and a child seen to need more than 5 s there was slow, not stuck.
    if cw.flush(12.0):
        return 0
    faulthandler.dump_traceback(stacks, all_threads=True)  # where the flush waits: beside a hung child's
    return 4


def _mp_target(i: int) -> None:
    code = child_call(i)
    if code:
        sys.exit(code)


def main(path: str, n: int, mode: str) -> None:
    global BARE, STACKS
    # The host's logging: LiteLLM's async logging worker complains on every call made from several
    # event loops, and asyncio about the pending tasks each child collects from its copies of
    # them. A parent thread writing to stderr at the instant of a fork leaves the child's stderr
    # lock held (CPython does not renew buffered-IO locks at fork): the child's first log line
    # would hang, cw or not. So this application keeps those two loggers quiet.
    for noisy in ("LiteLLM", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    BARE, mode = mode.startswith("bare-"), mode.removeprefix("bare-")
    one_sync_thread, mode = mode.startswith("thread-"), mode.removeprefix("thread-")
    STACKS = os.path.dirname(path)
    cw.configure(export=f"file:{path}", export_interval_ms=20, metric_interval_ms=100)
    import litellm

    complete = litellm.acompletion if BARE else cw.acompletion
    stop = threading.Event()
    calls = [0]

    async def calls_until_stopped(k: int) -> None:
        with cw.stage("parent", f"load-{k}"):
            while not stop.is_set():
                await complete(model="gpt-4o", messages=_messages(calls[0]), mock_response="ok")
                calls[0] += 1

    def load(k: int) -> None:
        # The load is async: LiteLLM's sync path submits its logging to a ThreadPoolExecutor on every
        # call, whose locks a forked child inherits held (cw renews them in a child: _kernel/offline.py);
        # thread-fork is the sync load.
        asyncio.run(calls_until_stopped(k))

    sync = litellm.completion if BARE else cw.completion

    def sync_load(k: int) -> None:
        with cw.stage("parent", f"load-{k}"):
            while not stop.is_set():
                sync(model="gpt-4o", messages=_messages(calls[0]), mock_response="ok")
                calls[0] += 1

    sync(model="gpt-4o", messages=_messages(-1), mock_response="ok")  # LiteLLM imported
    # The first call's estimate waits in the background for the tokenizer; flush waits for it, so the
    # children inherit it loaded (a child forked mid-load loads its own: tests/test_cold_start.py).
    cw.flush(10.0)
    if one_sync_thread:
        threads = [threading.Thread(target=sync_load, args=(0,), daemon=True)]
    else:
        threads = [threading.Thread(target=load, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    while calls[0] < 40:  # every thread is busy inside cw
        time.sleep(0.01)
    calls_before = calls[0]
    children: dict[int, int] = {}  # pid -> child number
    processes = []
    for i in range(n):
        if mode == "multiprocessing":
            p = multiprocessing.get_context("fork").Process(target=_mp_target, args=(i,))
            p.start()
            processes.append(p)
            children[p.pid or 0] = i
        else:
            pid = os.fork()
            if pid == 0:
                try:
                    code = child_call(i)
                except BaseException:  # noqa: BLE001
                    code = 5
                # Not sys.exit: LiteLLM's own exit hooks hang a child forked from a process that ran
                # it on several event loops, bare LiteLLM too. cw's exit hook is exercised by the
                # multiprocessing mode, whose children end through its finalizers.
                os._exit(code)
            children[pid] = i
        time.sleep(0.02)
    calls_during = calls[0] - calls_before
    stop.set()
    for t in threads:
        t.join(5)
    hung, failed = [], {}
    deadline = time.monotonic() + DEADLINE
    for i, p in enumerate(processes):
        p.join(max(0.0, deadline - time.monotonic()))
        if p.exitcode is None:
            hung.append(i)
            p.kill()
            p.join()
        elif p.exitcode:
            failed[i] = p.exitcode
    children = {} if processes else children
    while children and time.monotonic() < deadline:
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
                if code:
                    failed[children[pid]] = code
                del children[pid]
        time.sleep(0.02)
    for pid, i in children.items():
        hung.append(i)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    print(json.dumps({"hung": sorted(hung), "failed": failed, "calls_during_forks": calls_during}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
