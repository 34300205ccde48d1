"""A finished span as nested tuples of immutable values (a `Record`), which `span_json` writes as its OTLP JSON line.

The span queue holds records, not SDK objects: tuples of str/int/float/bool/None that the
garbage collector stops tracking as its young collections pass over them (a nesting level a
pass), so a queue of them costs it nothing
(issue 11 #4, ``benchmarks/gc_pauses.py``). A record names its resource and
instrumentation scope by their index in `Origins` (a tracer provider has one resource and
a scope per tracer: a short list).
"""

from __future__ import annotations

import threading
from typing import Any, Optional

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

# (origin, name, context, parent, kind, start, end, attributes, events, dropped_events, links, dropped_links, status)
Record = tuple[Any, ...]
ContextRecord = Optional[tuple[int, int, bool, int, tuple[tuple[str, str], ...]]]  # trace id, span id, remote, flags, state
AttributesRecord = tuple[tuple[tuple[str, Any], ...], int]  # (key, value) pairs, dropped count
# Events cw adds to its own spans without the SDK: (name, time in ns, attributes already as the SDK would hold
# them: values of str/bool/int/float or tuples of one of those; span_queue.py's `CompactSpanProcessor.end_with`).
OwnEvents = list[tuple[str, int, dict[str, Any]]]
# Attributes cw sets on its own span as it ends, likewise already as the SDK would hold them.
OwnAttributes = dict[str, Any]


class Origins:
    """The (resource, scope) pairs the records point into, by index."""

    def __init__(self) -> None:
        self._known: list[tuple[Resource, Optional[InstrumentationScope]]] = []
        self._lock = threading.Lock()

    def index(self, resource: Resource, scope: Optional[InstrumentationScope]) -> int:
        for index, (known_resource, known_scope) in enumerate(self._known):
            if known_resource is resource and known_scope is scope:
                return index
        with self._lock:
            self._known.append((resource, scope))
            return len(self._known) - 1

    def __getitem__(self, index: int) -> tuple[Resource, Optional[InstrumentationScope]]:
        return self._known[index]


def _context_record(context: Optional[trace.SpanContext]) -> ContextRecord:
    if context is None:
        return None
    state = tuple(context.trace_state.items()) if context.trace_state else ()
    return (context.trace_id, context.span_id, context.is_remote, int(context.trace_flags), state)


def _attributes_record(attributes: Any, dropped: int) -> AttributesRecord:
    if not attributes:
        return (), dropped
    # BoundedAttributes' own items() goes key by key through a lock in Python (~50x slower on
    # the caller's thread); the dict it wraps holds the same, already validated and immutable.
    return tuple(getattr(attributes, "_dict", attributes).items()), dropped


def compact(
    span: ReadableSpan,
    origins: Origins,
    own_events: Optional[OwnEvents] = None,
    own_attributes: Optional[OwnAttributes] = None,
) -> Record:
    """The span as nested tuples of immutable values; resource and scope by their index in ``origins``.

    ``own_events``: events cw recorded for the span itself, after the SDK's (see `OwnEvents`); ``own_attributes``:
    attributes it set as the span ended, after the SDK's, as ``set_attributes`` leaves them (a key set again
    moves to the end)."""
    events = tuple((e.name, e.timestamp, _attributes_record(e.attributes, e.dropped_attributes)) for e in span.events)
    if own_events:
        events += tuple((name, at, (tuple(attributes.items()), 0)) for name, at, attributes in own_events)
    links = tuple(
        (_context_record(link.context), _attributes_record(link.attributes, link.dropped_attributes)) for link in span.links
    )
    status = span.status
    # ReadableSpan.attributes wraps them in a read-only proxy: items() would be the slow path again.
    attributes = _attributes_record(getattr(span, "_attributes", None) or span.attributes, span.dropped_attributes)
    if own_attributes:
        kept = tuple((k, v) for k, v in attributes[0] if k not in own_attributes)
        attributes = (kept + tuple(own_attributes.items()), attributes[1])
    return (
        origins.index(span.resource, span.instrumentation_scope),
        span.name,
        _context_record(span.context),
        _context_record(span.parent),
        span.kind.value,
        span.start_time,
        span.end_time,
        attributes,
        events,
        span.dropped_events,
        links,
        span.dropped_links,
        (status.status_code.value, status.description),
    )


def index_view(record: Record) -> Any:
    """The span as the file index reads its line (`readback.otlp_json.index_spans`): name, times and the
    attributes `readback.fold.INDEX_KEYS` names, on the span and its events; ids left empty."""
    from .._readback.fold import INDEX_KEYS
    from .._readback.otlp_json import Event, Span

    _, name, _, _, _, start, end, attributes, events, *_ = record

    def wanted(items: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
        return {k: v for k, v in items if k in INDEX_KEYS}

    return Span(
        "",
        "",
        "",
        name,
        start or 0,
        end or 0,
        wanted(attributes[0]),
        [Event(n, t or 0, wanted(a[0])) for n, t, a in events],
    )
