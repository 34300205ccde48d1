"""From decoded spans to answers: one stage's context window, one run's stages, the list of runs.

Every span backend (the file, Phoenix, Jaeger, Tempo) decodes its wire format
into `otlp_json.Span` and hands the spans of a run or stage to the folds here, so
the rules that decide "latest snapshot" and "live or stored" exist once.

Staleness. A stage is announced by a marker span when it begins (exported at
once) and its stage span arrives when it ends; a marker newer than any stage
span is a stage still running. A process that dies inside a stage never sends
the end, so a "live" stage whose last sign of life (the newest span or snapshot
of the stage) is older than ``stale_after`` seconds (default
`DEFAULT_STALE_AFTER`, 30 minutes; `CW_STALE_AFTER` or the reader option
``stale_after``) reads as ``stored`` with the warning ``stage_end_not_seen``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from functools import cached_property
from typing import Any, Optional

from .._kernel import codec as codec
from .._kernel import names
from .._kernel.config import DEFAULT_STALE_AFTER
from .._kernel.contract import HistoryPoint, StageContextWindow, Staleness, UnavailableReason, WarningCode
from .._kernel.values import parse_seconds
from .otlp_json import Span


def parse_stale_after(value: Any, name: str = "stale_after") -> float:
    return parse_seconds(value, name)


@dataclass(frozen=True)
class Horizon:
    """When an unended stage stops counting as live: ``now`` minus ``stale_after``."""

    stale_after: float = DEFAULT_STALE_AFTER
    now_ns: Optional[int] = None  # tests pin the clock; readers use the time of the query

    def expired(self, last_activity_ns: int) -> bool:
        now = time.time_ns() if self.now_ns is None else self.now_ns
        return bool(last_activity_ns) and now - last_activity_ns > self.stale_after * 1e9


# ---------------------------------------------------------------- snapshots in spans


@dataclass(frozen=True)
class SnapshotRecord:
    """One snapshot event as read back; ordered by (generated_at, event_seq, event time).

    Only what ordering needs is read up front; the attributes are decoded into an answer
    (`window`) when a record could become its stage's latest, once.
    """

    order: tuple[float, int, int]
    attributes: dict[str, Any]
    event_time_ns: int
    stage_id: str

    @cached_property
    def window(self) -> Optional[StageContextWindow]:
        """The answer this snapshot gives (as stored); None for a damaged snapshot, which is skipped, never fatal."""
        try:
            window = codec.window_from_attributes(self.attributes, self.stage_id, Staleness.STORED, self.event_time_ns)
        except Exception:  # noqa: BLE001 - whatever a foreign or broken producer wrote
            return None
        # A snapshot says how it was counted: an event without it is damaged, never a call of the stage's history.
        return window if window is not None and window.count_method is not None else None


def snapshot_records(span: Span, run_id: str, stage_id: str) -> list[SnapshotRecord]:
    out = []
    for event in span.events:
        if event.name != names.SNAPSHOT_EVENT:
            continue
        a = event.attributes
        if a.get(names.ATTR_SUPERSEDED):  # an older call's late count: kept in the backend, never the latest
            continue
        if a.get(names.ATTR_RUN_ID, span.attributes.get(names.ATTR_RUN_ID)) != run_id:
            continue
        if a.get(names.ATTR_STAGE_ID, span.attributes.get(names.ATTR_STAGE_ID)) != stage_id:
            continue
        generated = codec.parse_time(a.get(names.ATTR_GENERATED_AT), event.time_ns).timestamp()
        order = (generated, codec.as_int(a.get(names.ATTR_EVENT_SEQ)), event.time_ns)
        out.append(SnapshotRecord(order, a, event.time_ns, stage_id))
    return out


class SpanRole:
    START = "start"  # the stage's zero-duration marker span: the stage began
    END = "end"  # the stage span itself, exported when the stage ended
    CALL = "call"  # an LLM call span inside the stage (ends before the stage does)
    LATE = "late"  # a late snapshot's carrier span (may outlive the stage)
    OTHER = "other"


def role_of(span: Span, run_id: str, stage_id: str) -> str:
    a = span.attributes
    if a.get(names.ATTR_RUN_ID) != run_id or a.get(names.ATTR_STAGE_ID) != stage_id:
        # Snapshot events may carry the ids when the span does not (a foreign producer).
        if any(e.name == names.SNAPSHOT_EVENT for e in span.events):
            return SpanRole.LATE
        return SpanRole.OTHER
    state = a.get(names.ATTR_STAGE_STATE)
    if state == names.STAGE_STATE_ENDED:
        return SpanRole.END
    if state == names.STAGE_STATE_STARTED:
        # A stage span exported without its end state (old producers) still ended.
        return SpanRole.START if span.name == names.STAGE_START_SPAN else SpanRole.END
    if a.get(names.ATTR_LATE) or span.name == names.LATE_SNAPSHOT_SPAN:
        return SpanRole.LATE
    return SpanRole.CALL


# The attributes `stage_pairs`, `role_of` and `RunsFold` read: an index decodes only these.
ROUTING_KEYS = frozenset({names.ATTR_RUN_ID, names.ATTR_STAGE_ID})
INDEX_KEYS = ROUTING_KEYS | {names.ATTR_STAGE_STATE, names.ATTR_STAGE_KIND, names.ATTR_LATE, names.ATTR_PARENT_STAGE_ID}


def stage_pairs(span: Span) -> set[tuple[str, str]]:
    """Every (run_id, stage_id) whose `StageFold` this span can change (any other fold ignores it)."""
    a = span.attributes
    run_id, stage_id = a.get(names.ATTR_RUN_ID), a.get(names.ATTR_STAGE_ID)
    out = set()
    if isinstance(run_id, str) and isinstance(stage_id, str):
        out.add((run_id, stage_id))
    for event in span.events:
        if event.name == names.SNAPSHOT_EVENT:
            ea = event.attributes
            er, es = ea.get(names.ATTR_RUN_ID, run_id), ea.get(names.ATTR_STAGE_ID, stage_id)
            if isinstance(er, str) and isinstance(es, str):
                out.add((er, es))
    return out


def _activity_ns(span: Span) -> int:
    """The latest sign of life a span gives: its end, its start, or its newest event."""
    return max([span.end_ns, span.start_ns, *(e.time_ns for e in span.events)])


# ---------------------------------------------------------------- one stage


class StageFold:
    """Accumulates the spans of one (run_id, stage_id), newest first, into its answer.

    Feed spans newest-to-oldest (reverse export order). The newest START marker or
    END (stage span) decides staleness: the marker is exported when the stage
    begins and the stage span when it ends, so a START newer than any END is a stage
    still running. CALL spans do not decide it: a stream consumed after its stage
    ended exports its call span after the stage span. Only for a producer that
    writes no markers (or calls outside any stage) does a CALL mean "live". A live
    stage that has been quiet past the horizon reads as stored (module docstring).
    `done` says when older spans can no longer change the answer.
    """

    # Clock skew tolerated between writers before older spans are ignored.
    SLACK_NS = 5_000_000_000

    def __init__(self, run_id: str, stage_id: str, horizon: Optional[Horizon] = None) -> None:
        self.run_id, self.stage_id = run_id, stage_id
        self.horizon = horizon or Horizon()
        self._best_writer = ""
        self.seen = False
        self.state: Optional[str] = None  # "live" | "stored"
        self.kind: Optional[str] = None
        self.best: Optional[SnapshotRecord] = None
        self.started_marker_seen = False
        self.call_seen = False
        self.last_activity_ns = 0
        self._older_than_best = False

    def add(self, span: Span, records: Optional[list[SnapshotRecord]] = None) -> None:
        """``records``: the span's snapshot records of this stage, where the caller has them (a shared pass)."""
        role = role_of(span, self.run_id, self.stage_id)
        if role == SpanRole.OTHER:
            return
        if records is None:
            records = snapshot_records(span, self.run_id, self.stage_id)
        if role == SpanRole.LATE and all(r.window is None for r in records):
            return  # a late snapshot's carrier says nothing without a readable snapshot
        self.seen = True
        self.last_activity_ns = max(self.last_activity_ns, _activity_ns(span))
        if self.kind is None and isinstance(span.attributes.get(names.ATTR_STAGE_KIND), str):
            self.kind = span.attributes[names.ATTR_STAGE_KIND]
        if self.state is None and role in (SpanRole.START, SpanRole.END):
            self.state = "stored" if role == SpanRole.END else "live"
        self.call_seen |= role == SpanRole.CALL
        if role == SpanRole.START:
            self.started_marker_seen = True
        for record in records:
            if (self.best is None or record.order > self.best.order) and record.window is not None:
                self.best, self._best_writer = record, span.writer
        if self.best is not None and span.end_ns:
            # A span's events happen before it ends, and one writer exports spans in the order
            # they end: once a span of the best snapshot's writer ended before that snapshot,
            # nothing older from that writer can beat it. Other writers get a clock-skew margin.
            same_writer = bool(span.writer) and span.writer == self._best_writer
            margin = 0 if same_writer else self.SLACK_NS
            if span.end_ns < self.best.event_time_ns - margin:
                self._older_than_best = True

    @property
    def done(self) -> bool:
        """True when older spans cannot change the answer (used by readers that scan backwards)."""
        if self.state is None or self.kind is None or self.best is None:
            # Without a snapshot yet, older lines may hold the stage's model calls whatever its kind
            # (a label), or those of an earlier entry: only all of them tell a stage without a call.
            return False
        return self._older_than_best or self.started_marker_seen

    def result(self) -> Optional[StageContextWindow]:
        """The answer, or None when no span names this stage."""
        if not self.seen:
            return None
        state = self.state or ("live" if self.call_seen else None)
        aged_out = state != "stored" and self.horizon.expired(self.last_activity_ns)
        staleness = Staleness.STORED if state == "stored" or aged_out else Staleness.LIVE
        stored = self.best.window if self.best is not None else None
        if stored is not None:
            update: dict[str, Any] = {"staleness": staleness}
            if aged_out:
                codes = [WarningCode.STAGE_END_NOT_SEEN.value]
                update["warnings"] = [*stored.warnings, *codec.warnings_from_codes(codes)]
            return stored.model_copy(update=update)
        if self.kind is not None and self.kind != names.AGENT_STAGE_KIND and not self.call_seen:
            # No model call: what `not_agent_stage` means. A kind says nothing about calls, so a
            # stage of any kind that made one has its breakdown, or reads as not observed.
            return StageContextWindow.unavailable(
                self.stage_id, UnavailableReason.NOT_AGENT_STAGE, codec.warnings_from_codes([WarningCode.NOT_AGENT_STAGE.value])
            )
        return StageContextWindow.unavailable(
            self.stage_id, UnavailableReason.NOT_OBSERVED, codec.warnings_from_codes([WarningCode.NOT_OBSERVED.value])
        )


# ---------------------------------------------------------------- one stage over time

DEFAULT_HISTORY = 100  # points a history answers by default
MAX_HISTORY = 10_000


class HistoryFold:
    """Accumulates the spans of one stage (any order) into its history: one point per call, oldest first.

    A call publishes several snapshots (its local estimate, its response usage, maybe a provider
    count, that last one sometimes on a late span): grouped by the call id the writer puts on
    each (the call span's id; a producer without it: the span that carries the event), the
    call's newest one stands for it. Only the newest ``limit`` calls are kept.
    """

    def __init__(self, run_id: str, stage_id: str, limit: int = DEFAULT_HISTORY) -> None:
        self.run_id, self.stage_id, self.limit = run_id, stage_id, limit
        self._calls: dict[str, SnapshotRecord] = {}
        self.seen = False

    def add(self, span: Span, records: Optional[list[SnapshotRecord]] = None) -> None:
        if records is None:
            records = snapshot_records(span, self.run_id, self.stage_id)
        if role_of(span, self.run_id, self.stage_id) != SpanRole.OTHER:
            self.seen = True
        for record in records:
            call = record.attributes.get(names.ATTR_CALL_ID) or f"{span.writer}/{span.span_id}"
            best = self._calls.get(call)
            if (best is None or record.order > best.order) and record.window is not None:
                self._calls[call] = record
        if len(self._calls) > 4 * self.limit + 64:  # memory follows the answer, not the stage
            self._trim()

    def _trim(self) -> None:
        keep = sorted(self._calls.items(), key=lambda kv: kv[1].order)[-self.limit :]
        self._calls = dict(keep)

    def result(self) -> list[HistoryPoint]:
        records = sorted(self._calls.values(), key=lambda r: r.order)[-self.limit :]
        return [point(r.window) for r in records if r.window is not None]


def point(window: StageContextWindow) -> HistoryPoint:
    """A history point from one call's answer."""
    return HistoryPoint(
        event_seq=window.event_seq,
        generated_at=window.generated_at,
        count_method=window.count_method,
        model=window.model,
        context_window_tokens=window.context_window_tokens,
        input_tokens=window.input_tokens or 0,
        usage_percent=window.usage_percent,
        cached_tokens=window.cached_tokens,
        input_cost=window.cost.input_cost if window.cost is not None else None,
        cost_by_category=dict(window.cost.by_category) if window.cost is not None else {},
        breakdown=window.breakdown,
        compaction=window.compaction,
    )


def fold_history(spans: Iterable[Span], run_id: str, stage_id: str, limit: int = DEFAULT_HISTORY) -> Optional[list[HistoryPoint]]:
    """A stage's history from its spans (any order); None when no span names the stage."""
    fold = HistoryFold(run_id, stage_id, limit)
    for span in spans:
        fold.add(span)
    return fold.result() if fold.seen else None


# ---------------------------------------------------------------- one run, all runs


class Missing(Enum):
    """What a backend holds none of, when it has no answer for (run_id, stage_id): `Reader` says which in its NotFound."""

    RUN = "run"
    STAGE = "stage"  # the run is known, the stage is not


def _iso(moment: Optional[datetime]) -> Optional[str]:
    return moment.isoformat() if moment else None


@dataclass
class StageSummary:
    """One stage of a run, as a listing shows it."""

    stage_id: str
    kind: Optional[str]
    staleness: Staleness  # live | stored
    started_at: Optional[datetime] = None
    last_seen_at: Optional[datetime] = None
    parent_stage_id: Optional[str] = None  # a sub-agent's stage: the stage of the run it was started from

    def as_dict(self) -> dict[str, Any]:
        return {
            "stage_id": self.stage_id,
            "parent_stage_id": self.parent_stage_id,
            "kind": self.kind,
            "agent_stage": self.kind == names.AGENT_STAGE_KIND if self.kind else None,
            "staleness": self.staleness.value,
            "started_at": _iso(self.started_at),
            "last_seen_at": _iso(self.last_seen_at),
        }


@dataclass
class RunSummary:
    """One run, as the list of runs shows it."""

    run_id: str
    stages: int
    live_stages: int
    first_seen_at: Optional[datetime] = None
    last_seen_at: Optional[datetime] = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "stages": self.stages,
            "live_stages": self.live_stages,
            "first_seen_at": _iso(self.first_seen_at),
            "last_seen_at": _iso(self.last_seen_at),
        }


@dataclass
class StageState:
    """What a run listing keeps of one stage while folding; merging two in export order is the fold of both."""

    kind: Optional[str] = None
    state: Optional[Staleness] = None  # from markers and stage spans only
    first_ns: int = 0
    last_ns: int = 0
    parent: Optional[str] = None  # the stage it was started from (the first one a span names)

    def touch(
        self, kind: Optional[str], state: Optional[Staleness], start_ns: int, last_ns: int, parent: Optional[str] = None
    ) -> None:
        if kind and not self.kind:
            self.kind = kind
        if parent and not self.parent:
            self.parent = parent
        if state is not None:
            self.state = state  # oldest-first: the last record wins
        if start_ns and (not self.first_ns or start_ns < self.first_ns):
            self.first_ns = start_ns
        self.last_ns = max(self.last_ns, last_ns)

    def merge(self, later: StageState) -> None:
        """Fold in what spans exported after this state's spans said (an index adds a file piece by piece)."""
        self.touch(later.kind, later.state, later.first_ns, later.last_ns, later.parent)

    def summary(self, stage_id: str, horizon: Horizon) -> StageSummary:
        live = self.state is not Staleness.STORED and not horizon.expired(self.last_ns)
        staleness = Staleness.LIVE if live else Staleness.STORED
        first, last = codec.from_ns(self.first_ns), codec.from_ns(self.last_ns)
        return StageSummary(stage_id, self.kind, staleness, first, last, self.parent)


def summarize_stages(states: Iterable[tuple[str, StageState]], horizon: Horizon) -> Optional[list[StageSummary]]:
    """A run's stage listing from its stages' states; None when it has none."""
    out = [st.summary(stage_id, horizon) for stage_id, st in states]
    if not out:
        return None
    return sorted(out, key=lambda s: (s.started_at or datetime.max.replace(tzinfo=UTC), s.stage_id))


def summarize_runs(states: Iterable[tuple[str, str, StageState]], horizon: Horizon) -> list[RunSummary]:
    """The list of runs from (run_id, stage_id, state) rows in any order; memory grows with the runs, not the rows."""
    runs: dict[str, RunSummary] = {}
    for run_id, stage_id, st in states:
        s = st.summary(stage_id, horizon)
        run = runs.get(run_id)
        if run is None:
            run = runs[run_id] = RunSummary(run_id, stages=0, live_stages=0)
        run.stages += 1
        run.live_stages += s.staleness is Staleness.LIVE
        if s.started_at and (run.first_seen_at is None or s.started_at < run.first_seen_at):
            run.first_seen_at = s.started_at
        if s.last_seen_at and (run.last_seen_at is None or s.last_seen_at > run.last_seen_at):
            run.last_seen_at = s.last_seen_at
    out = list(runs.values())
    # Newest activity first: the run a user is looking for is usually the latest.
    return sorted(out, key=lambda r: (r.last_seen_at or datetime.min.replace(tzinfo=UTC), r.run_id), reverse=True)


class RunFold:
    """Accumulates spans oldest-first into the list of a run's stages."""

    def __init__(self, run_id: str, horizon: Optional[Horizon] = None) -> None:
        self.run_id = run_id
        self.horizon = horizon or Horizon()
        self._stages: dict[str, StageState] = {}

    def add(self, span: Span) -> None:
        a = span.attributes
        stage_id = a.get(names.ATTR_STAGE_ID)
        if a.get(names.ATTR_RUN_ID) != self.run_id or not isinstance(stage_id, str):
            for event in span.events:  # ids only on the events (a foreign producer)
                ea = event.attributes
                if (
                    event.name == names.SNAPSHOT_EVENT
                    and ea.get(names.ATTR_RUN_ID) == self.run_id
                    and isinstance(ea.get(names.ATTR_STAGE_ID), str)
                ):
                    self._touch(ea[names.ATTR_STAGE_ID], None, None, event.time_ns, event.time_ns)
            return
        role = role_of(span, self.run_id, stage_id)
        # Markers and stage spans decide staleness (see StageFold); a call span only names the stage.
        state = {SpanRole.END: Staleness.STORED, SpanRole.START: Staleness.LIVE}.get(role)
        kind = a.get(names.ATTR_STAGE_KIND) if isinstance(a.get(names.ATTR_STAGE_KIND), str) else None
        parent = a.get(names.ATTR_PARENT_STAGE_ID) if isinstance(a.get(names.ATTR_PARENT_STAGE_ID), str) else None
        self._touch(stage_id, kind, state, span.start_ns, _activity_ns(span), parent)

    def _touch(
        self,
        stage_id: str,
        kind: Optional[str],
        state: Optional[Staleness],
        start_ns: int,
        last_ns: int,
        parent: Optional[str] = None,
    ) -> None:
        self._stages.setdefault(stage_id, StageState()).touch(kind, state, start_ns, last_ns, parent)

    def states(self) -> dict[str, StageState]:
        """The stages folded so far, by stage id."""
        return self._stages

    def result(self) -> Optional[list[StageSummary]]:
        return summarize_stages(self._stages.items(), self.horizon)


class RunsFold:
    """Accumulates spans oldest-first into the list of every run a backend holds."""

    def __init__(self, horizon: Optional[Horizon] = None) -> None:
        self.horizon = horizon or Horizon()
        self._runs: dict[str, RunFold] = {}

    def add(self, span: Span) -> None:
        run_ids = {span.attributes.get(names.ATTR_RUN_ID)}
        run_ids.update(e.attributes.get(names.ATTR_RUN_ID) for e in span.events if e.name == names.SNAPSHOT_EVENT)
        for run_id in run_ids:
            if isinstance(run_id, str) and run_id:
                fold = self._runs.get(run_id)
                if fold is None:
                    fold = self._runs[run_id] = RunFold(run_id, self.horizon)
                fold.add(span)

    def states(self) -> Iterator[tuple[str, str, StageState]]:
        """(run_id, stage_id, state) for every stage folded so far."""
        for run_id, fold in self._runs.items():
            for stage_id, st in fold.states().items():
                yield run_id, stage_id, st

    def result(self) -> list[RunSummary]:
        return summarize_runs(self.states(), self.horizon)


def fold_stage(
    spans: Iterable[Span], run_id: str, stage_id: str, horizon: Optional[Horizon] = None
) -> Optional[StageContextWindow]:
    """The answer for one stage from spans in export order (oldest first)."""
    fold = StageFold(run_id, stage_id, horizon)
    for span in reversed(list(spans)):
        fold.add(span)
    return fold.result()


def fold_run(spans: Iterable[Span], run_id: str, horizon: Optional[Horizon] = None) -> Optional[list[StageSummary]]:
    """The run's stages from spans in export order (oldest first); None for an unknown run."""
    fold = RunFold(run_id, horizon)
    for span in spans:
        fold.add(span)
    return fold.result()


def fold_runs(spans: Iterable[Span], horizon: Optional[Horizon] = None) -> list[RunSummary]:
    """Every run named by the spans (export order), newest activity first."""
    fold = RunsFold(horizon)
    for span in spans:
        fold.add(span)
    return fold.result()
