"""The one reader of every span backend (Jaeger, Tempo, Phoenix), over each backend's own search.

A span backend differs from another only in how it finds spans: its query language,
its paging, whether a search returns whole traces or a trace must be fetched by id.
So each backend module supplies a `SpanSearch` (one method, `spans(wanted)`, like
httpx's transport seam) and `TraceReader` answers the `SnapshotReader` questions over
it once: sorted into export order, folded (`fold.py`), a miss told apart as a
missing run or a missing stage.

Export order. A backend hands spans back in its own order (by trace, by insertion, by
score), but the folds read staleness from the order spans were *exported* in: the
stage's start marker is exported when the stage begins, the stage span when it ends.
One writer exports spans in the order they end, so sorting by end time restores that
order (`export_order`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Optional, Protocol, Union

from .._kernel import codec as codec
from .._kernel import names
from .._kernel.contract import HistoryPoint, StageContextWindow
from .._kernel.errors import ConfigError
from .._kernel.log import RateLimitedLog
from .fold import DEFAULT_HISTORY, Horizon, Missing, RunSummary, StageSummary, fold_history, fold_run, fold_runs, fold_stage
from .otlp_json import Span


@dataclass(frozen=True)
class Wanted:
    """What a search asks for: the spans of one stage, of one run, or of every run (no ids)."""

    run_id: Optional[str] = None
    stage_id: Optional[str] = None

    @property
    def attributes(self) -> dict[str, str]:
        """The span attributes a matching span carries (the schema marker aside)."""
        out = {}
        if self.run_id is not None:
            out[names.ATTR_RUN_ID] = self.run_id
        if self.stage_id is not None:
            out[names.ATTR_STAGE_ID] = self.stage_id
        return out

    @property
    def listing(self) -> bool:
        """A run's stages or the runs: the stage spans and start markers suffice, no snapshot is needed."""
        return self.stage_id is None


class SpanSearch(Protocol):
    """One span backend's query: the seam each backend module implements, `TraceReader` reads through."""

    def spans(self, wanted: Wanted, probe: bool = False) -> list[Span]:
        """The spans the backend holds for ``wanted``, in any order; [] when it holds none.

        For a stage: every span of the traces that name it, snapshot events included. For
        a listing: at least the stage spans and start markers with their ids, kind, state
        and times. ``probe``: any one matching trace is enough (is the run there at all?).
        """
        ...

    def close(self) -> None: ...


class TraceReader:
    """`SnapshotReader` over one `SpanSearch`."""

    keeps_every_call = True  # every call is a span it holds

    def __init__(self, search: SpanSearch, horizon: Horizon) -> None:
        self.search = search
        self.horizon = horizon

    def latest(self, run_id: str, stage_id: str) -> Union[StageContextWindow, Missing]:
        spans = export_order(self.search.spans(Wanted(run_id, stage_id)))
        answer = fold_stage(spans, run_id, stage_id, self.horizon)
        if answer is not None:
            return answer
        # Which is missing: the stage's search may have shown the run already (a backend that
        # ignores the attributes answers with other traces); else one trace of the run tells.
        if fold_run(spans, run_id) is not None or fold_run(self.search.spans(Wanted(run_id), probe=True), run_id) is not None:
            return Missing.STAGE
        return Missing.RUN

    def stages(self, run_id: str) -> Optional[list[StageSummary]]:
        return fold_run(export_order(self.search.spans(Wanted(run_id))), run_id, self.horizon)

    def history(self, run_id: str, stage_id: str, limit: int = DEFAULT_HISTORY) -> Union[list[HistoryPoint], Missing]:
        spans = self.search.spans(Wanted(run_id, stage_id))
        points = fold_history(spans, run_id, stage_id, limit)
        if points is not None:
            return points
        if fold_run(spans, run_id) is not None or fold_run(self.search.spans(Wanted(run_id), probe=True), run_id) is not None:
            return Missing.STAGE
        return Missing.RUN

    def runs(self) -> list[RunSummary]:
        return fold_runs(export_order(self.search.spans(Wanted())), self.horizon)

    def close(self) -> None:
        self.search.close()


# ---------------------------------------------------------------- what the searches share


def export_order(spans: Iterable[Span]) -> list[Span]:
    """Spans oldest export first, as the folds expect them (ties: the earlier start first)."""
    return sorted(spans, key=lambda s: (s.end_ns or s.start_ns, s.start_ns, s.span_id))


# Array attributes of the contract. Stores built on Jaeger's span model (Elasticsearch,
# OpenSearch, Cassandra, Badger) keep arrays as their JSON text.
ARRAY_KEYS = (
    names.ATTR_WARNINGS,
    names.ATTR_DETAIL_CATEGORIES,
    names.ATTR_DETAIL_SOURCES,
    names.ATTR_DETAIL_TOKENS,
    *names.TOOL_ARRAYS,
    *names.UNUSED_ARRAYS,
)


def restore_arrays(span: Span) -> Span:
    """Arrays a store kept as JSON text (``'["a","b"]'``) back to lists, on the span and its events."""
    for attrs in (span.attributes, *(e.attributes for e in span.events)):
        for key in ARRAY_KEYS:
            value = attrs.get(key)
            if isinstance(value, str) and value.startswith("["):
                try:
                    decoded = json.loads(value)
                except ValueError:
                    continue
                if isinstance(decoded, list):
                    attrs[key] = decoded
    return span


def positive_int(params: Mapping[str, str], name: str, default: int, maximum: int = 1_000_000) -> int:
    """A whole-number URL option (``?search_depth=``, ``?limit=``...) between 1 and ``maximum``."""
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        number = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {raw!r}") from None
    if not 0 < number <= maximum:
        raise ConfigError(f"{name} must be between 1 and {maximum}, got {raw!r}")
    return number


_log = RateLimitedLog()


def warn_truncated(display: str, limit: str) -> None:
    """A search stopped at its limit: the answer may miss older data. Logged once a minute per backend."""
    _log.warning(
        f"truncated:{display}",
        f"cw_middleware: {display} returned as much as one query may ({limit}); older spans may be missing "
        "from the answer: raise that URL option or narrow ?lookback=",
    )
