"""The one bounded worker (cw_middleware/_worker.py): event-gated jobs, no wall-clock bounds."""

from __future__ import annotations

import gc
import logging
import os
import threading
import weakref

import pytest

from cw_middleware._kernel.worker import Worker


class Gate:
    """A job that blocks until the test opens it."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> str:
        self.entered.set()
        assert self.release.wait(30)
        return "done"


def test_submit_never_blocks_and_jobs_run_in_order() -> None:
    worker = Worker("t-order", max_jobs=10)
    gate, seen = Gate(), []
    assert worker.submit(gate)
    assert gate.entered.wait(10)
    for i in range(5):
        assert worker.submit(lambda i=i: seen.append(i))  # returns while the gate still holds the thread
    assert worker.pending == 5 and seen == []
    gate.release.set()
    assert worker.wait_idle(10)
    assert seen == [0, 1, 2, 3, 4]


def test_a_full_queue_refuses_without_waiting() -> None:
    worker = Worker("t-full", max_jobs=2)
    gate = Gate()
    worker.submit(gate)
    assert gate.entered.wait(10)
    assert worker.submit(lambda: None) and worker.submit(lambda: None)
    assert not worker.submit(lambda: None)  # the third waits for nobody: refused while the gate is shut
    gate.release.set()
    assert worker.wait_idle(10)
    assert worker.submit(lambda: None)


def test_a_job_is_dropped_once_it_has_run() -> None:
    """The thread waits up to idle_exit for its next job; it must not hold the last one meanwhile."""

    class Payload:
        pass

    worker = Worker("t-drop", max_jobs=4, idle_exit=60)
    payload = Payload()
    ref = weakref.ref(payload)
    ran = threading.Event()

    def job(p: Payload = payload) -> None:
        ran.set()

    worker.submit(job)
    del job, payload
    assert ran.wait(10) and worker.wait_idle(10)
    gc.collect()
    assert ref() is None
    assert worker.on_worker() is False


def test_idle_exit_ends_the_thread_and_the_next_job_starts_one() -> None:
    worker = Worker("t-idle", max_jobs=4, idle_exit=0.01)
    threads: list[threading.Thread] = []
    worker.submit(lambda: threads.append(threading.current_thread()))
    assert worker.wait_idle(10)
    threads[0].join(10)
    assert not threads[0].is_alive()
    worker.submit(lambda: threads.append(threading.current_thread()))
    assert worker.wait_idle(10)
    assert threads[1] is not threads[0]


def test_thread_ident_names_the_thread_that_runs_the_jobs() -> None:
    worker = Worker("t-ident", max_jobs=4, idle_exit=30)
    assert worker.thread_ident is None  # no job yet, no thread
    seen: list[int] = []
    worker.submit(lambda: seen.append(threading.get_ident()))
    assert worker.wait_idle(10)
    assert worker.thread_ident == seen[0] != threading.get_ident()
    worker.close()


def test_run_answers_or_gives_up_while_the_job_is_still_blocked() -> None:
    worker = Worker("t-run", max_jobs=4)
    assert worker.run(lambda: 41 + 1, timeout=10) == 42
    gate = Gate()
    assert worker.run(gate, timeout=0.0) is None  # the caller is back while the gate is shut
    assert gate.entered.wait(10)
    # A second run waits behind the stuck job instead of starting a thread beside it.
    assert worker.run(lambda: "second", timeout=0.0) is None
    assert threading.active_count() >= 1 and worker.pending == 1
    gate.release.set()
    assert worker.wait_idle(10)


def test_a_failing_job_is_logged_by_type_and_the_worker_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    worker = Worker("t-fail", max_jobs=4)

    def boom() -> None:
        raise ValueError("secret-canary-in-the-message")

    with caplog.at_level(logging.WARNING, logger="cw_middleware"):
        worker.submit(boom)
        assert worker.run(lambda: "after", timeout=10) == "after"
    assert "ValueError" in caplog.text and "secret-canary" not in caplog.text


def test_close_abandons_the_queue_and_refuses_new_jobs() -> None:
    worker = Worker("t-close", max_jobs=4)
    gate, seen = Gate(), []
    worker.submit(gate)
    assert gate.entered.wait(10)
    worker.submit(lambda: seen.append("queued"))
    assert worker.close(timeout=0.0) is False  # the gate still runs
    assert not worker.submit(lambda: seen.append("late"))
    gate.release.set()
    assert worker.close(timeout=10) is True
    assert seen == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_reset_after_fork_gives_the_child_an_empty_worker_of_its_own() -> None:
    worker = Worker("t-fork", max_jobs=4)
    gate = Gate()
    worker.submit(gate)
    assert gate.entered.wait(10)
    worker.submit(lambda: None)  # queued in the parent
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread is gone, its lock may be held
        worker.reset_after_fork()
        ok = worker.pending == 0 and worker.run(lambda: "child", timeout=10) == "child"
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.waitpid(pid, 0)
    gate.release.set()
    assert answer == b"1"
    assert worker.wait_idle(10)


@pytest.mark.skipif(not hasattr(__import__("signal"), "pthread_sigmask"), reason="no per-thread signal masks here")
def test_a_workers_thread_never_takes_a_signal_sent_to_the_process():
    """The kernel gives a process's SIGTERM to a thread that does not block it; on cw's, the main thread's
    wait (a forked worker in signal.pause()) would never end (tests/test_sigterm.py hung 1 run in ~30)."""
    import signal

    worker = Worker("test-mask", 4)
    mask = worker.run(lambda: signal.pthread_sigmask(signal.SIG_BLOCK, []), timeout=5)
    worker.close()
    assert mask is not None and {signal.SIGTERM, signal.SIGINT} <= set(mask)
    assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the caller's own mask is untouched


# ---------------------------------------------------------------- around a fork (issue 37)


def test_a_fork_waits_for_a_gated_job_and_no_gated_job_starts_until_it_is_done(monkeypatch):
    """A fork-gated worker's job may be inside LiteLLM or pydantic: the fork waits for it, bounded, and holds the next."""
    from cw_middleware._kernel import worker as _worker
    from cw_middleware._kernel.process import PROCESS

    gate = PROCESS.part(_worker.JobsAtFork)
    monkeypatch.setattr(_worker, "MAX_FORK_WAIT", 5.0)
    worker = Worker("test-gated", 4, fork_gated=True)
    inside, release, ran_second = threading.Event(), threading.Event(), threading.Event()
    worker.submit(lambda: (inside.set(), release.wait(5)))
    assert inside.wait(5)
    forked = threading.Event()

    def fork() -> None:
        gate.before_fork()  # what os.fork() runs first
        forked.set()

    forking = threading.Thread(target=fork)
    forking.start()
    assert not forked.wait(0.2)  # the job is still inside: the fork waits
    worker.submit(ran_second.set)
    release.set()
    assert forked.wait(5)  # the job ended: the fork goes on
    assert not ran_second.wait(0.2)  # and no job starts while it is under way
    gate.after_fork_in_parent()
    assert ran_second.wait(5)
    forking.join()
    worker.close()


def test_a_stuck_gated_job_holds_a_fork_only_so_long(monkeypatch):
    from cw_middleware._kernel import worker as _worker
    from cw_middleware._kernel.process import PROCESS

    gate = PROCESS.part(_worker.JobsAtFork)
    monkeypatch.setattr(_worker, "MAX_FORK_WAIT", 0.3)
    worker = Worker("test-gated-waits", 4, fork_gated=True)

    def forks() -> threading.Event:
        done = threading.Event()
        threading.Thread(target=lambda: (gate.before_fork(), done.set()), daemon=True).start()
        return done

    stuck, entered = threading.Event(), threading.Event()
    worker.submit(lambda: (entered.set(), stuck.wait(10)))
    assert entered.wait(5)
    assert forks().wait(5) and not stuck.is_set()  # a stuck job holds the fork no longer than MAX_FORK_WAIT
    gate.after_fork_in_parent()
    stuck.set()
    worker.close()
