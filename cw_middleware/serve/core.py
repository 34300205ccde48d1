"""What the HTTP core and the routes share: limits, the JSON error, a route, the exchange a route answers on."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from io import BufferedIOBase
from typing import TYPE_CHECKING, Any, Optional, Protocol
from urllib.parse import unquote

from ..errors import ConfigError

if TYPE_CHECKING:
    from email.message import Message

    from ..readback import Reader
    from .events import Watchers
    from .gate import QueryGate

API_PREFIX = "/api/v1"


@dataclass(frozen=True)
class Limits:
    """What one client, and all of them together, can hold of the server. README "Serve" lists them."""

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


class HttpError(Exception):
    """An answer other than 200, as our JSON error: ``{"error": {"code", "message"}}``."""

    def __init__(self, status: int, code: str, message: str, headers: Optional[dict[str, str]] = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}


@dataclass
class Context:
    """What every route may use: the reader, the limits, the query gate, the run watchers."""

    reader: Reader
    limits: Limits
    gate: QueryGate
    watchers: Watchers
    token: Optional[str] = None
    openapi: dict[str, Any] = field(default_factory=dict)


class Exchange(Protocol):
    """One request as a route sees it (the core's handler)."""

    command: str
    headers: Message
    wfile: BufferedIOBase

    @property
    def context(self) -> Context: ...

    def send_json(self, status: int, body: Any, headers: Optional[dict[str, str]] = None) -> None: ...

    def send_bytes(self, status: int, content_type: str, data: bytes, headers: Optional[dict[str, str]] = None) -> None: ...

    def start_stream(self, content_type: str, headers: Optional[dict[str, str]] = None) -> None: ...

    @property
    def closing(self) -> bool: ...

    def client_gone(self) -> bool: ...


RouteHandler = Callable[[Exchange, list[str]], None]


@dataclass(frozen=True)
class Route:
    """``pattern`` is a path with ``{name}`` segments (each matches one non-empty segment, percent-decoded)."""

    pattern: str
    handler: RouteHandler
    auth: bool = True  # needs the bearer token when one is set
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parts = ["([^/]+)" if seg.startswith("{") and seg.endswith("}") else re.escape(seg) for seg in self.pattern.split("/")]
        object.__setattr__(self, "_regex", re.compile("/".join(parts) + "/?"))

    def match(self, path: str) -> Optional[list[str]]:
        found = self._regex.fullmatch(path)
        return None if found is None else list(found.groups())


def segment(raw: str, name: str) -> str:
    """One path segment as an id; ConfigError (400) when it is not UTF-8 or empty."""
    try:
        value = unquote(raw, errors="strict")
    except UnicodeDecodeError:
        raise ConfigError(f"{name} is not valid UTF-8") from None
    if not value:
        raise ConfigError(f"{name} must not be empty")
    return value
