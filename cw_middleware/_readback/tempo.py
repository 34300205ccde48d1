"""Read snapshots back from Grafana Tempo: ``tempo+http://HOST:3200``.

Tempo's search (``GET /api/search?q=<TraceQL>``) returns trace ids and, per trace,
the matching spans with only the attributes the query names (never span events);
the trace itself comes from ``GET /api/v2/traces/<id>`` (``{"trace": {...}}``), or
from the older ``GET /api/traces/<id>`` (``{"batches": [...]}``) on a Tempo without
the v2 API. Ids may arrive base64 (trace by id) or hex without leading zeros
(search): the decoder normalises both.

- a stage's answer: ``{ span.agent.run.id = "R" && span.agent.stage.id = "S" }``, then
  each matching trace by id (its snapshot events);
- a run's stages and the list of runs: the stage spans and start markers alone
  (``span.agent.stage.state`` "started" or "ended"), with ``select(...)`` naming the attributes the
  listing needs, so no trace is fetched unless a span set was cut short (``spss``).

URL options: ``lookback`` (default 7d, Tempo's default ``max_duration``), ``limit``
(traces per search, default 5000; Tempo's ``max_result_limit`` defaults to 262144)
and ``spss`` (spans per span set, default 100, Tempo's default maximum).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Optional
from urllib.parse import quote

from .._kernel import codec as codec
from .._kernel import names
from .._kernel.errors import BackendResponseError
from .http import BackendClient
from .otlp_json import Span, attributes, iter_spans, normalize_id
from .traces import TraceReader, Wanted, positive_int, warn_truncated
from .window import window_ns

if TYPE_CHECKING:
    from .options import BackendURL, ReaderOptions

SEARCH_PATH = "/api/search"
TRACE_V2_PATH = "/api/v2/traces/"
TRACE_V1_PATH = "/api/traces/"


def string_literal(value: str) -> str:
    """A TraceQL string literal: double quotes, backslash escapes (JSON's are a subset Go unquotes)."""
    return json.dumps(value, ensure_ascii=False)


def _equals(key: str, value: str) -> str:
    # Our keys are plain dotted names, which TraceQL takes unquoted on every Tempo version.
    return f"span.{key} = {string_literal(value)}"


_STAGE_STATES = (names.STAGE_STATE_STARTED, names.STAGE_STATE_ENDED)
_STAGE_STATE_SET = "(" + " || ".join(_equals(names.ATTR_STAGE_STATE, state) for state in _STAGE_STATES) + ")"
_LISTING_SELECT = (
    " | select("
    + ", ".join(f"span.{k}" for k in (names.ATTR_RUN_ID, names.ATTR_STAGE_ID, names.ATTR_STAGE_KIND, names.ATTR_STAGE_STATE))
    + ")"
)


class TempoSearch:
    """`SpanSearch` over Tempo's search and trace-by-id APIs."""

    def __init__(self, url: BackendURL, options: ReaderOptions) -> None:
        self.client = BackendClient("Tempo", url, options)
        self.params = dict(url.params)
        self.limit = positive_int(url.params, "limit", 5000)
        self.spss = positive_int(url.params, "spss", 100)
        self._trace_path: Optional[str] = None  # which trace-by-id API this Tempo has, once known
        window_ns(self.params)

    def spans(self, wanted: Wanted, probe: bool = False) -> list[Span]:
        """A stage: the traces that name it, fetched whole. A listing: the stage spans and markers the search returns."""
        limit = 1 if probe else self.limit
        matches = [_equals(key, value) for key, value in wanted.attributes.items()]
        if wanted.listing:
            return self._listing("{ " + " && ".join([*matches, _STAGE_STATE_SET]) + " }" + _LISTING_SELECT, limit)
        spans: list[Span] = []
        for trace_id, _ in self._search("{ " + " && ".join(matches) + " }", spss=1, limit=limit):
            spans.extend(self._trace(trace_id))
        return spans

    def close(self) -> None:
        self.client.close()

    # ------------------------------------------------------------ search

    def _search(self, query: str, spss: int, limit: int) -> list[tuple[str, list[Any]]]:
        """(trace id, its span sets) for each trace the TraceQL query matches."""
        start_ns, end_ns = window_ns(self.params)
        params = {"q": query, "limit": limit, "spss": spss, "start": start_ns // 10**9, "end": end_ns // 10**9 + 1}
        doc = self.client.get_json(SEARCH_PATH, params)
        traces = doc.get("traces") if isinstance(doc, dict) else None
        if not isinstance(doc, dict) or not isinstance(traces, (list, type(None))):
            raise BackendResponseError(f"Tempo at {self.client.display} answered a search that is not Tempo's shape")
        if traces and len(traces) >= limit and limit == self.limit:
            warn_truncated(self.client.display, f"limit={self.limit} traces")
        out = []
        for trace in traces or []:
            if not isinstance(trace, dict) or not trace.get("traceID"):
                continue
            span_sets = trace.get("spanSets") or ([trace["spanSet"]] if trace.get("spanSet") else [])
            out.append((str(trace["traceID"]), [s for s in span_sets if isinstance(s, dict)]))
        return out

    def _listing(self, query: str, limit: int) -> list[Span]:
        """The spans a listing needs, from search results; a trace whose span set was cut short is fetched whole."""
        spans: list[Span] = []
        for trace_id, span_sets in self._search(query, spss=self.spss, limit=limit):
            found = [s for span_set in span_sets for s in span_set.get("spans") or [] if isinstance(s, dict)]
            matched = max([codec.as_int(span_set.get("matched")) for span_set in span_sets] or [0])
            if matched > len(found):
                spans.extend(self._trace(trace_id))
            else:
                spans.extend(_search_span(trace_id, raw) for raw in found)
        return spans

    def _trace(self, trace_id: str) -> list[Span]:
        """The trace's spans by id: the v2 API, else the older one (remembered once one answers)."""
        paths = [self._trace_path] if self._trace_path else [TRACE_V2_PATH, TRACE_V1_PATH]
        for path in paths:
            doc = self.client.get_json(path + quote(trace_id, safe=""), absent_on_404=True)
            if doc is not None and not isinstance(doc, dict):
                raise BackendResponseError(f"Tempo at {self.client.display} answered a trace that is not OTLP JSON")
            if doc is not None:
                self._trace_path = path
                return list(iter_spans(doc))
        return []


def _search_span(trace_id: str, raw: dict[str, Any]) -> Span:
    start = codec.as_int(raw.get("startTimeUnixNano"))
    return Span(
        trace_id=normalize_id(trace_id.rjust(32, "0")),
        span_id=normalize_id(str(raw.get("spanID", "")).rjust(16, "0")),
        parent_span_id="",
        name=str(raw.get("name", "")),
        start_ns=start,
        end_ns=start + codec.as_int(raw.get("durationNanos")),
        attributes=attributes(raw.get("attributes")),
    )


def open_reader(url: BackendURL, options: ReaderOptions) -> TraceReader:
    return TraceReader(TempoSearch(url, options), options.horizon)
