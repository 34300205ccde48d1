"""cw's call-end worker, for benchmarks that time calls: wait until it is idle, and read its CPU time.

Where cw owns the telemetry pipeline a call's end is recorded on that worker, after the call has
returned (cw_middleware/_capture/runtime.py). A benchmark that times calls back to back settles it between
calls, untimed, as a caller waiting for its next response would: left running, its work lands in
whichever call is timed next, bare LiteLLM's too. What it did for a call is read as that thread's
CPU time, so that the work is reported where it went, not dropped.
"""

from __future__ import annotations

import time
from typing import Optional

from cw_middleware._capture.runtime import Runtime


def settle(runtime: Optional[Runtime]) -> None:
    """Until ``runtime``'s call-end worker has recorded every call that returned (at most 5 s)."""
    ends = runtime.call_ends if runtime is not None else None
    if ends is not None:
        ends.wait_idle(5.0)


def worker_cpu(runtime: Optional[Runtime]) -> tuple[Optional[int], float]:
    """The call-end worker's thread and its CPU time so far, in seconds ((None, 0.0) with no thread)."""
    ends = runtime.call_ends if runtime is not None else None
    ident = ends.thread_ident if ends is not None else None
    if ident is None:
        return None, 0.0
    try:
        return ident, time.clock_gettime(time.pthread_getcpuclockid(ident))
    except (OSError, ProcessLookupError):  # the thread ended meanwhile
        return None, 0.0


def cpu_since(runtime: Optional[Runtime], before: tuple[Optional[int], float]) -> float:
    """CPU seconds the call-end worker spent since ``before`` (`worker_cpu`), once it is idle."""
    settle(runtime)
    ident, now = worker_cpu(runtime)
    return now - (before[1] if before[0] == ident else 0.0)
