"""A forked child's SIGTERM: its telemetry is exported first, where nothing else handles the signal.

``multiprocessing.Pool.terminate()`` -- what leaving ``with Pool() as pool:`` calls -- ends
its workers with SIGTERM, whose default action kills a process without running its exit
hooks or multiprocessing's finalizers: the spans a worker had queued for its next batch were
lost. So in a forked child, and only where SIGTERM's handler is still the default
(``SIG_DFL``) when the process forks, cw installs a `Handler`. That is the one change cw
makes to the host's signal handlers (README, Reliability):

* the handler exports what is left (``close``, bounded by ``CW_EXIT_TIMEOUT``) on a thread of
  its own, which it waits for a moment longer than that at most: the thread it interrupted
  may hold a lock the export needs. When it interrupts cw's exit hook itself (a Pool worker
  given its end-of-work sentinel is exporting when ``terminate()`` comes), it lets that
  export finish instead (`Handler.exiting`);
* then it puts the default back and sends the process SIGTERM again, so the process ends as it
  would have: killed by SIGTERM, with the same status. A second SIGTERM during the export
  ends it at once;
* a handler the parent had (the child inherits it) or one the application installs in the child
  (gunicorn's and Celery's workers do) is never replaced: it wins. The parent's handlers are
  never changed, nor any other signal's.

The handler is the process's: runtime.py's process part keeps it (`install_in_child` returns it).
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from typing import Any, Optional

_GRACE = 0.5  # seconds waited beyond the export's own bound


class Handler:
    """The child's SIGTERM handler: export (bounded), then end as SIGTERM's default would."""

    def __init__(self, close: Callable[[], object], budget: Callable[[], float]) -> None:
        self.renew(close, budget)

    def renew(self, close: Callable[[], object], budget: Callable[[], float]) -> None:
        """As made anew (in a child of the process that installed it, which inherits it)."""
        self._close = close
        self._budget = budget
        self._ending = False
        self._exiting = False  # cw's exit hook is exporting, on the thread a signal would interrupt
        self._deferred = False  # a SIGTERM came meanwhile: the exit hook ends the process once it is done

    def __call__(self, signum: int, frame: Any) -> None:
        if self._exiting and not self._ending:
            self._ending = self._deferred = True  # returning lets the interrupted export finish
            return
        try:
            if not self._ending:
                self._ending = True  # a second SIGTERM while exporting ends the process at once
                # The low-level thread API: threading.Thread.start() takes threading's own lock, which the
                # interrupted code may hold (a thread starting), and waits for the thread with no bound.
                done = _thread.allocate_lock()
                done.acquire()
                _thread.start_new_thread(self._export, (done,))
                done.acquire(timeout=self._budget() + _GRACE)
        finally:
            _end()

    @contextlib.contextmanager
    def exiting(self) -> Iterator[None]:
        """Around cw's exit hook: a SIGTERM meanwhile waits for it, then ends the process."""
        self._exiting = True
        try:
            yield
        finally:
            self._exiting = False
            if self._deferred:
                _end()

    def _export(self, done: _thread.LockType) -> None:
        try:
            self._close()
        except Exception:  # noqa: BLE001 - the process ends either way
            pass
        finally:
            done.release()


def _end() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def install_in_child(close: Callable[[], object], budget: Callable[[], float]) -> Optional[Handler]:
    """Inside ``os.fork()``, in the child: a `Handler` for SIGTERM where its handler is still the default.

    ``close`` exports what is left within ``budget()`` seconds (read when the signal comes).
    None when SIGTERM is left as it was (another handler, not the main thread, no SIGTERM).
    """
    if not hasattr(signal, "SIGTERM"):
        return None
    try:
        current = signal.getsignal(signal.SIGTERM)
        if isinstance(current, Handler):  # cw's, in the parent that forked this child: this process's now
            current.renew(close, budget)
            return current
        if current != signal.SIG_DFL:
            return None  # the parent's or the application's handler: theirs
        handler = Handler(close, budget)
        signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError):  # not the main thread of the main interpreter: left as it is
        return None
    return handler
