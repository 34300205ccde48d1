"""``cw-middleware serve``: the read-back answer over HTTP, stdlib only.

    GET /api/v1/runs                                             {"runs": [...]}, newest activity first
    GET /api/v1/runs/{run_id}/stages/{stage_id}/context-window   StageContextWindow JSON
    GET /api/v1/runs/{run_id}/stages                             {"run_id", "stages": [...]}
    GET /openapi.json                                            this API, OpenAPI 3.1
    GET /healthz                                                 {"status": "ok"}

404 for a missing run or stage (JSON error), 200 with ``available=false`` for a
known stage without data, 400 for an invalid id, 401 without the bearer token
when one is set (``--token`` or CW_SERVE_TOKEN), 502/503 when the backend fails.
Ids are path segments: percent-encode a ``/`` inside an id as ``%2F``. Binds to
127.0.0.1 by default. Readers are synchronous; each request runs on its own
thread (ThreadingHTTPServer). Errors never carry a stack trace.
"""

from __future__ import annotations

import hmac
import json
import logging
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional
from urllib.parse import unquote, urlsplit

from .errors import BackendError, BackendUnavailable, ConfigError, NotFound
from .readback import Reader

logger = logging.getLogger("cw_middleware")

API_PREFIX = "/api/v1"


def _error_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
            }
        },
    }


def openapi_document() -> dict[str, Any]:
    from .contract import StageContextWindow

    window_schema = StageContextWindow.model_json_schema(ref_template="#/components/schemas/{model}")
    defs = window_schema.pop("$defs", {})
    id_param = {"in": "path", "required": True, "schema": {"type": "string", "minLength": 1, "maxLength": 256}}
    errors = {
        "400": {"description": "invalid id", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
        "401": {
            "description": "missing or wrong bearer token",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
        },
        "404": {
            "description": "no such run or stage",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
        },
        "502": {
            "description": "the backend answered something unreadable",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
        },
        "503": {
            "description": "the backend could not be reached",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
        },
    }
    stage_summary = {
        "type": "object",
        "required": ["stage_id", "staleness"],
        "properties": {
            "stage_id": {"type": "string"},
            "kind": {"type": ["string", "null"]},
            "agent_stage": {"type": ["boolean", "null"]},
            "staleness": {"type": "string", "enum": ["live", "stored"]},
            "started_at": {"type": ["string", "null"], "format": "date-time"},
            "last_seen_at": {"type": ["string", "null"], "format": "date-time"},
        },
    }
    run_summary = {
        "type": "object",
        "required": ["run_id", "stages", "live_stages"],
        "properties": {
            "run_id": {"type": "string"},
            "stages": {"type": "integer", "minimum": 0},
            "live_stages": {"type": "integer", "minimum": 0},
            "first_seen_at": {"type": ["string", "null"], "format": "date-time"},
            "last_seen_at": {"type": ["string", "null"], "format": "date-time"},
        },
    }
    backend_errors = {k: v for k, v in errors.items() if k in ("401", "502", "503")}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "cw-middleware read-back API",
            "version": "1",
            "description": "What filled the context window of a stage, read back from telemetry. Content-free.",
        },
        "paths": {
            f"{API_PREFIX}/runs": {
                "get": {
                    "operationId": "listRuns",
                    "summary": "Runs the backend holds, newest activity first",
                    "responses": {
                        "200": {
                            "description": "the runs; empty when the backend holds none",
                            "content": {
                                "application/json": {
                                    "schema": {
                                        "type": "object",
                                        "required": ["runs"],
                                        "properties": {
                                            "runs": {"type": "array", "items": {"$ref": "#/components/schemas/RunSummary"}}
                                        },
                                    }
                                }
                            },
                        },
                        **backend_errors,
                    },
                }
            },
            f"{API_PREFIX}/runs/{{run_id}}/stages/{{stage_id}}/context-window": {
                "get": {
                    "operationId": "getStageContextWindow",
                    "summary": "Latest context-window snapshot of a stage",
                    "parameters": [{"name": "run_id", **id_param}, {"name": "stage_id", **id_param}],
                    "responses": {
                        "200": {
                            "description": "the stage's answer; available=false when the stage has no data",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/StageContextWindow"}}},
                        },
                        **errors,
                    },
                }
            },
            f"{API_PREFIX}/runs/{{run_id}}/stages": {
                "get": {
                    "operationId": "listStages",
                    "summary": "Stages of a run",
                    "parameters": [{"name": "run_id", **id_param}],
                    "responses": {
                        "200": {
                            "description": "the run's stages, oldest first",
                            "content": {
                                "application/json": {
                                    "schema": {
                                        "type": "object",
                                        "properties": {
                                            "run_id": {"type": "string"},
                                            "stages": {"type": "array", "items": {"$ref": "#/components/schemas/StageSummary"}},
                                        },
                                    }
                                }
                            },
                        },
                        **errors,
                    },
                }
            },
        },
        "components": {
            "schemas": {
                **defs,
                "StageContextWindow": window_schema,
                "StageSummary": stage_summary,
                "RunSummary": run_summary,
                "Error": _error_schema(),
            },
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{}, {"bearer": []}],
    }


class _Handler(BaseHTTPRequestHandler):
    server: ReadbackServer
    server_version = "cw-middleware"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        logger.debug("serve: " + format, *args)

    # ------------------------------------------------------------ responses

    def _send(self, status: int, body: Any, headers: Optional[dict[str, str]] = None) -> None:
        data = json.dumps(body, separators=(",", ":")).encode("utf-8") if not isinstance(body, bytes) else body
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, status: int, code: str, message: str, headers: Optional[dict[str, str]] = None) -> None:
        self._send(status, {"error": {"code": code, "message": message}}, headers)

    # ------------------------------------------------------------ routing

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        try:
            self._route()
        except Exception as exc:  # noqa: BLE001 - never a stack trace to the client
            logger.warning("cw_middleware serve: internal error (%s)", type(exc).__name__)
            try:
                self._error(500, "internal_error", "internal error; see the server log")
            except Exception:  # noqa: BLE001
                pass

    do_HEAD = do_GET

    def _not_allowed(self) -> None:
        self._error(405, "method_not_allowed", "only GET is supported", {"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = _not_allowed

    def _authorized(self) -> bool:
        token = self.server.token
        if not token:
            return True
        given = self.headers.get("Authorization", "")
        scheme, _, value = given.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode())

    def _route(self) -> None:
        path = urlsplit(self.path).path
        if path == "/healthz":
            return self._send(200, {"status": "ok"})
        if not self._authorized():
            return self._error(401, "unauthorized", "a valid bearer token is required", {"WWW-Authenticate": "Bearer"})
        if path == "/openapi.json":
            return self._send(200, self.server.openapi)
        if path in (f"{API_PREFIX}/runs", f"{API_PREFIX}/runs/"):
            try:
                return self._send(200, {"runs": [r.as_dict() for r in self.server.reader.runs()]})
            except BackendUnavailable as exc:
                return self._error(503, "backend_unavailable", str(exc))
            except BackendError as exc:
                return self._error(502, "backend_error", str(exc))
        parts = path.split("/")
        # ['', 'api', 'v1', 'runs', RUN, 'stages'(, STAGE, 'context-window')]
        if parts[:4] == ["", "api", "v1", "runs"] and len(parts) in (6, 8) and parts[5] == "stages":
            try:
                run_id = _segment(parts[4], "run_id")
                if len(parts) == 6:
                    stages = self.server.reader.stages(run_id)
                    return self._send(200, {"run_id": run_id, "stages": [s.as_dict() for s in stages]})
                if parts[7] != "context-window":
                    return self._error(404, "no_route", f"no such endpoint: {path}")
                stage_id = _segment(parts[6], "stage_id")
                answer = self.server.reader.context_window(run_id, stage_id)
                return self._send(200, json.loads(answer.model_dump_json()))
            except ConfigError as exc:
                return self._error(400, "invalid_id", str(exc))
            except NotFound as exc:
                return self._error(404, "not_found", str(exc))
            except BackendUnavailable as exc:
                return self._error(503, "backend_unavailable", str(exc))
            except BackendError as exc:
                return self._error(502, "backend_error", str(exc))
        return self._error(404, "no_route", f"no such endpoint: {path}")


def _segment(raw: str, name: str) -> str:
    try:
        value = unquote(raw, errors="strict")
    except UnicodeDecodeError:
        raise ConfigError(f"{name} is not valid UTF-8") from None
    if not value:
        raise ConfigError(f"{name} must not be empty")
    return value


class ReadbackServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, reader: Reader, host: str = "127.0.0.1", port: int = 8765, token: Optional[str] = None) -> None:
        self.reader = reader
        self.token = token or None
        self.openapi = openapi_document()
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://{host}:{port}"


def make_server(reader: Reader, host: str = "127.0.0.1", port: int = 8765, token: Optional[str] = None) -> ReadbackServer:
    return ReadbackServer(reader, host, port, token)
