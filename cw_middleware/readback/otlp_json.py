"""One tolerant OTLP-JSON decoder for every reader that sees spans (file, Jaeger, Tempo).

Accepted shapes, as real backends write them:
- top level ``resourceSpans`` | ``batches`` (Tempo v1) | ``result.resourceSpans`` (Jaeger api_v3)
  | ``trace.resourceSpans`` (Tempo v2) | ``resource_spans``;
- ``scopeSpans`` or the legacy ``instrumentationLibrarySpans`` (and snake_case forms);
- ids in hex or base64; int64 as a string or a number; enums as ints or names;
  AnyValue keys camelCase or snake_case.

The decoder knows OTLP, not our contract: `fold.py` turns the decoded spans of a
run or stage into answers.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Optional

from ..schema import as_int as _int

# ---------------------------------------------------------------- decoding


@dataclass
class Event:
    name: str
    time_ns: int
    attributes: dict[str, Any]


@dataclass
class Span:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    writer: str = ""  # service.instance.id of the resource: one writer exports spans in end order


def _get(obj: dict[str, Any], camel: str, snake: str, default: Any = None) -> Any:
    value = obj.get(camel)
    if value is None:
        value = obj.get(snake, default)
    return default if value is None else value


def normalize_id(value: Any) -> str:
    """Trace/span id as lowercase hex, from hex (OTLP JSON spec) or base64 (protobuf JSON mapping)."""
    if not value or not isinstance(value, str):
        return ""
    lowered = value.lower()
    if len(value) in (16, 32) and all(c in "0123456789abcdef" for c in lowered):
        return lowered
    try:
        return base64.b64decode(value, validate=True).hex()
    except (binascii.Error, ValueError):
        return lowered


def any_value(value: Any) -> Any:
    """Decode an OTLP AnyValue; unknown shapes decode to None."""
    if not isinstance(value, dict):
        return value
    for camel, snake in (("stringValue", "string_value"), ("boolValue", "bool_value")):
        if camel in value or snake in value:
            return _get(value, camel, snake)
    if "intValue" in value or "int_value" in value:
        return _int(_get(value, "intValue", "int_value"))
    if "doubleValue" in value or "double_value" in value:
        raw = _get(value, "doubleValue", "double_value")
        return float(raw) if raw is not None else None
    if "arrayValue" in value or "array_value" in value:
        arr = _get(value, "arrayValue", "array_value", {}) or {}
        return [any_value(v) for v in arr.get("values", [])]
    if "kvlistValue" in value or "kvlist_value" in value:
        kv = _get(value, "kvlistValue", "kvlist_value", {}) or {}
        return attributes(kv.get("values", []))
    if "bytesValue" in value or "bytes_value" in value:
        return _get(value, "bytesValue", "bytes_value")
    return None


def attributes(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(items, dict):  # some tools write a plain map
        return dict(items)
    for item in items or ():
        if isinstance(item, dict) and "key" in item:
            out[item["key"]] = any_value(item.get("value"))
    return out


def resource_spans(doc: Any) -> list[Any]:
    """The resourceSpans list of any accepted top-level shape (empty for metrics/logs lines)."""
    if not isinstance(doc, dict):
        return []
    for key in ("resourceSpans", "resource_spans", "batches"):
        if isinstance(doc.get(key), list):
            return doc[key]
    for wrapper in ("result", "trace", "data"):
        inner = doc.get(wrapper)
        if isinstance(inner, dict):
            found = resource_spans(inner)
            if found:
                return found
    return []


def iter_spans(doc: Any) -> Iterator[Span]:
    """Every span of an OTLP JSON document, in document order."""
    for rs in resource_spans(doc):
        if not isinstance(rs, dict):
            continue
        scopes = (
            rs.get("scopeSpans")
            or rs.get("scope_spans")
            or rs.get("instrumentationLibrarySpans")
            or rs.get("instrumentation_library_spans")
            or []
        )
        resource = rs.get("resource") or {}
        writer = attributes(resource.get("attributes")).get("service.instance.id", "") if isinstance(resource, dict) else ""
        for scope in scopes:
            for raw in (scope or {}).get("spans", []) or []:
                span = decode_span(raw)
                if span is not None:
                    span.writer = writer if isinstance(writer, str) else ""
                    yield span


def decode_span(raw: Any) -> Optional[Span]:
    if not isinstance(raw, dict):
        return None
    events = [
        Event(
            name=str(e.get("name", "")),
            time_ns=_int(_get(e, "timeUnixNano", "time_unix_nano")),
            attributes=attributes(e.get("attributes")),
        )
        for e in raw.get("events", []) or []
        if isinstance(e, dict)
    ]
    return Span(
        trace_id=normalize_id(_get(raw, "traceId", "trace_id")),
        span_id=normalize_id(_get(raw, "spanId", "span_id")),
        parent_span_id=normalize_id(_get(raw, "parentSpanId", "parent_span_id")),
        name=str(raw.get("name", "")),
        start_ns=_int(_get(raw, "startTimeUnixNano", "start_time_unix_nano")),
        end_ns=_int(_get(raw, "endTimeUnixNano", "end_time_unix_nano")),
        attributes=attributes(raw.get("attributes")),
        events=events,
    )
