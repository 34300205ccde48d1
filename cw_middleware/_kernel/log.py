"""The middleware's own log: each kind of failure once per interval, never content.

A dead collector or provider endpoint fails on every call; logging each failure
would flood the application's log. Messages name exception types and settings,
never prompt text or a provider's error body.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref

from .process import PROCESS

logger = logging.getLogger("cw_middleware")


class RateLimitedLog:
    """``warning(key, message)`` logs at most once per ``interval`` seconds for each key."""

    def __init__(self, interval: float = 60.0) -> None:
        self._last: dict[str, float] = {}
        self._interval = interval
        self._lock = threading.Lock()
        PROCESS.part(_EveryLog).logs.add(self)

    def warning(self, key: str, message: str) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(key, -self._interval) < self._interval:
                return
            self._last[key] = now
        logger.warning(message)


class _EveryLog:
    """Every live `RateLimitedLog` (a part of the process state): a fork copies a lock another thread held."""

    def __init__(self) -> None:
        self.logs: weakref.WeakSet[RateLimitedLog] = weakref.WeakSet()

    def after_fork_in_child(self) -> None:
        for log in list(self.logs):
            log._lock = threading.Lock()
