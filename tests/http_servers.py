"""Tiny HTTP servers on 127.0.0.1 for telemetry tests: an OpenAI-compatible chat endpoint and an OTLP/HTTP receiver."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional


class _Server:
    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.httpd.owner = self  # type: ignore[attr-defined]
        # A short poll interval: close() waits for the serving loop to notice the shutdown.
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _OpenAIHandler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        owner: OpenAIStub = self.server.owner  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        owner.requests.append(json.loads(body or b"{}"))
        status, payload = owner.status, owner.body
        if payload is None:
            payload = {
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": "gpt-4o-2024-08-06",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": owner.prompt_tokens, "completion_tokens": 3, "total_tokens": owner.prompt_tokens + 3},
            }
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class OpenAIStub(_Server):
    """Speaks the OpenAI chat completions API: a success with usage, or `status` with an error `body`."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        self.body: Optional[dict[str, Any]] = None
        self.prompt_tokens = 1234
        super().__init__(_OpenAIHandler)

    def fail(self, status: int, body: dict[str, Any]) -> None:
        self.status, self.body = status, body


class _OtlpHandler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        owner: OtlpReceiver = self.server.owner  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with owner.lock:
            owner.bodies.setdefault(self.path, []).append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()


class OtlpReceiver(_Server):
    """Records every OTLP/HTTP request body by path (/v1/traces, /v1/metrics, /v1/logs)."""

    def __init__(self) -> None:
        self.bodies: dict[str, list[bytes]] = {}
        self.lock = threading.Lock()
        super().__init__(_OtlpHandler)

    def all_bytes(self) -> bytes:
        with self.lock:
            return b"".join(b for bodies in self.bodies.values() for b in bodies)


@contextlib.contextmanager
def running(server_cls: type) -> Iterator[Any]:
    server = server_cls()
    try:
        yield server
    finally:
        server.close()
