"""Calls whose first snapshot waits for their end, and the one thread that sends it out first if the call is slow.

With a call-end worker (cw's own telemetry pipeline), a call's first snapshot (its local estimate) is
recorded with the call's end, in one job on that worker: the worker wakes once a call, after the
caller's send and its reading of the response, instead of at the call's start and again at its send,
each time taking GIL turns from a caller still busy with the call (issue 38: ~0.6-1.3 ms of CPU a call
at 13k-98k tokens). A call still running `LIVE_AFTER` seconds (call.py) after its estimate is slow: its
first snapshot goes out then, so that a live page, or a process killed mid-call, shows it (issue 36).

This thread waits for the nearest deadline. It is told of a new call only when it is asleep for
longer than that call's deadline (a quick call is gone before it looks): in a loop of quick calls it
wakes a few times a second, not once a call. After `IDLE_EXIT` seconds with no call it ends, and the
next call starts a fresh one. `release_all` (flush, ``cw.snapshots()``) sends every waiting first
snapshot out at once. After ``os.fork()`` the owner (the Runtime) makes a fresh one: the parent's calls
are the parent's.
"""

from __future__ import annotations

import threading
import time
from typing import Optional, Protocol

IDLE_EXIT = 30.0  # seconds without a waiting call after which the thread ends


class _Held(Protocol):
    def release_first(self) -> None:
        """Send the call's first snapshot (and what waits behind it) to the call-end worker now."""


class LiveFirsts:
    """The calls whose first snapshot waits, oldest first, and the thread that releases the slow ones."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._waiting: dict[int, tuple[float, _Held]] = {}  # id(call) -> (deadline, call), in the order they came
        self._thread: Optional[threading.Thread] = None
        self._wakes_at: Optional[float] = None  # when the sleeping thread looks again; None: it sleeps until told
        self._closed = False

    def watch(self, call: _Held, after: float) -> None:
        """``call``'s first snapshot waits; released ``after`` seconds from now unless `forget` comes first."""
        deadline = time.monotonic() + after
        with self._cond:
            if self._closed:
                return
            self._waiting[id(call)] = (deadline, call)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="cw-live-firsts", daemon=True)
                self._thread.start()
            elif self._wakes_at is None or deadline < self._wakes_at:
                self._cond.notify()

    def forget(self, call: _Held) -> None:
        """The call's first snapshot went out with its end: nothing to release."""
        with self._cond:
            self._waiting.pop(id(call), None)

    def release_all(self) -> None:
        """Every waiting first snapshot, out now (a flush: what the process holds goes to the backend)."""
        with self._cond:
            calls = [call for _, call in self._waiting.values()]
            self._waiting.clear()
        for call in calls:
            call.release_first()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._waiting.clear()
            self._cond.notify()

    def _run(self) -> None:
        idle_since = time.monotonic()
        while True:
            with self._cond:
                now = time.monotonic()
                due = [key for key, (deadline, _) in self._waiting.items() if deadline <= now]
                due_calls = [self._waiting.pop(key)[1] for key in due]
                if self._closed or (not self._waiting and not due_calls and now - idle_since >= IDLE_EXIT):
                    self._thread = None
                    return
                if not due_calls:
                    if self._waiting:
                        idle_since = now
                        self._wakes_at = min(deadline for deadline, _ in self._waiting.values())
                    else:  # nothing waits: look again now and then (a new call need not wake this thread)
                        self._wakes_at = now + min(IDLE_EXIT, 0.25)
                    self._cond.wait(max(0.0, self._wakes_at - now))
                    self._wakes_at = None
                    continue
            for call in due_calls:
                call.release_first()
            del due_calls, call  # not kept while this thread waits: a call holds its span and its request's copies
