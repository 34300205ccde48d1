"""A read stopped from outside: the HTTP server's request for it went (its client left, or its time box ran out).

The server runs each backend query under `stoppable(event)` on its query thread and sets the event when
nobody waits for the answer any more; the file reader's long loops (the index build, a chunk at a time;
a run's or a stage's lines, a line at a time) call `check()`, which raises `QueryStopped` once it is set.
So an abandoned query frees its slot within a line or a chunk, while what it finished stays: the index's
chunks and a summary's stage rows are committed as they are made, and the next query goes on from there.
Outside a `stoppable` section (the library, the CLI) `check()` costs a thread-local lookup and never raises.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Optional

_local = threading.local()


class QueryStopped(Exception):
    """The query's request went: nobody waits for its answer."""


@contextmanager
def stoppable(event: threading.Event) -> Iterator[None]:
    """Reads on this thread stop (`QueryStopped`) at their next `check()` once ``event`` is set."""
    previous: Optional[threading.Event] = getattr(_local, "event", None)
    _local.event = event
    try:
        yield
    finally:
        _local.event = previous


def check() -> None:
    event: Optional[threading.Event] = getattr(_local, "event", None)
    if event is not None and event.is_set():
        raise QueryStopped
