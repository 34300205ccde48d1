"""``cw.asgi_app()``: the read-back server's routes as a plain ASGI application, to mount in the user's own app.

    app.mount("/cw", cw.asgi_app())     # FastAPI, Starlette; Litestar: asgi("/cw", is_mount=True)(cw.asgi_app())

The same routes, errors, limits and event stream as ``cw-middleware serve``: both cores turn a
request into an `Exchange` and call `dispatch.answer`. The routes and the readers are synchronous
(a backend read can take seconds, an event stream lasts as long as its client), so each request
runs its route on a thread of its own, as serve's do, and never on the host's event loop; what
the route sends goes back through the loop, each send time-boxed like serve's socket writes
(``Limits.idle_timeout``). At most ``Limits.max_connections`` requests run at once; past that, 503.
No dependency: ASGI is a calling convention, not a package.

Who may ask (access.py): with ``token``, whoever sends it as ``Authorization: Bearer``; without one,
only requests whose Host is a loopback name or one of ``allowed_hosts`` (DNS rebinding), so a host
app on a real name either passes its names or puts its own auth in front and a token here.
Mounted under a path, the live page's links and the API calls its script makes carry that path
(the scope's ``root_path``).

Lifespan: an ASGI server that sends ``lifespan.shutdown`` closes the app (its event streams end,
its run watchers stop). A framework that does not pass lifespan to a mounted app (Starlette's
``Mount``) leaves that to ``app.close()`` in the host's own shutdown; otherwise the streams end
with their clients and the watchers linger out (``Limits.linger``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from email.message import Message
from typing import Any, Optional

from .._readback import Reader
from .access import Access
from .dispatch import answer, error_body
from .gate import QueryGate
from .http_errors import HttpError
from .limits import Limits
from .openapi import openapi_document
from .route import Context
from .watch import Watchers

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_BASE_HEADERS = [(b"cache-control", b"no-store"), (b"x-content-type-options", b"nosniff")]


class _Body:
    """The stream's ``wfile``: each write is one ASGI body message, sent through the loop and waited for."""

    def __init__(self, exchange: _AsgiExchange) -> None:
        self._exchange = exchange

    def write(self, data: bytes) -> int:
        self._exchange.send_message({"type": "http.response.body", "body": bytes(data), "more_body": True})
        return len(data)

    def flush(self) -> None:
        pass  # each write is sent as it is made


class _AsgiExchange:
    """One ASGI request as a route sees it (`route.Exchange`); its methods run on the request's thread."""

    def __init__(self, app: AsgiApp, scope: Scope, loop: asyncio.AbstractEventLoop, send: Send) -> None:
        self.app = app
        self.command = str(scope.get("method", "GET")).upper()
        self.root_path = str(scope.get("root_path") or "").rstrip("/")
        self.path = _target(scope, self.root_path)
        self.headers = Message()
        for key, value in scope.get("headers") or ():
            self.headers[key.decode("latin-1")] = value.decode("latin-1")
        self.wfile = _Body(self)
        self.started = False
        self.response_headers: dict[str, str] = {}
        self.streaming = False
        self.gone = threading.Event()
        self._loop = loop
        self._send = send

    @property
    def context(self) -> Context:
        return self.app.context

    @property
    def closing(self) -> bool:
        return self.app.closing

    def client_gone(self) -> bool:
        return self.gone.is_set()

    def send_message(self, message: MutableMapping[str, Any]) -> None:
        """Send one ASGI message from the request's thread, within the write time box (serve's socket timeout)."""
        if self.gone.is_set():
            raise BrokenPipeError("the client went away")
        future: concurrent.futures.Future[None] = asyncio.run_coroutine_threadsafe(_sending(self._send, message), self._loop)
        try:
            future.result(timeout=self.app.limits.idle_timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError("the client stopped reading") from None
        except (OSError, RuntimeError) as exc:  # the server's own word for a closed connection
            raise BrokenPipeError(str(exc)) from None

    def _start(self, status: int, content_type: str, headers: Optional[dict[str, str]], length: Optional[int]) -> None:
        self.started = True
        head = [(b"content-type", content_type.encode("latin-1")), *_BASE_HEADERS]
        merged = {**self.response_headers, **(headers or {})}
        head += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in merged.items()]
        if length is not None:
            head.append((b"content-length", str(length).encode()))
        self.send_message({"type": "http.response.start", "status": status, "headers": head})

    def send_bytes(self, status: int, content_type: str, data: bytes, headers: Optional[dict[str, str]] = None) -> None:
        self._start(status, content_type, headers, len(data))
        body = b"" if self.command == "HEAD" else data
        self.send_message({"type": "http.response.body", "body": body, "more_body": False})

    def send_json(self, status: int, body: Any, headers: Optional[dict[str, str]] = None) -> None:
        self.send_bytes(status, "application/json", json.dumps(body, separators=(",", ":")).encode("utf-8"), headers)

    def start_stream(self, content_type: str, headers: Optional[dict[str, str]] = None) -> None:
        self.streaming = True
        self._start(200, content_type, headers, None)

    def end(self) -> None:
        """Close a stream the route left open (its last body message)."""
        if self.streaming and not self.gone.is_set():
            try:
                self.send_message({"type": "http.response.body", "body": b"", "more_body": False})
            except (BrokenPipeError, TimeoutError):
                pass


async def _sending(send: Send, message: MutableMapping[str, Any]) -> None:
    await send(message)  # a coroutine of its own: an ASGI server's send need only be awaitable


def _target(scope: Scope, root_path: str) -> str:
    """The request target below the mount, still percent-encoded (an id may hold an encoded ``/``), with its query."""
    raw = scope.get("raw_path")
    if isinstance(raw, (bytes, bytearray)):
        path = bytes(raw).decode("latin-1").split("?", 1)[0]
    else:
        path = str(scope.get("path") or "/")  # decoded: an encoded "/" in an id is lost, as the server gave it
    if root_path and (path == root_path or path.startswith(root_path + "/")):
        path = path[len(root_path) :] or "/"
    query = bytes(scope.get("query_string") or b"").decode("latin-1")
    return path + ("?" + query if query else "")


class AsgiApp:
    """The ASGI application `asgi_app` returns (module docstring)."""

    def __init__(
        self,
        reader: Reader,
        token: Optional[str] = None,
        limits: Optional[Limits] = None,
        allowed_hosts: Iterable[str] = (),
        allowed_origins: Iterable[str] = (),
    ) -> None:
        self.limits = limits or Limits()
        self.reader = reader
        self.access = Access(token, "localhost", allowed_hosts, allowed_origins)
        gate = QueryGate(self.limits.max_queries, self.limits.query_wait, self.limits.query_timeout)
        self.context = Context(reader, self.limits, gate, Watchers(reader, gate, self.limits), openapi_document())
        self.closing = False
        self._active = 0
        self._lock = threading.Lock()

    @property
    def requests(self) -> int:
        """Requests running now (bounded by ``limits.max_connections``)."""
        return self._active

    def close(self) -> None:
        """End the event streams and stop the run watchers (lifespan shutdown does this where it reaches the app)."""
        self.closing = True
        self.context.watchers.close()
        self.context.gate.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope.get("type")
        if kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "http":
            await self._http(scope, receive, send)
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # no websocket routes: refused before accept

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message.get("type") == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message.get("type") == "lifespan.shutdown":
                self.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        with self._lock:
            full = self._active >= self.limits.max_connections
            if not full:
                self._active += 1
        if full:
            await _send_error(send, HttpError(503, "busy", "too many connections; retry shortly", {"Retry-After": "1"}))
            return
        try:
            loop = asyncio.get_running_loop()
            exchange = _AsgiExchange(self, scope, loop, send)
            done: asyncio.Future[None] = loop.create_future()
            watch = asyncio.ensure_future(_watch_disconnect(receive, exchange))

            def run() -> None:
                try:
                    answer(exchange, self.access)
                    exchange.end()
                finally:
                    loop.call_soon_threadsafe(_finish, done)

            threading.Thread(target=run, name="cw-asgi-request", daemon=True).start()
            try:
                await asyncio.shield(done)
            except asyncio.CancelledError:  # the server gave up on the request: its thread stops at its next send
                exchange.gone.set()
                raise
            finally:
                watch.cancel()
        finally:
            with self._lock:
                self._active -= 1


def _finish(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


async def _watch_disconnect(receive: Receive, exchange: _AsgiExchange) -> None:
    """Read the request's messages until the client goes (a GET's body is empty: nothing else arrives)."""
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            exchange.gone.set()
            return


async def _send_error(send: Send, error: HttpError) -> None:
    body = json.dumps(error_body(error), separators=(",", ":")).encode()
    head = [(b"content-type", b"application/json"), *_BASE_HEADERS, (b"content-length", str(len(body)).encode())]
    head += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (error.headers or {}).items()]
    await send({"type": "http.response.start", "status": error.status, "headers": head})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def asgi_app(
    backend: Optional[str | Reader] = None,
    token: Optional[str] = None,
    *,
    allowed_hosts: Iterable[str] = (),
    allowed_origins: Iterable[str] = (),
) -> AsgiApp:
    """The read-back API, event stream and live page as an ASGI application, to mount in your own app.

    ``backend``: a backend URL (as `cw.reader` takes it; default: where the embedded exporter writes)
    or a `Reader`. ``token``: the bearer token every API request must carry (default: $CW_SERVE_TOKEN;
    none: only loopback Hosts and ``allowed_hosts`` may ask). ``allowed_origins``: other origins whose
    pages may read the answers (``https://app.example``; CORS, none by default). The limits are
    `cw-middleware serve`'s.
    Mount it (``app.mount("/cw", cw.asgi_app())``) or serve it alone (``uvicorn module:app``).
    """
    from .._kernel.config import resolve_read
    from .._readback import reader as make_reader

    source = backend if isinstance(backend, Reader) else make_reader(backend)
    return AsgiApp(
        source, token or resolve_read().serve_token, allowed_hosts=allowed_hosts, allowed_origins=_origins(allowed_origins)
    )


def _origins(given: Iterable[str]) -> list[str]:
    from .._kernel.errors import ConfigError
    from .access import origin

    try:
        return [origin(o) for o in ([given] if isinstance(given, str) else given)]
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
