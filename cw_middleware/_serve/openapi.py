"""The OpenAPI 3.1 document of `cw-middleware serve` (``GET /openapi.json``), built from the contract's models."""

from __future__ import annotations

from typing import Any

from .route import API_PREFIX


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


def _json_error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def openapi_document() -> dict[str, Any]:
    from .._kernel.contract import HistoryPoint, RunReport, StageContextWindow

    window_schema = StageContextWindow.model_json_schema(ref_template="#/components/schemas/{model}")
    defs = window_schema.pop("$defs", {})
    point_schema = HistoryPoint.model_json_schema(ref_template="#/components/schemas/{model}")
    report_schema = RunReport.model_json_schema(ref_template="#/components/schemas/{model}")
    for schema in (point_schema, report_schema):
        defs.update(schema.pop("$defs", {}))
    id_param = {"in": "path", "required": True, "schema": {"type": "string", "minLength": 1, "maxLength": 256}}
    errors = {
        status: _json_error(description)
        for status, description in (
            ("400", "invalid id"),
            ("401", "missing or wrong bearer token"),
            ("404", "no such run or stage"),
            ("502", "the backend answered something unreadable"),
            ("503", "the backend could not be reached, or every query slot is taken (busy; Retry-After)"),
            ("504", "the backend query outlived the request's time box (query_timeout; Retry-After)"),
        )
    }
    stage_summary = {
        "type": "object",
        "required": ["stage_id", "staleness"],
        "properties": {
            "stage_id": {"type": "string"},
            "parent_stage_id": {"type": ["string", "null"], "description": "a sub-agent's stage: the stage it was started from"},
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
    backend_errors = {k: v for k, v in errors.items() if k in ("401", "502", "503", "504")}
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
            f"{API_PREFIX}/runs/{{run_id}}/stages/{{stage_id}}/history": {
                "get": {
                    "operationId": "getStageHistory",
                    "summary": "A stage over time: its newest calls, oldest first (each call's latest snapshot)",
                    "parameters": [
                        {"name": "run_id", **id_param},
                        {"name": "stage_id", **id_param},
                        {
                            "name": "limit",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "integer", "minimum": 1, "maximum": 10_000, "default": 100},
                        },
                    ],
                    "responses": {
                        "200": {
                            "description": "the stage's history; a metrics backend holds only the latest call",
                            "content": {
                                "application/json": {
                                    "schema": {
                                        "type": "object",
                                        "required": ["run_id", "stage_id", "snapshots"],
                                        "properties": {
                                            "run_id": {"type": "string"},
                                            "stage_id": {"type": "string"},
                                            "limit": {"type": "integer"},
                                            "snapshots": {
                                                "type": "array",
                                                "items": {"$ref": "#/components/schemas/HistoryPoint"},
                                            },
                                        },
                                    }
                                }
                            },
                        },
                        **errors,
                    },
                }
            },
            f"{API_PREFIX}/runs/{{run_id}}/summary": {
                "get": {
                    "operationId": "getRunSummary",
                    "summary": "A run over its stages: each stage's latest request and totals, and the run's totals",
                    "parameters": [{"name": "run_id", **id_param}],
                    "responses": {
                        "200": {
                            "description": "the run's summary",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RunReport"}}},
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
            f"{API_PREFIX}/runs/{{run_id}}/events": {
                "get": {
                    "operationId": "streamRunEvents",
                    "summary": "Server-Sent Events: the run's new snapshots and stage changes, as they land",
                    "description": (
                        "text/event-stream. On connect, the run's current state: one `stage` event per stage "
                        "(a StageSummary plus run_id) and one `snapshot` event per stage (the StageContextWindow plus "
                        "run_id); then one event per change. Each such event has an `id:` (a resumable position): "
                        "send it back as the Last-Event-ID header and the stream resumes after it, nothing lost and "
                        "nothing twice; a position the server no longer holds gets a `reset` event and the current "
                        "state. `backend_error` events (no id) say a poll failed. Comment lines are heartbeats. "
                        "Content-free, like every answer."
                    ),
                    "parameters": [
                        {"name": "run_id", **id_param},
                        {"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "string"}},
                    ],
                    "responses": {
                        "200": {
                            "description": "the event stream",
                            "content": {"text/event-stream": {"schema": {"type": "string"}}},
                        },
                        **errors,
                        "503": {
                            "description": "the backend could not be reached, or too many streams are open (Retry-After)",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                        },
                    },
                }
            },
            "/": {
                "get": {
                    "operationId": "livePage",
                    "summary": "The live page: runs, stages and each stage's context window (HTML; asks for the token)",
                    "security": [{}],
                    "responses": {"200": {"description": "the page", "content": {"text/html": {}}}},
                }
            },
            "/runs/{run_id}": {
                "get": {
                    "operationId": "liveRunPage",
                    "summary": "The live page of one run (the same HTML; the script reads the run id from the path)",
                    "security": [{}],
                    "parameters": [{"name": "run_id", **id_param}],
                    "responses": {"200": {"description": "the page", "content": {"text/html": {}}}},
                }
            },
            "/static/{name}": {
                "get": {
                    "operationId": "pageFile",
                    "summary": "One of the live page's files (its script, style sheet and icon), shipped in the package",
                    "security": [{}],
                    "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
                    "responses": {
                        "200": {
                            "description": "the file",
                            "content": {"text/javascript": {}, "text/css": {}, "image/svg+xml": {}},
                        },
                        "404": _json_error("no such file"),
                    },
                }
            },
            "/favicon.ico": {
                "get": {
                    "operationId": "favicon",
                    "summary": "The page's icon (the SVG of /static/favicon.svg, for clients that ask here)",
                    "security": [{}],
                    "responses": {"200": {"description": "the icon", "content": {"image/svg+xml": {}}}},
                }
            },
            "/embed.js": {
                "get": {
                    "operationId": "embedScript",
                    "summary": "The <cw-context-window run stage src> element: a ring and its popover, live (no dependency)",
                    "security": [{}],
                    "responses": {"200": {"description": "the script", "content": {"text/javascript": {}}}},
                }
            },
            "/embed": {
                "get": {
                    "operationId": "embedPage",
                    "summary": "A page that shows the element for one stage (a preview of what a host page embeds)",
                    "security": [{}],
                    "parameters": [
                        {"name": name, "in": "query", "required": True, "schema": {"type": "string"}} for name in ("run", "stage")
                    ],
                    "responses": {"200": {"description": "the page", "content": {"text/html": {}}}},
                }
            },
            "/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document: the OpenAPI 3.1 description of every route",
                    "responses": {
                        "200": {"description": "this document", "content": {"application/json": {}}},
                        "401": errors["401"],
                    },
                }
            },
            "/healthz": {
                "get": {
                    "operationId": "health",
                    "summary": "Liveness: answers without the token and without touching the backend",
                    "security": [{}],
                    "responses": {"200": {"description": "ok", "content": {"application/json": {}}}},
                }
            },
        },
        "components": {
            "schemas": {
                **defs,
                "StageContextWindow": window_schema,
                "HistoryPoint": point_schema,
                "RunReport": report_schema,
                "StageSummary": stage_summary,
                "RunSummary": run_summary,
                "Error": _error_schema(),
            },
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{}, {"bearer": []}],
    }
