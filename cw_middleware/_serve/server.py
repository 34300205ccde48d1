"""``cw-middleware serve``: the HTTP core (threads, limits, auth, errors) under the routes of `cw_middleware._serve`.

    GET /api/v1/runs                                             {"runs": [...]}, newest activity first
    GET /api/v1/runs/{run_id}/stages                             {"run_id", "stages": [...]}
    GET /api/v1/runs/{run_id}/stages/{stage_id}/context-window   StageContextWindow JSON
    GET /api/v1/runs/{run_id}/stages/{stage_id}/history          {"run_id", "stage_id", "snapshots": [...]}, ?limit=
    GET /api/v1/runs/{run_id}/summary                            RunReport JSON: the run over its stages
    GET /api/v1/runs/{run_id}/events                             Server-Sent Events (events.py)
    GET /  and  /runs/{run_id}                                   the live page (page.py)
    GET /openapi.json                                            this API, OpenAPI 3.1
    GET /healthz                                                 {"status": "ok"}, no token, no backend

Every answer other than 200 is our JSON error ``{"error": {"code", "message"}}``,
the stdlib's own (bad request line, unknown method, headers too large) included;
never a stack trace. Ids are path segments: percent-encode a ``/`` as ``%2F``.

Bounds (`serve.limits.Limits`): each connection has a socket timeout (idle clients are
closed), the request head must arrive within ``head_timeout`` (slow clients are cut by
one reaper thread), at most ``max_connections`` connection threads run at once (the
accept loop answers 503 past that, so threads stay bounded however many sockets are
open), the listen backlog is 128, backend queries are capped and time-boxed
(`serve.gate`), event streams are capped (`serve.watch`).

Who may ask (`serve.access`): with a bearer token (``--token-file``, CW_SERVE_TOKEN or
``--token``), whoever sends it; without one, only requests whose Host is a loopback name
or the bound address (DNS rebinding). Binds 127.0.0.1 by default.
"""

from __future__ import annotations

import json
import logging
import select
import socket
import threading
import time
from collections.abc import Iterable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

from .._readback import Reader
from .access import Access, token_matches
from .dispatch import ALLOW, answer, error_body, not_allowed
from .gate import QueryGate
from .http_errors import HttpError
from .limits import Limits
from .openapi import openapi_document
from .route import API_PREFIX, Context
from .watch import Watchers

logger = logging.getLogger("cw_middleware")

__all__ = ["API_PREFIX", "Limits", "ReadbackServer", "make_server", "openapi_document", "token_matches"]


class _HeadReaper:
    """One thread that closes connections whose request head is not complete by its deadline."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._lock = threading.Lock()
        self._deadlines: dict[socket.socket, float] = {}
        self._cut: set[socket.socket] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cw-serve-reaper", daemon=True)
        self._thread.start()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._deadlines[sock] = time.monotonic() + self.timeout

    def done(self, sock: socket.socket) -> bool:
        """Stop watching ``sock``; False when it was already cut (what it sent so far is not a request)."""
        with self._lock:
            self._deadlines.pop(sock, None)
            if sock in self._cut:
                self._cut.discard(sock)
                return False
            return True

    def _run(self) -> None:
        while not self._stop.wait(min(0.25, self.timeout / 4)):
            now = time.monotonic()
            with self._lock:
                overdue = [s for s, deadline in self._deadlines.items() if deadline < now]
                for s in overdue:
                    del self._deadlines[s]
                    self._cut.add(s)
            for s in overdue:
                try:
                    s.shutdown(socket.SHUT_RDWR)  # the handler's read returns; its thread ends
                except OSError:
                    pass

    def stop(self) -> None:
        self._stop.set()


class _Handler(BaseHTTPRequestHandler):
    server: ReadbackServer
    server_version = "cw-middleware"
    sys_version = ""
    root_path = ""  # served at the root (an ASGI mount may sit under a path: asgi.py)

    def version_string(self) -> str:
        """The ``Server`` header: our name alone (the stdlib joins it to ``sys_version`` with a space, left trailing)."""
        return self.server_version

    # ------------------------------------------------------------ connection

    def setup(self) -> None:
        self.timeout = self.server.limits.idle_timeout  # type: ignore[misc]  # StreamRequestHandler applies it to the socket
        self.started = False
        super().setup()
        self.server.reaper.watch(self.connection)

    def parse_request(self) -> bool:
        ok = super().parse_request()  # reads the headers too: the head deadline runs until it returns
        if not self.server.reaper.done(self.connection):
            self.close_connection = True  # cut at the deadline: a partial line or partial headers, never answered
            return False
        return ok

    def finish(self) -> None:
        self.server.reaper.done(self.connection)
        try:
            super().finish()
        except OSError:
            pass  # the client went away first

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        logger.debug("serve: " + format, *args)

    @property
    def context(self) -> Context:
        return self.server.context

    @property
    def closing(self) -> bool:
        return self.server.closing

    def client_gone(self) -> bool:
        """True once the client closed its end (a stream notices without waiting for a write to fail)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    # ------------------------------------------------------------ responses

    def _head(self, status: int, content_type: str, headers: Optional[dict[str, str]]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for key, value in {**getattr(self, "response_headers", {}), **(headers or {})}.items():
            self.send_header(key, value)

    def send_bytes(self, status: int, content_type: str, data: bytes, headers: Optional[dict[str, str]] = None) -> None:
        self.started = True
        self._head(status, content_type, headers)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_json(self, status: int, body: Any, headers: Optional[dict[str, str]] = None) -> None:
        self.send_bytes(status, "application/json", json.dumps(body, separators=(",", ":")).encode("utf-8"), headers)

    def start_stream(self, content_type: str, headers: Optional[dict[str, str]] = None) -> None:
        self.started = True
        self._head(200, content_type, headers)
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()

    def _error(self, error: HttpError) -> None:
        self.send_json(error.status, error_body(error), error.headers)

    def send_error(self, code: int, message: Optional[str] = None, explain: Optional[str] = None) -> None:
        """The stdlib's own errors (400 bad request line, 414, 431, 501 unknown method) as our JSON error."""
        self.close_connection = True
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            self.request_version = "HTTP/1.0"  # a head too broken to name its version still gets a status line
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "error"
        code_name = {501: "method_not_allowed"}.get(code, phrase.lower().replace(" ", "_").replace("-", "_"))
        headers = {"Connection": "close", **({"Allow": ALLOW} if code == 501 else {})}
        try:
            self._error(HttpError(code, code_name, message or phrase, headers))
        except OSError:
            pass

    # ------------------------------------------------------------ methods

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self.response_headers: dict[str, str] = {}
        answer(self, self.server.access)

    do_HEAD = do_OPTIONS = do_GET  # OPTIONS: an allowed origin's preflight (access.py), else 405

    def _not_allowed(self) -> None:
        self.close_connection = True  # its body, if any, is not read
        self._error(not_allowed())

    do_POST = do_PUT = do_DELETE = do_PATCH = do_TRACE = do_CONNECT = _not_allowed


class ReadbackServer(ThreadingHTTPServer):
    """The stdlib threading server with bounded threads, a deep backlog and the routes' shared context."""

    daemon_threads = True

    def __init__(
        self,
        reader: Reader,
        host: str = "127.0.0.1",
        port: int = 8765,
        token: Optional[str] = None,
        limits: Optional[Limits] = None,
        allowed_origins: Iterable[str] = (),
    ) -> None:
        self.limits = limits or Limits()
        self.request_queue_size = self.limits.backlog  # read by server_activate() inside __init__ below
        self.reader = reader
        self.token = token or None
        self.access = Access(self.token, host, allowed_origins=allowed_origins)
        gate = QueryGate(self.limits.max_queries, self.limits.query_wait, self.limits.query_timeout)
        self.context = Context(reader, self.limits, gate, Watchers(reader, gate, self.limits), openapi_document())
        self.closing = False
        self._active = 0
        self._active_lock = threading.Lock()
        self.reaper = _HeadReaper(self.limits.head_timeout)
        try:
            super().__init__((host, port), _Handler)
        except BaseException:
            self.reaper.stop()
            raise

    @property
    def openapi(self) -> dict[str, Any]:
        return self.context.openapi

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://{host}:{port}"

    @property
    def connections(self) -> int:
        """Connection threads running now (bounded by ``limits.max_connections``)."""
        return self._active

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._active_lock:
            full = self._active >= self.limits.max_connections
            if not full:
                self._active += 1
        if full:
            self._refuse(request)
            return
        thread = threading.Thread(target=self._serve_one, args=(request, client_address), daemon=True)
        thread.start()

    def _serve_one(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self._active_lock:
                self._active -= 1

    def _refuse(self, request: socket.socket) -> None:
        """503 from the accept loop itself: no thread is spent on a connection past the cap."""
        body = json.dumps({"error": {"code": "busy", "message": "too many connections; retry shortly"}}).encode()
        head = (
            "HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
            f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        try:
            request.settimeout(0.2)
            request.sendall(head + body)
        except OSError:
            pass
        self.shutdown_request(request)

    def server_close(self) -> None:
        self.closing = True
        self.context.watchers.close()
        self.context.gate.close()
        self.reaper.stop()
        super().server_close()


def make_server(
    reader: Reader,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: Optional[str] = None,
    limits: Optional[Limits] = None,
    allowed_origins: Iterable[str] = (),
) -> ReadbackServer:
    """``allowed_origins``: other origins whose pages may read the answers (CORS, access.py; none by default)."""
    return ReadbackServer(reader, host, port, token, limits, allowed_origins)
