"""A queued span `Record` written straight to its OTLP JSON line, the bytes the SDK's encoder path writes.

The SDK's path (``encode_spans`` → protobuf → ``MessageToDict`` → base64 ids rewritten to
hex → ``json.dumps``) cost ~0.5–1 ms of CPU a span on the export worker, taken in GIL turns
from the caller (issue 22 gap 1); this writes the same line from the record's tuples. What
the mapping does, and so what this does: fields in field-number order, a field holding its
default (0, "", empty) left out, message fields present even when empty (``"status":{}``),
64-bit integers as strings, doubles as ``repr`` or ``"NaN"``/``"Infinity"``/``"-Infinity"``,
enums as numbers, bytes as base64, ids as hex, strings escaped as ``json.dumps`` does with
``ensure_ascii=False``; an attribute the encoder cannot take (an int beyond 64 bits, a string
that is not valid UTF-8, a type OTLP has no value for) is left out, as the SDK's
``_encode_attributes`` leaves it out; ``None`` inside an array is ``{}``, as the SDK writes it
since 1.3x (1.30 left such an attribute out; cw's spans hold none). The resource and scope
part of a line is the SDK's own, made once per origin. ``tests/embedded/test_span_json.py``
compares both paths on varied spans.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring as _quote  # json.dumps(ensure_ascii=False)'s own string escaping
from typing import Any, Optional

from .records import AttributesRecord, ContextRecord, Origins, Record

_INT64 = (-(2**63), 2**63 - 1)
_IS_REMOTE_KNOWN, _IS_REMOTE = 0x100, 0x200  # SpanFlags: SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK, ..._IS_REMOTE_MASK
_MAX_KEYS = 4096  # attribute keys whose '{"key":...,"value":' is kept made (names only, never values)
_MAX_PAIRS = 4096  # attributes whose whole pair is kept made (arrays ~1-2 KB each at 20 rows: a few MB at most)
# The elements such an array may hold: equal values of these types encode alike once their types are equal
# (not floats: 0.0 == -0.0; not arrays or mappings: their elements' types are not in the key).
_KEPT_ELEMENTS = frozenset({str, int, bool, type(None)})


def _double(value: float) -> str:
    if value - value == 0.0:  # finite: inf - inf and NaN - NaN are NaN (a span holds ~45 doubles; one test each)
        return float.__repr__(value)
    if value != value:
        return '"NaN"'
    return '"Infinity"' if value > 0 else '"-Infinity"'


def _value(value: Any) -> str:
    """One AnyValue; ValueError/TypeError for a value the SDK's encoder would refuse."""
    kind = type(value)
    if kind is str:
        return '{"stringValue":' + _quote(value) + "}"
    if kind is bool:
        return '{"boolValue":true}' if value else '{"boolValue":false}'
    if kind is int:
        if not _INT64[0] <= value <= _INT64[1]:
            raise ValueError("int beyond 64 bits")
        return f'{{"intValue":"{value}"}}'
    if kind is float:
        return '{"doubleValue":' + _double(value) + "}"
    if kind is tuple:
        return _array(value)
    return _other(value)


def _other(value: Any) -> str:
    """The rarer values, in the order the SDK's ``_encode_value`` tries them (subclasses included)."""
    if value is None:
        return "{}"
    if isinstance(value, bool):
        return '{"boolValue":true}' if value else '{"boolValue":false}'
    if isinstance(value, str):
        return '{"stringValue":' + _quote(str.__str__(value)) + "}"
    if isinstance(value, int):
        return _value(int(value))
    if isinstance(value, float):
        return '{"doubleValue":' + _double(float(value)) + "}"
    if isinstance(value, bytes):
        return '{"bytesValue":"' + base64.b64encode(value).decode("ascii") + '"}'
    if isinstance(value, Sequence):
        return _array(value)
    if isinstance(value, Mapping):
        if not value:
            return '{"kvlistValue":{}}'
        pairs = ",".join(_key_value(str(k), v) for k, v in value.items())
        return '{"kvlistValue":{"values":[' + pairs + "]}}"
    raise TypeError(f"no OTLP value for {type(value).__name__}")


def _array(values: Sequence[Any]) -> str:
    if not values:
        return '{"arrayValue":{}}'
    return '{"arrayValue":{"values":[' + ",".join(_value(v) for v in values) + "]}}"


def _key_value(key: str, value: Any) -> str:
    return ('{"key":' + _quote(key) + ',"value":' if key else '{"value":') + _value(value) + "}"


class SpanLines:
    """Writes records as OTLP JSON lines, one span a line; the origins' part of each line made once."""

    def __init__(self, origins: Origins) -> None:
        self._origins = origins
        self._frames: dict[int, tuple[str, str]] = {}
        self._keys: dict[str, str] = {}
        # Attributes repeat: a snapshot event's tool and detail rows (~250 of its ~330 values) are the
        # same on a call's two events and from call to call while the tools and the largest sources stay,
        # and so are most labels and counts (the span repeats its last event's). Their pairs are kept
        # made, by (key, value): a hash and a comparison in C instead of encoding every element again
        # (a span's encoding ~210 -> ~110 us, issue 22 gap 1). The values are the exported attributes
        # themselves (labels and numbers), in memory only. The key holds the types too: (1,), (True,)
        # and (1.0,) are equal tuples with three encodings; floats are not kept (0.0 == -0.0).
        self._pairs: dict[tuple[str, Any, Any], str] = {}

    def line(self, record: Record) -> bytes:
        """``{"resourceSpans":[...]}`` and a newline, UTF-8; raises for a span the SDK's encoder could not write either."""
        try:
            return self._text(record, strict=False).encode("utf-8")
        except UnicodeEncodeError:
            # A string that is not valid UTF-8 (a lone surrogate): the SDK's encoder drops an attribute
            # holding one and fails on a name holding one. The slow path checks attribute by attribute.
            return self._text(record, strict=True).encode("utf-8")

    def _text(self, record: Record, strict: bool, frame: tuple[str, str] | None = None) -> str:
        origin, name, context, parent, kind, start, end, attributes, events, dropped_events, links, dropped_links, status = record
        prefix, suffix = frame or self._frame(origin)
        parts = [prefix, "{", _ids(context)]
        state = context[4] if context is not None else ()
        if state:
            parts.append(',"traceState":' + _quote(",".join(f"{k}={v}" for k, v in state)))
        if parent is not None:
            parts.append(f',"parentSpanId":"{parent[1]:016x}"')
        if name:
            parts.append(',"name":' + _quote(name))
        parts.append(f',"kind":{kind + 1}')  # the SDK's SpanKind counts from INTERNAL=0, OTLP's from UNSPECIFIED=0
        if start:
            parts.append(f',"startTimeUnixNano":"{start}"')
        if end:
            parts.append(f',"endTimeUnixNano":"{end}"')
        parts.append(self._attributes(attributes, strict))
        if events:
            parts.append(',"events":[' + ",".join(self._event(e, strict) for e in events) + "]")
        if dropped_events:
            parts.append(f',"droppedEventsCount":{dropped_events}')
        if links:
            parts.append(',"links":[' + ",".join(self._link(c, a, strict) for c, a in links) + "]")
        if dropped_links:
            parts.append(f',"droppedLinksCount":{dropped_links}')
        code, description = status
        fields = ['"message":' + _quote(description)] if description else []  # Status: message is field 2, code 3
        if code:
            fields.append(f'"code":{code}')
        body = ",".join(fields)
        parts.append(',"status":{' + body + f'}},"flags":{_flags(parent)}}}')
        parts.append(suffix)
        return "".join(parts)

    def _attributes(self, record: AttributesRecord, strict: bool, first: bool = False) -> str:
        """``,"attributes":[...],"droppedAttributesCount":N`` with what is there (``first``: no leading comma)."""
        items, dropped = record
        out = ""
        if items:
            keys, made = self._keys, self._pairs
            written = []
            for key, value in items:
                kind = type(value)
                known: Optional[tuple[str, Any, Any]] = None
                if kind is tuple:
                    types = tuple(map(type, value))
                    known = (key, value, types) if _KEPT_ELEMENTS.issuperset(types) else None
                elif kind is str or kind is int:  # labels and counts repeat too (a call's two events, the span)
                    known = (key, value, kind)
                if known is not None:
                    pair = made.get(known)
                    if pair is not None:
                        if strict:
                            try:
                                pair.encode("utf-8")
                            except ValueError:
                                continue
                        written.append(pair)
                        continue
                head = keys.get(key)
                if head is None:
                    head = '{"key":' + _quote(key) + ',"value":' if key else '{"value":'
                    if len(keys) < _MAX_KEYS:
                        keys[key] = head
                try:
                    pair = head + _value(value) + "}"
                    if strict:
                        pair.encode("utf-8")
                except (ValueError, TypeError):  # UnicodeEncodeError is a ValueError
                    continue  # as the SDK's _encode_attributes: the attribute is left out
                if known is not None:
                    if len(made) >= _MAX_PAIRS:
                        made.clear()
                    made[known] = pair
                written.append(pair)
            if written:
                out = ',"attributes":[' + ",".join(written) + "]"
        if dropped:
            out += f',"droppedAttributesCount":{dropped}'
        return out[1:] if first else out

    def _event(self, event: tuple[str, int, AttributesRecord], strict: bool) -> str:
        name, timestamp, attributes = event
        fields = []
        if timestamp:
            fields.append(f'"timeUnixNano":"{timestamp}"')
        if name:
            fields.append('"name":' + _quote(name))
        rest = self._attributes(attributes, strict, first=True)
        if rest:
            fields.append(rest)
        return "{" + ",".join(fields) + "}"

    def _link(self, context: ContextRecord, attributes: AttributesRecord, strict: bool) -> str:
        # The SDK's encoder writes a link's ids, attributes and flags (not its trace state).
        body = _ids(context) + self._attributes(attributes, strict) + f',"flags":{_flags(context)}'
        return "{" + body + "}"

    def _frame(self, origin: int) -> tuple[str, str]:
        frame = self._frames.get(origin)
        if frame is None:
            frame = self._frames[origin] = self._make_frame(origin)
        return frame

    def _make_frame(self, origin: int) -> tuple[str, str]:
        """The line around a span for this origin, as the installed SDK's encoder writes it (once per origin).

        Resource and scope are written by the SDK's own path, on a probe span: what it writes for
        them changed between SDK versions (1.30 writes neither the scope's attributes nor its
        schema URL), and it is paid once per tracer. The probe span, as written here, is cut out.
        """
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        from opentelemetry.sdk.trace import ReadableSpan

        from .encode import to_json_line

        resource, scope = self._origins[origin]
        probe = ReadableSpan(
            name="p", context=trace.SpanContext(1, 1, False), resource=resource, instrumentation_scope=scope, start_time=1
        )
        line = to_json_line(encode_spans([probe])).decode("utf-8")
        record = (origin, "p", (1, 1, False, 0, ()), None, 0, 1, None, ((), 0), (), 0, (), 0, (0, None))
        body = self._text(record, strict=False, frame=("", ""))
        start = line.index(body)  # strings are escaped: the probe's own text is only where the span is
        return line[:start], line[start + len(body) :]


def _ids(context: ContextRecord) -> str:
    """``"traceId":"…","spanId":"…"``: the first fields of a span or a link."""
    trace_id, span_id = (context[0], context[1]) if context is not None else (0, 0)
    return f'"traceId":"{trace_id:032x}","spanId":"{span_id:016x}"'


def _flags(parent: ContextRecord) -> int:
    return _IS_REMOTE_KNOWN | (_IS_REMOTE if parent is not None and parent[2] else 0)
