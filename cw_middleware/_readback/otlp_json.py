"""One tolerant OTLP-JSON decoder for every reader that sees spans (file, Jaeger, Tempo).

Accepted shapes, as real backends write them:
- top level ``resourceSpans`` | ``batches`` (Tempo v1) | ``result.resourceSpans`` (Jaeger api_v3)
  | ``trace.resourceSpans`` (Tempo v2) | ``resource_spans``;
- ``scopeSpans`` or the legacy ``instrumentationLibrarySpans`` (and snake_case forms);
- ids in hex or base64; int64 as a string or a number; enums as ints or names;
  AnyValue keys camelCase or snake_case.

The decoder knows OTLP, not our contract: `fold.py` turns the decoded spans of a
run or stage into answers.

`decode_line` reads one line of an OTLP JSON lines file fast: a typed msgspec
decoder for the ``resourceSpans`` shape the SDK's and the Collector's file
exporters write, which decodes attribute values only for the keys asked for and
creates few objects for the garbage collector to walk; anything that shape does
not fit (wrappers, damaged values) goes through the tolerant decoder above, so
both paths give the same spans.

`index_spans` is the narrowest read, for building an index: span names, times and
the attributes asked for, with every other attribute value skipped undecoded at
C speed (a ``msgspec.Raw`` slice); trace and span ids are not read at all. It
gives, for those fields, what `decode_line` gives (it falls back to it for any
line its shape does not fit).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Optional, TypeVar, Union

import msgspec

from .._kernel.codec import as_int as _int

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
    if len(value) in (16, 32) and not lowered.strip("0123456789abcdef"):
        return lowered
    try:
        return base64.b64decode(value, validate=True).hex()
    except (binascii.Error, ValueError):
        return lowered


def any_value(value: Any) -> Any:
    """Decode an OTLP AnyValue; unknown shapes decode to None (a damaged value never fails its line)."""
    try:
        return _any_value(value)
    except (ValueError, TypeError, AttributeError, OverflowError):
        return None


def _any_value(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    for camel, snake in (("stringValue", "string_value"), ("boolValue", "bool_value")):
        if camel in value or snake in value:
            return _get(value, camel, snake)
    if "intValue" in value or "int_value" in value:
        return _int(_get(value, "intValue", "int_value"))
    if "doubleValue" in value or "double_value" in value:
        return _float(_get(value, "doubleValue", "double_value"))
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


# ---------------------------------------------------------------- one line, fast

_Int = Union[int, str, None]


_Unset = msgspec.UnsetType
_UNSET = msgspec.UNSET


class _AnyValue(msgspec.Struct, gc=False):
    # UNSET tells a missing key from an explicit null, as the tolerant decoder's `in` tests do.
    stringValue: Union[str, None, _Unset] = _UNSET
    string_value: Union[str, None, _Unset] = _UNSET
    boolValue: Union[bool, None, _Unset] = _UNSET
    bool_value: Union[bool, None, _Unset] = _UNSET
    intValue: Union[int, str, None, _Unset] = _UNSET
    int_value: Union[int, str, None, _Unset] = _UNSET
    doubleValue: Union[float, str, None, _Unset] = _UNSET
    double_value: Union[float, str, None, _Unset] = _UNSET
    arrayValue: Union[_Values, None, _Unset] = _UNSET
    array_value: Union[_Values, None, _Unset] = _UNSET
    kvlistValue: Union[_KeyValues, None, _Unset] = _UNSET
    kvlist_value: Union[_KeyValues, None, _Unset] = _UNSET
    bytesValue: Union[str, None, _Unset] = _UNSET
    bytes_value: Union[str, None, _Unset] = _UNSET


class _Values(msgspec.Struct, gc=False):
    values: list[_AnyValue] = []


class _KeyValue(msgspec.Struct, gc=False):
    key: str
    value: Optional[_AnyValue] = None


class _KeyValues(msgspec.Struct, gc=False):
    values: list[_KeyValue] = []


def _pick(camel: Any, snake: Any) -> Any:
    """`_get` for typed fields: the camelCase value unless it is null or missing."""
    value = snake if camel is None or camel is _UNSET else camel
    return None if value is _UNSET else value


def _float(raw: Any) -> Optional[float]:
    try:
        return float(raw) if raw is not None else None
    except (ValueError, TypeError):
        return None  # a damaged value ("abc"): None, as an unknown shape is, never a failed line


def _typed_value(v: Optional[_AnyValue]) -> Any:
    """`any_value` for a typed AnyValue, the same precedence."""
    if v is None:
        return None
    if v.stringValue is not _UNSET or v.string_value is not _UNSET:
        return _pick(v.stringValue, v.string_value)
    if v.boolValue is not _UNSET or v.bool_value is not _UNSET:
        return _pick(v.boolValue, v.bool_value)
    if v.intValue is not _UNSET or v.int_value is not _UNSET:
        return _int(_pick(v.intValue, v.int_value))
    if v.doubleValue is not _UNSET or v.double_value is not _UNSET:
        return _float(_pick(v.doubleValue, v.double_value))
    if v.arrayValue is not _UNSET or v.array_value is not _UNSET:
        arr = _pick(v.arrayValue, v.array_value)
        return [_typed_value(x) for x in arr.values] if arr is not None else []
    if v.kvlistValue is not _UNSET or v.kvlist_value is not _UNSET:
        kv = _pick(v.kvlistValue, v.kvlist_value)
        return {x.key: _typed_value(x.value) for x in kv.values} if kv is not None else {}
    if v.bytesValue is not _UNSET or v.bytes_value is not _UNSET:
        return _pick(v.bytesValue, v.bytes_value)
    return None


# The file exporters' shape, for the full read (`_KeyValue`: values decoded) and, with `_RawKeyValue`
# (values kept as raw bytes, decoded only for the keys asked for), for an index's narrow read.
KeyValueT = TypeVar("KeyValueT")
SpanT = TypeVar("SpanT")


class _Event(msgspec.Struct, Generic[KeyValueT], gc=False):
    name: str = ""
    timeUnixNano: _Int = None
    time_unix_nano: _Int = None
    attributes: list[KeyValueT] = []


class _SpanBody(msgspec.Struct, Generic[KeyValueT], gc=False):
    """A span without its ids: all an index reads (undeclared fields are skipped undecoded)."""

    name: str = ""
    startTimeUnixNano: _Int = None
    start_time_unix_nano: _Int = None
    endTimeUnixNano: _Int = None
    end_time_unix_nano: _Int = None
    attributes: list[KeyValueT] = []
    events: list[_Event[KeyValueT]] = []


class _Span(_SpanBody[_KeyValue], gc=False):
    traceId: Optional[str] = None
    trace_id: Optional[str] = None
    spanId: Optional[str] = None
    span_id: Optional[str] = None
    parentSpanId: Optional[str] = None
    parent_span_id: Optional[str] = None


class _Resource(msgspec.Struct, Generic[KeyValueT], gc=False):
    attributes: list[KeyValueT] = []  # an index reads it for its shape only: a line whose list is not one fails both reads


class _Scope(msgspec.Struct, Generic[SpanT], gc=False):
    spans: list[SpanT] = []


class _ResourceSpans(msgspec.Struct, Generic[SpanT, KeyValueT], gc=False):
    resource: Optional[_Resource[KeyValueT]] = None
    scopeSpans: list[_Scope[SpanT]] = []
    scope_spans: list[_Scope[SpanT]] = []
    instrumentationLibrarySpans: list[_Scope[SpanT]] = []
    instrumentation_library_spans: list[_Scope[SpanT]] = []


class _Line(msgspec.Struct, Generic[SpanT, KeyValueT], gc=False):
    resourceSpans: list[_ResourceSpans[SpanT, KeyValueT]] = []
    resource_spans: list[_ResourceSpans[SpanT, KeyValueT]] = []
    batches: list[_ResourceSpans[SpanT, KeyValueT]] = []


_LINE = msgspec.json.Decoder(_Line[_Span, _KeyValue])
_WRITER_KEY = "service.instance.id"


def _either(camel: Any, snake: Any) -> Any:
    return snake if camel is None else camel


def _typed_attributes(items: list[_KeyValue], keys: Optional[Collection[str]]) -> dict[str, Any]:
    if keys is None:
        return {kv.key: _typed_value(kv.value) for kv in items}
    return {kv.key: _typed_value(kv.value) for kv in items if kv.key in keys}


def _typed_span(raw: _Span, keys: Optional[Collection[str]], writer: str) -> Span:
    return Span(
        trace_id=normalize_id(_either(raw.traceId, raw.trace_id)),
        span_id=normalize_id(_either(raw.spanId, raw.span_id)),
        parent_span_id=normalize_id(_either(raw.parentSpanId, raw.parent_span_id)),
        name=raw.name,
        start_ns=_int(_either(raw.startTimeUnixNano, raw.start_time_unix_nano)),
        end_ns=_int(_either(raw.endTimeUnixNano, raw.end_time_unix_nano)),
        attributes=_typed_attributes(raw.attributes, keys),
        events=[
            Event(e.name, _int(_either(e.timeUnixNano, e.time_unix_nano)), _typed_attributes(e.attributes, keys))
            for e in raw.events
        ],
        writer=writer,
    )


def _only(span: Span, keys: Collection[str]) -> Span:
    span.attributes = {k: v for k, v in span.attributes.items() if k in keys}
    for e in span.events:
        e.attributes = {k: v for k, v in e.attributes.items() if k in keys}
    return span


def _loads(line: Any) -> Any:
    """`json.loads` of a line (bytes or a view of them); a byte that is not UTF-8 reads as U+FFFD.

    So a damaged byte costs only the value it sits in, in both decoders: the typed one skips
    values it does not decode without looking at their bytes.
    """
    data = bytes(line)
    try:
        return json.loads(data)
    except UnicodeDecodeError:
        return json.loads(data.decode("utf-8", "replace"))


def decode_line(
    line: bytes,
    keys: Optional[Collection[str]] = None,
    where: Optional[Callable[[Span], bool]] = None,
    where_keys: Collection[str] = (),
) -> list[Span]:
    """The spans of one OTLP JSON line, in document order (empty for a metrics or logs line).

    ``keys``: the attribute keys to decode, on spans and events alike (None: all of them).
    ``where``: keep only the spans it accepts; it sees each span decoded with ``where_keys``
    only, and the spans it keeps are then decoded with ``keys``, so a query that wants a few
    spans of a big line decodes the attributes of those few. Raises ValueError (and what
    `json.loads` raises) for a line that is not JSON.
    """
    try:
        doc = _LINE.decode(line)
    # Not the file exporters' shape, not JSON, or not UTF-8 (msgspec 0.19 raises UnicodeDecodeError
    # for that): the tolerant decoder decides.
    except (msgspec.DecodeError, UnicodeDecodeError):
        doc = None
    groups = (doc.resourceSpans or doc.resource_spans or doc.batches) if doc is not None else None
    if not groups:
        spans = list(iter_spans(_loads(line)))
        if where is not None:
            spans = [s for s in spans if where(s)]
        return spans if keys is None else [_only(s, keys) for s in spans]
    out = []
    for rs in groups:
        resource = rs.resource
        writer = _typed_attributes(resource.attributes, (_WRITER_KEY,)).get(_WRITER_KEY, "") if resource is not None else ""
        writer = writer if isinstance(writer, str) else ""
        scopes = rs.scopeSpans or rs.scope_spans or rs.instrumentationLibrarySpans or rs.instrumentation_library_spans
        for scope in scopes:
            for raw in scope.spans:
                if where is not None and not where(_typed_span(raw, where_keys, writer)):
                    continue
                out.append(_typed_span(raw, keys, writer))
    return out


# ---------------------------------------------------------------- one line, for an index


class _RawKeyValue(msgspec.Struct, gc=False):
    key: str
    value: msgspec.Raw = msgspec.Raw(b"null")  # decoded only for the keys asked for


_INDEX_LINE = msgspec.json.Decoder(_Line[_SpanBody[_RawKeyValue], _RawKeyValue])
_VALUE = msgspec.json.Decoder(Optional[_AnyValue])


def index_spans(line: bytes, keys: Collection[str]) -> list[Span]:
    """The spans of one line as `decode_line(line, keys)` gives them, less ids and writer (empty strings).

    For the names, times and ``keys`` attributes it returns what `decode_line` does, and raises
    what it raises: a line this shape does not fit, or whose wanted values do not decode, is
    handed to `decode_line` whole.
    """
    try:
        doc = _INDEX_LINE.decode(line)
        groups = doc.resourceSpans or doc.resource_spans or doc.batches
        if not groups:
            return decode_line(line, keys)
        values: dict[bytes, Any] = {}  # a line repeats the same few ids: each distinct value decoded once

        def wanted(items: list[_RawKeyValue]) -> dict[str, Any]:
            out = {}
            for kv in items:
                if kv.key in keys:
                    raw = bytes(kv.value)
                    value = values.get(raw, values)
                    if value is values:
                        value = _typed_value(_VALUE.decode(raw))
                        if not isinstance(value, (list, dict)):  # a mutable value is decoded for each use
                            values[raw] = value
                    out[kv.key] = value
            return out

        out = []
        for rs in groups:
            scopes = rs.scopeSpans or rs.scope_spans or rs.instrumentationLibrarySpans or rs.instrumentation_library_spans
            for scope in scopes:
                for raw in scope.spans:
                    events = [
                        Event(e.name, _int(_either(e.timeUnixNano, e.time_unix_nano)), wanted(e.attributes)) for e in raw.events
                    ]
                    start = _int(_either(raw.startTimeUnixNano, raw.start_time_unix_nano))
                    end = _int(_either(raw.endTimeUnixNano, raw.end_time_unix_nano))
                    out.append(Span("", "", "", raw.name, start, end, wanted(raw.attributes), events))
        return out
    except (msgspec.DecodeError, ValueError, TypeError, OverflowError):
        return decode_line(line, keys)
