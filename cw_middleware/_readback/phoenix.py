"""Read snapshots back from Arize Phoenix: ``phoenix+http://HOST:6006[?project=NAME]``.

Phoenix takes our spans over OTLP (``/v1/traces``) into a project (resource attribute
``openinference.project.name``, else ``default``) and answers
``GET /v1/projects/{project}/spans`` with its own span shape: flat, typed attribute
maps, events with ISO timestamps, ids in hex under ``context``. Filters: repeated
``attribute=key:value`` (ANDed; the value is JSON-parsed, so ids are sent JSON-quoted
and a run called ``42`` stays a string), ``start_time``; pages of at most 1,000 spans,
newest first, continued with ``cursor`` = the previous ``next_cursor``. An unknown
project is HTTP 404: absent, like an unknown run.

Phoenix matches span attributes only, not event attributes: our spans carry the run
and stage ids (the snapshot is mirrored onto its span), a producer that puts them on
events alone cannot be searched here. Its attribute match compares JSON text, so an
id with non-ASCII characters is not found by the filter: such ids are searched by the
schema marker and filtered here.

URL options: ``project`` (default ``default``), ``lookback`` (default 7d) and
``max_pages`` (pages per question, default 100).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any, Optional
from urllib.parse import quote

from .._kernel import codec as codec
from .._kernel import names
from .._kernel.errors import BackendResponseError, ConfigError
from .http import BackendClient
from .otlp_json import Event, Span, normalize_id
from .traces import TraceReader, Wanted, positive_int, warn_truncated
from .window import window_ns

if TYPE_CHECKING:
    from .options import BackendURL, ReaderOptions

DEFAULT_PROJECT = "default"
PAGE_LIMIT = 1000  # Phoenix's maximum ``limit``


def _ns(value: Any) -> int:
    """Nanoseconds from Phoenix's ISO timestamps (microsecond precision); 0 when unreadable."""
    if not isinstance(value, str):
        return 0
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return 0
    return (int(moment.timestamp()) * 1_000_000 + moment.microsecond) * 1000


def decode_phoenix_span(raw: Any) -> Optional[Span]:
    """One span of Phoenix's ``/v1/projects/{p}/spans`` answer as the decoder's `Span`."""
    if not isinstance(raw, dict):
        return None
    context: dict[str, Any] = raw["context"] if isinstance(raw.get("context"), dict) else {}
    attrs: dict[str, Any] = raw["attributes"] if isinstance(raw.get("attributes"), dict) else {}
    events = [
        Event(
            name=str(e.get("name", "")),
            time_ns=_ns(e.get("timestamp")),
            attributes=dict(e["attributes"]) if isinstance(e.get("attributes"), dict) else {},
        )
        for e in raw.get("events") or []
        if isinstance(e, dict)
    ]
    return Span(
        trace_id=normalize_id(context.get("trace_id")),
        span_id=normalize_id(context.get("span_id")),
        parent_span_id=normalize_id(raw.get("parent_id")),
        name=str(raw.get("name", "")),
        start_ns=_ns(raw.get("start_time")),
        end_ns=_ns(raw.get("end_time")),
        attributes=dict(attrs),
        events=events,
    )


def _filter(key: str, value: Any) -> Optional[str]:
    """``key:value`` for Phoenix's attribute filter; None when Phoenix cannot match the value."""
    text = json.dumps(value)
    if isinstance(value, str) and not value.isascii():
        return None
    return f"{key}:{text}"


class PhoenixSearch:
    """`SpanSearch` over Phoenix's REST span search."""

    def __init__(self, url: BackendURL, options: ReaderOptions) -> None:
        self.project = url.params.get("project") or DEFAULT_PROJECT
        if any(c in self.project for c in "/?#"):
            raise ConfigError(f"a Phoenix project name cannot contain '/', '?' or '#': {self.project!r}")
        self.client = BackendClient("Phoenix", url, options)
        self.params = dict(url.params)
        self.max_pages = positive_int(url.params, "max_pages", 100, maximum=10_000)
        window_ns(self.params)

    def spans(self, wanted: Wanted, probe: bool = False) -> list[Span]:
        """The project's spans carrying ``wanted``'s ids (and the schema marker), page by page."""
        ids = wanted.attributes
        filters = [f"{names.ATTR_SCHEMA}:{names.SCHEMA_VERSION}"]
        filters += [f for f in (_filter(k, v) for k, v in ids.items()) if f is not None]
        exact = len(filters) == 1 + len(ids)  # every id filtered by Phoenix: any one span answers a probe
        start_ns, _ = window_ns(self.params)
        params: dict[str, Any] = {
            "attribute": filters,
            "limit": 1 if probe and exact else PAGE_LIMIT,
            "start_time": datetime.fromtimestamp(start_ns / 1e9).astimezone().isoformat(),
        }
        path = f"/v1/projects/{quote(self.project, safe='')}/spans"
        out: list[Span] = []
        for _ in range(self.max_pages):
            doc = self.client.get_json(path, params, absent_on_404=True)
            if doc is None:
                return []
            if not isinstance(doc, dict) or not isinstance(doc.get("data", []), list):
                raise BackendResponseError(f"Phoenix at {self.client.display} answered spans that are not Phoenix's shape")
            for raw in doc.get("data") or []:
                span = decode_phoenix_span(raw)
                if span is not None and all(span.attributes.get(k) == v for k, v in ids.items()):
                    out.append(span)
            cursor = doc.get("next_cursor")
            if not cursor or (probe and out):
                break
            params = {**params, "cursor": cursor}
        else:
            warn_truncated(self.client.display, f"max_pages={self.max_pages} pages of {PAGE_LIMIT} spans")
        return out

    def close(self) -> None:
        self.client.close()


def open_reader(url: BackendURL, options: ReaderOptions) -> TraceReader:
    return TraceReader(PhoenixSearch(url, options), options.horizon)
