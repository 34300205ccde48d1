"""The cap on backend queries running at once, and the time box of each.

A query runs on a worker thread of its own pool; the request thread waits for it at
most ``query_timeout`` seconds (then 504), and what the query raised comes back as the
HTTP answer it means (`http_errors.as_http_error`). A query nobody waits for any more (past
its time box, or its client gone: the request thread looks every `GONE_POLL` seconds) is told
to stop (`_readback.stop`): it ends at its next line or chunk, what it finished kept (the
index's chunks, a summary's stage rows), and frees its slot. Until it ends it keeps the slot,
so runaway scans cannot pile up past ``max_queries``: a request that finds every slot taken
for ``query_wait`` seconds gets 503 ``busy`` with ``Retry-After``. The routes that need no backend (``/healthz``, the page, the
OpenAPI document) never pass through here, so they stay fast while heavy queries run.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Optional, TypeVar

from .._readback import stop
from .http_errors import HttpError, as_http_error

T = TypeVar("T")

GONE_POLL = 0.5  # seconds between looks at whether a waiting request's client has left


class QueryGate:
    """The query slots (``max_queries``) and the pool their queries run on."""

    def __init__(self, max_queries: int, query_wait: float, query_timeout: float) -> None:
        self._slots = threading.BoundedSemaphore(max_queries)
        self._pool = ThreadPoolExecutor(max_workers=max_queries, thread_name_prefix="cw-serve-query")
        self.query_wait, self.query_timeout = query_wait, query_timeout

    def run(self, query: Callable[[], T], wait: Optional[float] = None, gone: Optional[Callable[[], bool]] = None) -> T:
        """The query's result; HttpError for what it raised, 503 when no slot frees in time, 504 past the time box.

        ``gone`` says whether the request's client has left: then the query is stopped, as past its time box."""
        if not self._slots.acquire(timeout=self.query_wait if wait is None else wait):
            raise HttpError(503, "busy", "the server is answering other queries; retry shortly", {"Retry-After": "1"})
        halt = threading.Event()

        def stoppable_query() -> T:
            with stop.stoppable(halt):
                return query()

        try:
            future: Future[T] = self._pool.submit(stoppable_query)
        except RuntimeError:  # the pool was shut down: the server is closing
            self._slots.release()
            raise HttpError(503, "closing", "the server is shutting down") from None
        future.add_done_callback(lambda _: self._slots.release())
        deadline = time.monotonic() + self.query_timeout
        try:
            while True:
                try:
                    return future.result(timeout=max(0.0, min(GONE_POLL, deadline - time.monotonic())))
                except FutureTimeout:
                    if time.monotonic() >= deadline:
                        raise
                    if gone is not None and gone():
                        halt.set()
                        raise HttpError(503, "client_gone", "the client left before the answer") from None
        except FutureTimeout:
            halt.set()
            raise HttpError(
                504,
                "query_timeout",
                f"the backend query took longer than {self.query_timeout:g} s; it stopped, what it read is kept: retry",
                {"Retry-After": "5"},
            ) from None
        except HttpError:
            raise
        except Exception as exc:  # noqa: BLE001 - translated, never re-raised as is
            raise as_http_error(exc) from None

    @contextlib.contextmanager
    def slot(self, wait: float) -> Iterator[None]:
        """Hold one slot on the caller's own thread (the run watchers' polls); HttpError 503 when none frees in time."""
        if not self._slots.acquire(timeout=wait):
            raise HttpError(503, "busy", "the server is answering other queries; retry shortly", {"Retry-After": "1"})
        try:
            yield
        finally:
            self._slots.release()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
