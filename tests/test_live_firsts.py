"""A call's first snapshot waits for its end; the live-firsts thread sends out a slow call's at its deadline only.

A quick call's first snapshot goes out with its end (`forget`), never from this thread; a slow call's goes out
once its deadline passes, while it still runs; a flush sends every waiting one at once; the thread is told of a
new call only when it sleeps past that call's deadline, and it ends after a while with nothing to wait for.
"""

from __future__ import annotations

import threading
import time

from gates import HANG_GUARD

from cw_middleware._capture import live_firsts
from cw_middleware._capture.live_firsts import LiveFirsts


class _Call:
    def __init__(self) -> None:
        self.released = threading.Event()
        self.times = 0

    def release_first(self) -> None:
        self.times += 1
        self.released.set()


def test_a_quick_calls_first_snapshot_is_never_released_by_the_thread():
    watch = LiveFirsts()
    quick = _Call()
    watch.watch(quick, 0.2)
    watch.forget(quick)  # its end came first: its first snapshot went out with it
    time.sleep(0.5)
    assert quick.times == 0
    watch.close()


def test_a_slow_calls_first_snapshot_is_released_at_its_deadline_once():
    watch = LiveFirsts()
    slow, later = _Call(), _Call()
    started = time.monotonic()
    watch.watch(slow, 0.2)
    watch.watch(later, 60.0)
    assert slow.released.wait(HANG_GUARD)
    assert time.monotonic() - started >= 0.2
    time.sleep(0.3)
    assert (slow.times, later.times) == (1, 0)  # the other call's deadline is far off
    watch.release_all()  # a flush: every waiting first snapshot at once
    assert (slow.times, later.times) == (1, 1)
    watch.close()


def test_an_earlier_deadline_wakes_a_thread_asleep_past_it():
    watch = LiveFirsts()
    far, near = _Call(), _Call()
    watch.watch(far, 60.0)  # the thread now sleeps for a minute
    time.sleep(0.1)
    watch.watch(near, 0.1)
    assert near.released.wait(HANG_GUARD)
    assert far.times == 0
    watch.close()


def test_the_thread_ends_after_a_while_with_nothing_to_wait_for(monkeypatch):
    monkeypatch.setattr(live_firsts, "IDLE_EXIT", 0.3)
    watch = LiveFirsts()
    call = _Call()
    watch.watch(call, 0.05)
    assert call.released.wait(HANG_GUARD)
    deadline = time.monotonic() + HANG_GUARD
    while watch._thread is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert watch._thread is None
    again = _Call()
    watch.watch(again, 0.05)  # the next call starts a fresh thread
    assert again.released.wait(HANG_GUARD)
    watch.close()
