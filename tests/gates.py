"""Event-gated checks of "never blocks": the caller returns while what it could wait for is still held.

A stub (a count endpoint, an exporter, a collector, a pipe nobody reads) blocks until the test
releases it. `returns_while_held` runs the caller on a thread and asserts that it returned while
the stub was still held: a caller that waited for the stub could not return before the release,
however fast or loaded the machine. Its ``hang_guard`` only ends a test whose caller waits (it
then fails instead of hanging); it is not a time bound on the caller.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

HANG_GUARD = 60.0  # seconds: far beyond any caller that does not wait, on any machine


def returns_while_held(call: Callable[[], T], held: Callable[[], bool], hang_guard: float = HANG_GUARD) -> T:
    """``call()``'s result, asserting it returned while ``held()`` was still true.

    ``call`` runs on a thread in a copy of the caller's context (its stage, its runtime), so a
    caller that waits leaves the test able to release the stub and fail.
    """
    outcome: dict[str, object] = {}
    done = threading.Event()
    context = contextvars.copy_context()

    def run() -> None:
        try:
            outcome["value"] = context.run(call)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the test's thread
            outcome["error"] = exc
        finally:
            done.set()

    thread = threading.Thread(target=run, name="gated-caller", daemon=True)
    thread.start()
    returned = done.wait(hang_guard)
    still_held = held()
    assert returned, "the caller did not return while the stub was held: it waits for it"
    assert still_held, "the stub was released before the caller returned: the check proves nothing"
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]


def eventually(predicate: Callable[[], bool], timeout: float = HANG_GUARD, interval: float = 0.01) -> bool:
    """Wait until ``predicate()`` holds (True), or give up after ``timeout`` (False): for things that do happen, later."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True
