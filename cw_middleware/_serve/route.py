"""What a route is and what it may use: the `Route`, the `Exchange` it answers on, the shared `Context`.

`cw_middleware._serve.server` is the HTTP core that matches a request to a route and runs it;
a route module imports this module (and those below it), never the server nor another route.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from .gate import QueryGate
from .http_errors import HttpError
from .limits import Limits
from .watch import Watchers

if TYPE_CHECKING:
    from email.message import Message

    from .._readback import Reader

API_PREFIX = "/api/v1"


@dataclass
class Context:
    """What every route may use: the reader, the limits, the query gate, the run watchers."""

    reader: Reader
    limits: Limits
    gate: QueryGate
    watchers: Watchers
    openapi: dict[str, Any] = field(default_factory=dict)


class Body(Protocol):
    """Where a stream's bytes go: serve's socket file, or the ASGI app's body messages."""

    def write(self, data: bytes, /) -> int: ...

    def flush(self) -> None: ...


class Exchange(Protocol):
    """One request as a route sees it (the core's handler)."""

    command: str
    path: str  # the request target below the root path, query string included
    root_path: str  # where the routes are mounted ("" for serve; "/cw" for an app mounting cw.asgi_app() there)
    headers: Message
    started: bool  # an answer (or a stream) has begun: an error can no longer be sent
    response_headers: dict[str, str]  # sent with whatever this request's answer is (CORS, access.py)

    @property
    def wfile(self) -> Body: ...

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


def path_id(raw: str, name: str) -> str:
    """One path segment as an id; HttpError 400 ``invalid_id`` when it is not UTF-8 or empty."""
    try:
        value = unquote(raw, errors="strict")
    except UnicodeDecodeError:
        raise HttpError(400, "invalid_id", f"{name} is not valid UTF-8") from None
    if not value:
        raise HttpError(400, "invalid_id", f"{name} must not be empty")
    return value


def query_int(ex: Exchange, name: str, default: int, maximum: int) -> int:
    """A whole-number query parameter (``?limit=50``) from 1 to ``maximum``; HttpError 400 ``invalid_parameter`` otherwise."""
    values = parse_qs(urlsplit(ex.path).query).get(name)
    if not values:
        return default
    raw = values[-1]
    if not raw.isascii() or not raw.isdigit() or not 0 < int(raw) <= maximum:
        raise HttpError(400, "invalid_parameter", f"{name} must be a whole number from 1 to {maximum}")
    return int(raw)
