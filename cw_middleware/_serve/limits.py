"""What one client, and all of them together, can hold of the server (docs/reliability.md lists them)."""

from __future__ import annotations

from dataclasses import dataclass

from .._kernel.errors import ConfigError


@dataclass(frozen=True)
class Limits:
    """What one client, and all of them together, can hold of the server. docs/reliability.md lists them."""

    idle_timeout: float = 10.0  # seconds a connection may sit without sending (also each write's time box)
    head_timeout: float = 10.0  # seconds to send a whole request line and headers (slow clients)
    max_connections: int = 128  # connection threads at once; past it, a 503 answered by the accept loop
    backlog: int = 128  # the listen queue (the stdlib's 5 made ~1% of requests wait a second under load)
    max_queries: int = 4  # backend queries running at once (file scans are CPU-bound: 2 cores here)
    query_wait: float = 2.0  # seconds a request waits for a free query slot before 503 busy
    query_timeout: float = 30.0  # seconds a request waits for its query before 504
    max_streams: int = 64  # open event streams at once (each holds a connection thread)
    heartbeat: float = 15.0  # seconds between comment lines on a quiet stream
    poll_interval: float = 0.5  # seconds between polls of a watched run
    full_poll_every: float = 10.0  # a file whose size and mtime did not change is still re-read this often
    linger: float = 60.0  # seconds a watcher keeps polling (and its history) after its last stream closed
    history: int = 1024  # events a watcher keeps for Last-Event-ID resumption

    def __post_init__(self) -> None:
        for name in ("max_connections", "backlog", "max_queries", "max_streams", "history"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1")
        for name in ("idle_timeout", "head_timeout", "query_wait", "query_timeout", "heartbeat", "poll_interval"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")
