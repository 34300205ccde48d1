"""Stand-ins for trace backends that cannot run here (Jaeger, Tempo): 127.0.0.1 HTTP servers.

They hold what our exporter really wrote (OTLP JSON lines, `TraceStore.feed_file`) and
answer with each backend's documented API, converting the data the way that backend
does (see each module and tests/fixtures/README.md). A stub answers only the requests
it knows and says 400 or 404 to anything else, so a reader that drifts from the real
API fails here too.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any, Optional, TypeVar
from urllib.parse import parse_qs, urlsplit

from http_servers import _Server

ID_KEYS = ("traceId", "spanId", "parentSpanId")
S = TypeVar("S", bound="StubServer")


class TraceStore:
    """Spans grouped by trace, in the order traces first arrived (a backend's insertion order)."""

    def __init__(self) -> None:
        self.traces: dict[str, list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]] = {}

    def feed(self, doc: dict[str, Any]) -> None:
        """One OTLP JSON document (``{"resourceSpans": [...]}``, hex ids) as an exporter sent it."""
        for rs in doc.get("resourceSpans") or []:
            for ss in rs.get("scopeSpans") or []:
                for span in ss.get("spans") or []:
                    trace_id = span["traceId"].lower()
                    self.traces.setdefault(trace_id, []).append((rs.get("resource") or {}, ss.get("scope") or {}, span))

    def feed_file(self, path: str) -> int:
        """Every trace line of an OTLP JSON lines file (ours or a Collector's); returns the span count."""
        count = 0
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith('{"resourceSpans"'):
                    doc = json.loads(line)
                    self.feed(doc)
                    count += sum(len(ss.get("spans") or []) for rs in doc["resourceSpans"] for ss in rs.get("scopeSpans") or [])
        return count

    def span_count(self, run_id: str) -> int:
        """Spans naming ``run_id`` (what a backend must have ingested for the run)."""
        needle = {"key": "agent.run.id", "value": {"stringValue": run_id}}
        return sum(needle in (span.get("attributes") or []) for trace in self.traces.values() for _, _, span in trace)

    def spans(self, trace_id: str) -> Iterator[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
        yield from self.traces.get(trace_id, [])

    def trace_doc(self, trace_id: str, convert: Optional[Callable[[dict[str, Any]], dict[str, Any]]] = None) -> dict[str, Any]:
        """The trace as ``{"resourceSpans": [...]}``: one resourceSpans per resource and scope, spans converted."""
        out: list[dict[str, Any]] = []
        last: Optional[tuple[int, int]] = None
        for resource, scope, span in self.traces.get(trace_id, []):
            key = (id(resource), id(scope))
            if key != last:
                out.append({"resource": copy.deepcopy(resource), "scopeSpans": [{"scope": copy.deepcopy(scope), "spans": []}]})
                last = key
            converted = copy.deepcopy(span)
            out[-1]["scopeSpans"][0]["spans"].append(convert(converted) if convert else converted)
        return {"resourceSpans": out}


def attribute_value(value: Any) -> Any:
    """A plain Python value from an OTLP JSON AnyValue (ints may be strings)."""
    if not isinstance(value, dict):
        return value
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return value["boolValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return [attribute_value(v) for v in (value["arrayValue"] or {}).get("values", [])]
    return None


def attribute_map(items: Any) -> dict[str, Any]:
    return {item["key"]: attribute_value(item.get("value")) for item in items or [] if isinstance(item, dict)}


def as_string(value: Any) -> str:
    """pcommon.Value.AsString(): how Jaeger compares a searched attribute, and how its span model stores arrays."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        # encoding/json escapes <, > and & in strings
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def hex_to_base64(node: Any) -> Any:
    """protobuf's JSON mapping of bytes: trace and span ids as base64 (how Tempo's jsonpb writes them)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ID_KEYS and isinstance(value, str) and value:
                node[key] = base64.b64encode(bytes.fromhex(value)).decode("ascii")
            else:
                hex_to_base64(value)
    elif isinstance(node, list):
        for item in node:
            hex_to_base64(item)
    return node


class StubServer(_Server):
    """A GET-only JSON server: `route(path, query)` returns (status, body); records every request."""

    def __init__(self, token: Optional[str] = None) -> None:
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self.token = token  # when set, requests need "Authorization: Bearer <token>"
        super().__init__(_StubHandler)

    def route(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        raise NotImplementedError


class _StubHandler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        owner: StubServer = self.server.owner  # type: ignore[attr-defined]
        parts = urlsplit(self.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        owner.requests.append((parts.path, query))
        if owner.token is not None and self.headers.get("Authorization") != f"Bearer {owner.token}":
            status, body = 401, "Unauthorized"
        else:
            status, body = owner.route(parts.path, query)
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def serving(server: S) -> Iterator[S]:
    """The stub, closed when the block ends."""
    try:
        yield server
    finally:
        server.close()
