"""Read snapshots back from Jaeger's api_v3 HTTP API: ``jaeger+http://HOST:16686``.

One search, ``GET /api/v3/traces``, answers every question: the run's (and stage's)
ids and the schema marker go in ``query.attributes``, which Jaeger matches by string
equality against span, scope, resource *and* event attributes; the answer is every
matching trace, whole, as OTLP JSON under ``result`` (no match: HTTP 404 "No traces
found", which means absent). Parameter names are the snake_case ones every api_v3
accepts (v2.19 made camelCase canonical and kept these as aliases). Before v2.19 the
HTTP API ignored ``query.attributes``: the answers stay right (the folds filter by id),
but the search depth is spent on the service's newest traces, so keep ``lookback``
short there.

URL options: ``service`` (the ``service.name`` searched; default ``cw-middleware``,
our exporter's default; empty for stores that search all services), ``lookback``
(default 7d), ``search_depth`` (traces per search, default 1000) and ``max_pages``
(searches per question, default 20: a run with more traces than one search returns
is read page by page, newest first, moving ``start_time_max`` back).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .._kernel import codec as codec
from .._kernel import names
from .._kernel.errors import BackendResponseError
from .http import BackendClient
from .otlp_json import Span, iter_spans
from .traces import TraceReader, Wanted, positive_int, restore_arrays, warn_truncated
from .window import window_ns

if TYPE_CHECKING:
    from .options import BackendURL, ReaderOptions

DEFAULT_SERVICE = "cw-middleware"
SEARCH_PATH = "/api/v3/traces"


def _rfc3339(time_ns: int) -> str:
    seconds, nanos = divmod(time_ns, 1_000_000_000)
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos:09d}Z"


class JaegerSearch:
    """`SpanSearch` over Jaeger's api_v3 (Jaeger v2, and the v1 query service's api_v3)."""

    def __init__(self, url: BackendURL, options: ReaderOptions) -> None:
        self.client = BackendClient("Jaeger", url, options)
        self.params = dict(url.params)
        self.service = url.params.get("service", DEFAULT_SERVICE)
        self.search_depth = positive_int(url.params, "search_depth", 1000)
        self.max_pages = positive_int(url.params, "max_pages", 20, maximum=1000)
        window_ns(self.params)  # a bad lookback is a ConfigError now, not at the first query

    def spans(self, wanted: Wanted, probe: bool = False) -> list[Span]:
        """Every span of the traces matching ``wanted`` (and the schema marker); whole traces, page by page."""
        query = {names.ATTR_SCHEMA: str(names.SCHEMA_VERSION), **wanted.attributes}
        # A probe reads one page, a full one: a Jaeger before v2.19 ignores the attributes, so
        # its first trace could be another run's.
        pages = 1 if probe else self.max_pages
        start_ns, end_ns = window_ns(self.params)
        spans: dict[tuple[str, str], Span] = {}
        traces: set[str] = set()
        for _ in range(pages):
            params: dict[str, Any] = {
                "query.attributes": json.dumps(query, separators=(",", ":")),
                "query.start_time_min": _rfc3339(start_ns),
                "query.start_time_max": _rfc3339(end_ns),
                "query.search_depth": self.search_depth,
            }
            if self.service:
                params["query.service_name"] = self.service
            doc = self.client.get_json(SEARCH_PATH, params, absent_on_404=True)
            if doc is not None and not isinstance(doc, dict):
                raise BackendResponseError(f"Jaeger at {self.client.display} answered a search that is not api_v3's shape")
            page = [restore_arrays(s) for s in iter_spans(doc)] if doc is not None else []
            page_traces = {s.trace_id for s in page}
            new_traces = page_traces - traces
            for span in page:
                spans.setdefault((span.trace_id, span.span_id), span)
            traces |= page_traces
            if len(page_traces) < self.search_depth or not new_traces:
                break
            # A full page: older traces may remain. Search again below the oldest start of this page
            # (a nanosecond below: the page's own oldest trace would match again and stop the paging).
            oldest = min(s.start_ns for s in page if s.trace_id in new_traces)
            if oldest <= start_ns:
                break
            end_ns = oldest - 1
        else:
            if not probe:  # a probe asks for one page only
                warn_truncated(self.client.display, f"max_pages={self.max_pages} searches of search_depth={self.search_depth}")
        return list(spans.values())

    def close(self) -> None:
        self.client.close()


def open_reader(url: BackendURL, options: ReaderOptions) -> TraceReader:
    return TraceReader(JaegerSearch(url, options), options.horizon)
