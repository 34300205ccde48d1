"""One bounded background worker: the machine every background job of the package runs on.

A job is a plain callable. `Worker.submit` queues it and never blocks: a full or closed
queue refuses it (False), and the caller decides what a refusal means (a warning, a
dropped count). One daemon thread, started on the first job, runs the jobs in order and
ends once it has had nothing to do for ``idle_exit`` seconds; the next job starts a fresh
one. A job is dropped as soon as it has run: what it holds (a call, its ended span, the
request's value copies) does not outlive it while the thread waits for the next one.
`run` submits a job and waits for its answer at most a timeout, for flushes and shutdowns
that must never hold the application (a job still running when its caller gave up keeps
the thread; the next job waits behind it rather than start a second thread beside a stuck
one). A job that raises is logged by its exception's type, never into the caller.

After ``os.fork()`` the owner calls `reset_after_fork` in the child: a fresh condition and
an empty queue, no thread (the parent's thread, and the jobs it had queued, stay the
parent's). Modelled on the OpenTelemetry SDK's generic ``BatchProcessor``, which spans and
logs share, so that a fix to it fixes every job.

A worker made ``fork_gated`` runs the libraries cw calls off the caller's thread (LiteLLM and
pydantic reading a response, its usage and cost; tiktoken; httpx): forked while one of its jobs held
one of their locks, the child would inherit the lock held by a thread it does not have, and its first
LLM call would wait forever (issue 37: 21 of 60 children; the same program without cw: none). So a
fork waits for such jobs to end (`JobsAtFork`, a fork gate of the process state, at most
`MAX_FORK_WAIT`), and none starts until the fork is done; a job that waits on something of cw's
own (a call's send) steps out of the gate while it waits (`JobsAtFork.outside`).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, Optional, TypeVar

from .process import PROCESS

logger = logging.getLogger("cw_middleware")

T = TypeVar("T")

DEFAULT_IDLE_EXIT = 30.0  # seconds a worker thread waits for its next job before it ends
MAX_FORK_WAIT = 1.0  # seconds a fork waits for running jobs: a stuck job cannot stall the application's fork longer


class JobsAtFork:
    """The jobs running on cw's workers, held back around a fork (a `ForkGate` part of the process state)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running = 0
        self._forking = False

    def enter(self) -> None:
        """A job is about to run: wait while a fork is under way."""
        with self._cond:
            self._cond.wait_for(lambda: not self._forking, timeout=MAX_FORK_WAIT)
            self._running += 1

    def leave(self) -> None:
        with self._cond:
            self._running -= 1
            self._cond.notify_all()

    def before_fork(self) -> None:
        with self._cond:
            self._forking = True
            self._cond.wait_for(lambda: self._running == 0, timeout=MAX_FORK_WAIT)

    def after_fork_in_parent(self) -> None:
        with self._cond:
            self._forking = False
            self._cond.notify_all()

    def after_fork_in_child(self) -> None:
        self._cond = threading.Condition()  # the parent's jobs are not the child's: none runs here
        self._running = 0
        self._forking = False


class Worker:
    """A bounded queue of jobs, run in order on one lazily started daemon thread."""

    def __init__(self, name: str, max_jobs: int, idle_exit: float = DEFAULT_IDLE_EXIT, fork_gated: bool = False) -> None:
        if max_jobs < 1:
            raise ValueError("max_jobs must be at least 1")
        self.name = name
        self._max_jobs = max_jobs
        self._idle_exit = idle_exit
        self._cond = threading.Condition()
        self._jobs: deque[Callable[[], object]] = deque()
        self._busy = False
        self._closed = False
        self._thread: Optional[threading.Thread] = None
        self._gate = PROCESS.part(JobsAtFork) if fork_gated else None

    @property
    def pending(self) -> int:
        """Jobs queued and not yet started."""
        return len(self._jobs)

    @property
    def idle(self) -> bool:
        """No job queued, none running."""
        return not self._jobs and not self._busy

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def thread_ident(self) -> Optional[int]:
        """The running thread's identifier (None with no thread): for reading its CPU clock, as benchmarks do."""
        thread = self._thread
        return thread.ident if thread is not None else None

    def submit(self, job: Callable[[], object]) -> bool:
        """Queue a job; False (nothing queued) when the queue is full or the worker closed. Never blocks."""
        with self._cond:
            if self._closed or len(self._jobs) >= self._max_jobs:
                return False
            self._jobs.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return True

    def run(self, job: Callable[[], T], timeout: float) -> Optional[T]:
        """The job's answer, run on the worker; None when it did not finish within ``timeout`` (or was refused)."""
        outcome: _Outcome[T] = _Outcome()
        if self.on_worker():
            outcome.deliver(job)  # a job waiting for a job behind it would wait for itself
            return outcome.value
        if not self.submit(lambda: outcome.deliver(job)):
            return None
        outcome.done.wait(max(timeout, 0.0))
        return outcome.value

    def wait_idle(self, timeout: float) -> bool:
        """True once every queued job has run, within ``timeout`` seconds (flush waits here)."""
        if self.on_worker():
            return not self._jobs  # a job waiting for the jobs would wait for itself
        with self._cond:
            return self._cond.wait_for(lambda: not self._jobs and not self._busy, timeout=max(timeout, 0.0))

    def on_worker(self) -> bool:
        """True on this worker's own thread."""
        return self._thread is not None and threading.current_thread() is self._thread

    def close(self, timeout: float = 0.5) -> bool:
        """Refuse new jobs, abandon the queued ones, and wait at most ``timeout`` for the running one.

        True when the thread has ended (or never ran).
        """
        with self._cond:
            self._closed = True
            self._jobs.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is None or thread is threading.current_thread():
            return thread is None
        thread.join(max(timeout, 0.0))
        return not thread.is_alive()

    def reset_after_fork(self) -> None:
        """In a forked child: a fresh lock and an empty queue, no thread (the parent's stays the parent's)."""
        self._cond = threading.Condition()
        self._jobs = deque()
        self._busy = False
        self._thread = None

    def _work(self) -> None:
        _block_process_signals()
        me = threading.current_thread()
        while True:
            with self._cond:
                self._busy = False
                self._cond.notify_all()
                if not self._cond.wait_for(lambda: self._jobs or self._closed, timeout=self._idle_exit) or self._closed:
                    if self._thread is me:
                        self._thread = None  # idle or closed: the next submit starts a fresh thread
                    self._cond.notify_all()
                    return
                job = self._jobs.popleft()
                self._busy = True
            gate = self._gate
            if gate is not None:
                gate.enter()
            try:
                job()
            except Exception as exc:  # noqa: BLE001 - a job's failure is the middleware's, never the caller's
                logger.warning("cw_middleware: a background job of %s failed (%s)", self.name, type(exc).__name__)
            finally:
                if gate is not None:
                    gate.leave()
            # Not kept while waiting for the next job (up to idle_exit): it may hold a call and its span.
            del job


def _block_process_signals() -> None:
    """This thread (cw's own) never takes a signal sent to the process: the kernel gives it to another thread.

    Python runs signal handlers on the main thread only, and a signal the kernel delivers to another
    thread does not interrupt the main thread's wait: a forked worker idle in ``signal.pause()`` or
    a pipe read would not see its SIGTERM (sigterm.py) until that wait ended.
    """
    if hasattr(signal, "pthread_sigmask"):
        signals = {getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT") if hasattr(signal, name)}
        signal.pthread_sigmask(signal.SIG_BLOCK, signals)


class _Outcome(Generic[T]):
    """The answer of one job handed to `Worker.run`, and the event its caller waits on."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Optional[T] = None

    def deliver(self, job: Callable[[], T]) -> None:
        try:
            self.value = job()
        finally:
            self.done.set()
