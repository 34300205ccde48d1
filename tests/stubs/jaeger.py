"""A Jaeger query service stand-in: the api_v3 HTTP gateway of Jaeger v2.

Written from jaegertracing/jaeger (cmd/jaeger/internal/extension/jaegerquery/internal/apiv3/
http_gateway.go and query_parser.go, internal/storage/v2/memory/tenant.go, the adjusters)
and the recorded answers in tests/fixtures/jaeger-apiv3/:

- ``GET /api/v3/traces``: ``query.start_time_min``/``max`` (RFC 3339) are required (400),
  ``query.search_depth`` defaults to 100 and may not exceed the store's ``max_traces``
  (the memory store then fails: HTTP 500); ``query.attributes`` is a JSON map of strings
  matched against span, scope, resource and event attributes of *one* span by
  ``AsString`` equality; a trace matches when one of its spans matches everything; newest
  trace first; the answer is ``{"result": {"resourceSpans": [...]}}`` with hex ids, or
  HTTP 404 ``{"error": {"httpCode": 404, "message": "No traces found"}}``.
- ``GET /api/v3/traces/{trace_id}`` (hex or base64): the same wrapper, 404 when unknown.
- ``GET /api/v3/services``.
- Before v2.19 (``version``) only the snake_case parameter names exist and the HTTP API
  ignores ``query.attributes``; from v2.19 camelCase is canonical, snake_case an alias.
- The query service's adjusters sort attributes by key and events by name (stable).
- ``storage="elasticsearch"`` (also Cassandra, OpenSearch: Jaeger's span model) stores
  array attributes as their JSON text and timestamps in microseconds.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Any, Optional

from stubs import StubServer, TraceStore, as_string, attribute_map, attribute_value

NOT_FOUND = {"error": {"httpCode": 404, "message": "No traces found"}}


def _error(status: int, message: str) -> tuple[int, Any]:
    return status, {"error": {"httpCode": status, "message": message}}


def _ns(text: str) -> int:
    """RFC 3339 with nanoseconds (Go's time.RFC3339Nano), which Python's fromisoformat cuts to microseconds."""
    head, dot, tail = text.rstrip("Z").partition(".")
    digits = "".join(c for c in tail if c.isdigit())
    base = datetime.fromisoformat(head + ("+00:00" if text.endswith("Z") else tail[len(digits) :]))
    return int(base.timestamp()) * 10**9 + int((digits or "0").ljust(9, "0")[:9])


class JaegerStub(StubServer):
    def __init__(
        self,
        store: TraceStore,
        *,
        version: tuple[int, int] = (2, 19),
        storage: str = "memory",
        max_traces: int = 100_000,
        token: Optional[str] = None,
    ) -> None:
        self.store, self.version, self.storage, self.max_traces = store, version, storage, max_traces
        super().__init__(token)

    def _param(self, query: dict[str, list[str]], camel: str, snake: str) -> str:
        if self.version >= (2, 19) and query.get(camel, [""])[0]:
            return query[camel][0]
        return query.get(snake, [""])[0]

    def route(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        if path == "/api/v3/services":
            names = {attribute_map(r.get("attributes")).get("service.name") for t in self.store.traces.values() for r, _, _ in t}
            return 200, {"services": sorted(n for n in names if n)}
        if path == "/api/v3/traces":
            return self._find(query)
        if path.startswith("/api/v3/traces/"):
            trace_id = _trace_id(path.rsplit("/", 1)[1])
            if trace_id is None:
                return _error(400, "malformed parameter trace_id")
            if trace_id not in self.store.traces:
                return _error(404, "trace not found")
            return 200, {"result": self._trace(trace_id)}
        return 404, "404 page not found\n"

    def _find(self, query: dict[str, list[str]]) -> tuple[int, Any]:
        service = self._param(query, "query.serviceName", "query.service_name")
        low = self._param(query, "query.startTimeMin", "query.start_time_min")
        high = self._param(query, "query.startTimeMax", "query.start_time_max")
        if not low or not high:
            return _error(400, "query.startTimeMin and query.startTimeMax are required")
        try:
            low_ns, high_ns = _ns(low), _ns(high)
        except ValueError:
            return _error(400, "malformed parameter query.startTimeMin")
        depth_text = self._param(query, "query.searchDepth", "query.search_depth") or "100"
        try:
            depth = int(depth_text)
        except ValueError:
            return _error(400, "malformed parameter query.searchDepth")
        wanted: dict[str, str] = {}
        if self.version >= (2, 19) and query.get("query.attributes", [""])[0]:
            try:
                wanted = json.loads(query["query.attributes"][0])
            except ValueError:
                return _error(400, "malformed parameter query.attributes")
            if not isinstance(wanted, dict) or not all(isinstance(v, str) for v in wanted.values()):
                return _error(400, "malformed parameter query.attributes")
        if depth <= 0 or depth > self.max_traces:
            return _error(500, "search depth must be greater than 0 and less than max traces")
        found = []
        for trace_id in reversed(list(self.store.traces)):  # newest trace first
            if len(found) == depth:
                break
            if any(self._matches(r, s, span, service, low_ns, high_ns, wanted) for r, s, span in self.store.spans(trace_id)):
                found.append(trace_id)
        if not found:
            return 404, NOT_FOUND
        combined = [rs for trace_id in found for rs in self._trace(trace_id)["resourceSpans"]]
        return 200, {"result": {"resourceSpans": combined}}

    def _matches(
        self,
        resource: dict[str, Any],
        scope: dict[str, Any],
        span: dict[str, Any],
        service: str,
        low: int,
        high: int,
        wanted: dict[str, str],
    ) -> bool:
        resource_attrs = attribute_map(resource.get("attributes"))
        if service and resource_attrs.get("service.name") != service:
            return False
        start = int(span.get("startTimeUnixNano", 0))
        if start < low or start > high:
            return False
        places = [attribute_map(span.get("attributes")), attribute_map(scope.get("attributes")), resource_attrs]
        places += [attribute_map(e.get("attributes")) for e in span.get("events") or []]
        return all(any(key in p and as_string(p[key]) == value for p in places) for key, value in wanted.items())

    def _trace(self, trace_id: str) -> dict[str, Any]:
        return self.store.trace_doc(trace_id, self._convert)

    def _convert(self, span: dict[str, Any]) -> dict[str, Any]:
        if self.storage != "memory":
            _to_span_model(span)
        span["attributes"] = sorted(span.get("attributes") or [], key=lambda a: a["key"])
        events = span.get("events") or []
        for event in events:
            event["attributes"] = sorted(event.get("attributes") or [], key=lambda a: a["key"])
        if events:
            span["events"] = sorted(events, key=lambda e: e.get("name", ""))  # stable, as pdata's Sort
        return span


def _to_span_model(span: dict[str, Any]) -> None:
    """Through Jaeger's span model and back: arrays become JSON text, times microseconds."""
    for holder in [span, *(span.get("events") or [])]:
        for item in holder.get("attributes") or []:
            value = item.get("value") or {}
            if "arrayValue" in value or "kvlistValue" in value:
                item["value"] = {"stringValue": as_string(attribute_value(value))}
    for holder, key in [(span, "startTimeUnixNano"), (span, "endTimeUnixNano")] + [
        (e, "timeUnixNano") for e in span.get("events") or []
    ]:
        if key in holder:
            holder[key] = str(int(holder[key]) // 1000 * 1000)


def _trace_id(text: str) -> Optional[str]:
    """model.TraceIDFromString: hex, else base64 (standard or URL-safe, padded or not)."""
    lowered = text.lower()
    if lowered and len(lowered) <= 32 and all(c in "0123456789abcdef" for c in lowered):
        return lowered.rjust(32, "0")
    if len(text) > 24:
        return None
    for decode in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            raw = decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError):
            continue
        if len(raw) == 16:
            return raw.hex()
    return None
