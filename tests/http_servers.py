"""Tiny HTTP servers on 127.0.0.1 for telemetry tests: an OpenAI-compatible chat endpoint and an OTLP/HTTP receiver."""

from __future__ import annotations

import contextlib
import json
import socket
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


class _StatusHandler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        owner: OtlpStatusServer = self.server.owner  # type: ignore[attr-defined]
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with owner.lock:
            owner.hits += 1
        body = b'{"code": 13, "message": "collector failure"}'
        self.send_response(owner.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class OtlpStatusServer(_Server):
    """An OTLP/HTTP collector that answers every export with ``status`` (500: broken, 503: overloaded)."""

    def __init__(self, status: int = 500) -> None:
        self.status = status
        self.hits = 0
        self.lock = threading.Lock()
        super().__init__(_StatusHandler)


class HangingServer:
    """Accepts TCP connections and never answers: a wedged collector (HTTP or gRPC alike)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.connections: list[socket.socket] = []
        self._closed = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"http://{host}:{port}"

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections.append(conn)  # held open, never read, never answered

    def close(self) -> None:
        self._closed.set()
        self.sock.close()
        for conn in self.connections:
            conn.close()


class GrpcStatusServer:
    """A real gRPC OTLP collector whose trace, metric and log services all answer ``code`` (an error)."""

    def __init__(self, code: str = "INTERNAL") -> None:
        from concurrent.futures import ThreadPoolExecutor

        import grpc
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        status = getattr(grpc.StatusCode, code)
        self.hits = 0
        self.lock = threading.Lock()

        def fail(request: Any, context: Any) -> Any:
            with self.lock:
                self.hits += 1
            context.abort(status, "collector failure")

        self.server = grpc.server(ThreadPoolExecutor(max_workers=4))
        for module, name in (
            (trace_service_pb2_grpc, "TraceService"),
            (metrics_service_pb2_grpc, "MetricsService"),
            (logs_service_pb2_grpc, "LogsService"),
        ):
            servicer = type(f"Failing{name}", (getattr(module, f"{name}Servicer"),), {"Export": staticmethod(fail)})()
            getattr(module, f"add_{name}Servicer_to_server")(servicer, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.stop(grace=None)


class _HeldOtlpHandler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        owner: HeldCollector = self.server.owner  # type: ignore[attr-defined]
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        owner.arrived.set()
        owner.release.wait(owner.HOLD_AT_MOST)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()


class HeldCollector(_Server):
    """An OTLP/HTTP collector that holds every export until the test sets ``release``, then takes it (200).

    ``arrived`` is set by the first export: from then on an exporter is inside an export, waiting.
    """

    HOLD_AT_MOST = 120.0  # a test that never releases still ends its server

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.release = threading.Event()
        super().__init__(_HeldOtlpHandler)

    def close(self) -> None:
        self.release.set()
        super().close()


class HeldGrpcCollector:
    """`HeldCollector` over gRPC: a real OTLP gRPC collector whose services answer once ``release`` is set."""

    def __init__(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        import grpc
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

        self.arrived = threading.Event()
        self.release = threading.Event()

        def held(answer: type) -> Any:
            def export(request: Any, context: Any) -> Any:
                self.arrived.set()
                self.release.wait(HeldCollector.HOLD_AT_MOST)
                return answer()

            return staticmethod(export)

        self.server = grpc.server(ThreadPoolExecutor(max_workers=8))
        for module, answers, name, answer in (
            (trace_service_pb2_grpc, trace_service_pb2, "TraceService", "ExportTraceServiceResponse"),
            (metrics_service_pb2_grpc, metrics_service_pb2, "MetricsService", "ExportMetricsServiceResponse"),
            (logs_service_pb2_grpc, logs_service_pb2, "LogsService", "ExportLogsServiceResponse"),
        ):
            servicer = type(f"Held{name}", (getattr(module, f"{name}Servicer"),), {"Export": held(getattr(answers, answer))})()
            getattr(module, f"add_{name}Servicer_to_server")(servicer, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.release.set()
        self.server.stop(grace=None)


def closed_port() -> int:
    """A port nothing listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class AsgiServer:
    """An ASGI application under a real uvicorn on 127.0.0.1 (its own thread and event loop), until `close`."""

    def __init__(self, app: Any, root_path: str = "") -> None:
        import asyncio

        import uvicorn

        self.app = app
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.server_address = self._sock.getsockname()[:2]
        config = uvicorn.Config(app, log_level="warning", lifespan="on", server_header=False, root_path=root_path)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve(sockets=[self._sock])), daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)

    @property
    def url(self) -> str:
        host, port = self.server_address
        return f"http://{host}:{port}"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self._sock.close()

    # the names the serve fixtures call
    def shutdown(self) -> None:
        self.close()

    def server_close(self) -> None:
        pass
