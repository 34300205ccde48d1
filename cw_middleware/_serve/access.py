"""Who may ask the server: the bearer token when one is set, else only requests that name this server as their Host.

Without a token any local program can read the API, and so could any web page the
user visits, through DNS rebinding: a name the attacker controls, resolved to
127.0.0.1, makes the browser send the page's requests here with ``Host: rebind.example``.
So without a token the Host must be a loopback name or address (``localhost``,
``127.0.0.1``, ``[::1]``), or the address the server was bound to; bound to a wildcard
(``0.0.0.0``, ``::``) any IP address (a page cannot be served from a bare address it
rebinds); an ASGI mount also answers to the names its app gives (``allowed_hosts``).
Anything else is 403 ``host_not_allowed``. A request without a Host (HTTP/1.0) cannot
come from a browser and passes. With a token the token decides.

Another origin's page (the embeddable element, a typed client in a web app) may read the
answers only when the server was told that origin (``serve --allow-origin``,
``cw.asgi_app(allowed_origins=...)``; none by default): its requests get
``Access-Control-Allow-Origin`` naming it, and its preflights (``OPTIONS``, for the
``Authorization`` and ``Last-Event-ID`` headers) a 204. The token and Host rules are the same.

The token is text; on the wire it is matched as UTF-8 (curl, most clients) and, when
it fits ISO-8859-1, as ISO-8859-1 bytes too (what browsers and Python's http.client send
for such text): both are accepted, compared in constant time. Two ``Authorization`` (or
``Host``) headers are a 400: no guessing which one counts.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable
from typing import TYPE_CHECKING, Optional

from .http_errors import HttpError

if TYPE_CHECKING:
    from email.message import Message

CORS_REQUEST_HEADERS = "Authorization, Accept, Last-Event-ID, Cache-Control"
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
WILDCARDS = frozenset({"", "0.0.0.0", "::"})


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, no port) is this machine's loopback."""
    name = host.strip("[]").rstrip(".").lower()
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def token_matches(given: str, token: str) -> bool:
    """``given`` is a header value as http.client decoded it (ISO-8859-1); see the module docstring."""
    try:
        raw = given.encode("latin-1")
    except UnicodeEncodeError:
        return False
    candidates = [token.encode("utf-8", "surrogateescape")]
    try:
        candidates.append(token.encode("latin-1"))
    except UnicodeEncodeError:
        pass
    matched = False
    for candidate in candidates:  # every candidate is compared: the time taken does not say which one matched
        matched |= hmac.compare_digest(raw, candidate)
    return matched


def origin(value: str) -> str:
    """An origin as browsers send it (``scheme://host[:port]``, lowercase); ValueError for anything else."""
    text = value.strip().lower().rstrip("/")
    scheme, sep, rest = text.partition("://")
    if scheme not in ("http", "https") or not sep or not rest or any(c in rest for c in "/?#@ ") or rest.startswith(":"):
        raise ValueError(f"not an origin (scheme://host[:port], nothing after it): {value!r}")
    return text


def _host_name(header: str) -> str:
    """The name or address of a Host header, without its port, lowercase."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    name, colon, port = value.rpartition(":")
    return name.rstrip(".") if colon and port.isdigit() and ":" not in name else value.rstrip(".")


class Access:
    """The server's access rule (module docstring): its token, or the Host names it answers to."""

    def __init__(
        self, token: Optional[str], bound_host: str, allowed_hosts: Iterable[str] = (), allowed_origins: Iterable[str] = ()
    ) -> None:
        self.token = token or None
        self.bound = _host_name(bound_host)
        self.allowed = frozenset(_host_name(h) for h in allowed_hosts)  # names a mounting app answers to (asgi.py)
        self.origins = frozenset(origin(o) for o in allowed_origins)

    def cors(self, headers: Message) -> dict[str, str]:
        """The headers that let an allowed origin's page read this answer (none for any other origin)."""
        given = headers.get("Origin")
        if not self.origins:
            return {}
        if given is None or given.strip().lower() not in self.origins:
            return {"Vary": "Origin"}
        return {"Access-Control-Allow-Origin": given.strip(), "Vary": "Origin"}

    def preflight(self, headers: Message) -> Optional[dict[str, str]]:
        """An allowed origin's preflight (``OPTIONS``): the headers of its 204; None for anyone else's."""
        allowed = self.cors(headers)
        if "Access-Control-Allow-Origin" not in allowed:
            return None
        return {
            **allowed,
            "Access-Control-Allow-Methods": "GET, HEAD",
            "Access-Control-Allow-Headers": CORS_REQUEST_HEADERS,
            "Access-Control-Max-Age": "600",
        }

    def host_allowed(self, header: str) -> bool:
        name = _host_name(header)
        if is_loopback(name) or name == self.bound or name in self.allowed:
            return True
        if self.bound.strip("[]") in WILDCARDS:
            try:
                ipaddress.ip_address(name)
                return True
            except ValueError:
                return False
        return False

    def check(self, headers: Message, needs_token: bool) -> None:
        """HttpError 400 for a doubled header, 403 for a foreign Host without a token, 401 for a missing or wrong token."""
        for name in ("Authorization", "Host"):
            if len(headers.get_all(name) or []) > 1:
                raise HttpError(400, "bad_request", f"more than one {name} header")
        if self.token is None:
            host = headers.get("Host")
            if host is not None and not self.host_allowed(host):
                raise HttpError(
                    403, "host_not_allowed", "this server answers to its own address or a loopback name only (no token is set)"
                )
            return
        if needs_token:
            scheme, _, value = (headers.get("Authorization") or "").partition(" ")
            if not (scheme.lower() == "bearer" and token_matches(value.strip(), self.token)):
                raise HttpError(401, "unauthorized", "a valid bearer token is required", {"WWW-Authenticate": "Bearer"})
