"""One request, whichever core received it (serve's threads, or an ASGI server): match, check access, run, answer.

`server.py` (``cw-middleware serve``) and `asgi.py` (``cw.asgi_app()``) each turn a request into
an `Exchange` and call `answer`: one list of routes, one access rule, one mapping of what a
route raised to the JSON error the client gets, so the two cores answer alike (the HTTP contract
suite runs against both).
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

from . import api, events, page
from .access import Access
from .http_errors import HttpError
from .route import Exchange, Route

logger = logging.getLogger("cw_middleware")

ROUTES: list[Route] = [*api.ROUTES, *events.ROUTES, *page.ROUTES]
ALLOW = "GET, HEAD"
MAX_MESSAGE = 200  # characters of an error's message sent to the client


def error_body(error: HttpError) -> dict[str, Any]:
    """Our JSON error: ``{"error": {"code", "message"}}``, the message cut to `MAX_MESSAGE`."""
    return {"error": {"code": error.code, "message": error.message[:MAX_MESSAGE]}}


def not_allowed() -> HttpError:
    return HttpError(405, "method_not_allowed", f"only {ALLOW} are supported", {"Allow": ALLOW})


def answer(ex: Exchange, access: Access) -> None:
    """Answer one request: its route's answer, or our JSON error (never a stack trace)."""
    try:
        ex.response_headers = access.cors(ex.headers)  # on every answer, errors included (a page reads their JSON too)
        if ex.command == "OPTIONS":
            preflight = access.preflight(ex.headers)
            if preflight is None:
                raise not_allowed()
            ex.send_bytes(204, "text/plain", b"", preflight)
            return
        if ex.command not in ("GET", "HEAD"):
            raise not_allowed()
        _dispatch(ex, access)
    except HttpError as exc:
        _answer_error(ex, exc)
    except (BrokenPipeError, ConnectionResetError, TimeoutError):
        pass  # the client went away, or stopped reading
    except Exception as exc:  # noqa: BLE001 - never a stack trace to the client
        logger.warning("cw_middleware serve: internal error (%s)", type(exc).__name__)
        _answer_error(ex, HttpError(500, "internal_error", "internal error; see the server log"))


def _answer_error(ex: Exchange, error: HttpError) -> None:
    if ex.started:
        return  # a stream already under way: closing it is the only answer left
    try:
        ex.send_json(error.status, error_body(error), error.headers)
    except (OSError, TimeoutError):
        pass


def _dispatch(ex: Exchange, access: Access) -> None:
    target = ex.path
    path = urlsplit(target).path if target.startswith(("http://", "https://")) else target.split("?", 1)[0].split("#", 1)[0]
    for route in ROUTES:
        params = route.match(path)
        if params is not None:
            break
    else:
        route, params = None, None
    access.check(ex.headers, needs_token=route is None or route.auth)
    if route is None or params is None:
        raise HttpError(404, "no_route", f"no such endpoint: {path[:100]}")
    route.handler(ex, params)
