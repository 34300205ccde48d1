"""The live page and the element: ``GET /`` (the runs), ``GET /runs/{run_id}`` (one run), ``GET /static/{name}``,
``GET /favicon.ico``; ``GET /embed.js`` and ``GET /embed``.

Plain HTML, CSS and JavaScript shipped in the package (``static/``, package data), no
build step and nothing fetched from elsewhere: the Content-Security-Policy allows
only this origin. The page holds no data of its own, so it is served without the
token; its script asks for the token when the API answers 401, keeps it in the tab
(memory and sessionStorage, never a URL) and sends it as ``Authorization: Bearer``,
also on the event stream, which it reads with fetch streaming (EventSource cannot
send headers). Without streaming it polls the JSON API instead.
"""

from __future__ import annotations

import html
from importlib import resources
from urllib.parse import parse_qs, urlsplit

from .http_errors import HttpError
from .route import Exchange, Route

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
}


def _load() -> dict[str, bytes]:
    """Every shipped static file by name, read once (a few kilobytes)."""
    folder = resources.files(__package__) / "static"
    return {f.name: f.read_bytes() for f in folder.iterdir() if f.is_file() and _suffix(f.name) in _TYPES}


def _suffix(name: str) -> str:
    return "." + name.rsplit(".", 1)[-1] if "." in name else ""


FILES = _load()


def _send(ex: Exchange, name: str) -> None:
    data = FILES.get(name)
    if data is None:
        raise HttpError(404, "no_route", "no such file")
    ex.send_bytes(200, _TYPES[_suffix(name)], data, HEADERS)


def _index(ex: Exchange, _: list[str]) -> None:
    if not ex.root_path:
        return _send(ex, "index.html")
    # Mounted under a path (an ASGI app's root_path): the page's own links and its API calls carry it.
    root = html.escape(ex.root_path.rstrip("/"), quote=True).encode()
    page = FILES["index.html"].replace(b'data-root=""', b'data-root="' + root + b'"')
    page = page.replace(b'="/static/', b'="' + root + b"/static/").replace(b'href="/"', b'href="' + root + b'/"')
    ex.send_bytes(200, _TYPES[".html"], page, HEADERS)


def _static(ex: Exchange, params: list[str]) -> None:
    _send(ex, params[0])


def _favicon(ex: Exchange, _: list[str]) -> None:
    """The icon where a client asks without reading the page's ``<link rel="icon">`` (a JSON answer opened in a tab)."""
    _send(ex, "favicon.svg")


_EMBED_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>cw-middleware: the context window element</title>
<link rel="icon" href="{root}/static/favicon.svg" type="image/svg+xml">
<script src="{root}/embed.js" defer></script>
</head>
<body>
<cw-context-window run="{run}" stage="{stage}"></cw-context-window>
</body>
</html>
"""


def _embed_script(ex: Exchange, _: list[str]) -> None:
    _send(ex, "embed.js")


def _embed_page(ex: Exchange, _: list[str]) -> None:
    query = parse_qs(urlsplit(ex.path).query)
    given = {name: (query.get(name) or [""])[0] for name in ("run", "stage")}
    values = {**given, "root": ex.root_path.rstrip("/")}
    page = _EMBED_PAGE.format(**{k: html.escape(v, quote=True) for k, v in values.items()})
    ex.send_bytes(200, _TYPES[".html"], page.encode("utf-8"), HEADERS)


ROUTES = [
    Route("/", _index, auth=False),
    Route("/runs/{run_id}", _index, auth=False),
    Route("/static/{name}", _static, auth=False),
    Route("/favicon.ico", _favicon, auth=False),
    Route("/embed.js", _embed_script, auth=False),
    Route("/embed", _embed_page, auth=False),
]
