"""One tolerant OTLP-JSON decoder for every reader that sees spans (file, Jaeger, Tempo).

Accepted shapes, as real backends write them:
- top level ``resourceSpans`` | ``batches`` (Tempo v1) | ``result.resourceSpans`` (Jaeger api_v3)
  | ``trace.resourceSpans`` (Tempo v2) | ``resource_spans``;
- ``scopeSpans`` or the legacy ``instrumentationLibrarySpans`` (and snake_case forms);
- ids in hex or base64; int64 as a string or a number; enums as ints or names;
  AnyValue keys camelCase or snake_case.

On top of the decoder sits `StageFold`: the rules that turn the spans of one
(run_id, stage_id) into a `StageContextWindow`. Telemetry keys come from
``cw_middleware.telemetry`` (the producer's contract), never retyped here.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Optional

from .. import telemetry as keys
from ..contract import (
    CATEGORIES,
    BreakdownItem,
    Category,
    CountMethod,
    DetailItem,
    SnapshotWarning,
    StageContextWindow,
    Staleness,
    UnavailableReason,
    WarningCode,
)

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


def _int(value: Any) -> int:
    if value is None or value == "":
        return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        pass
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        return 0  # a damaged value must not fail the whole query


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


# ---------------------------------------------------------------- snapshots from attributes


def _parse_time(value: Any, fallback_ns: int) -> datetime:
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
        except ValueError:
            pass
    return _from_ns(fallback_ns) or datetime.fromtimestamp(0, tz=UTC)


def _from_ns(time_ns: int) -> Optional[datetime]:
    """A timestamp from nanoseconds; None for a value no datetime can hold (a damaged line)."""
    try:
        return datetime.fromtimestamp(time_ns / 1e9, tz=UTC) if time_ns else None
    except (OverflowError, ValueError, OSError):
        return None


def _percent(tokens: int, window: Optional[int]) -> Optional[float]:
    # The producer's rounding (snapshot._percent), so a read-back equals what was emitted.
    return round(100.0 * tokens / window, 4) if window else None


def _warnings(codes: Any) -> list[SnapshotWarning]:
    from ..snapshot import WARNING_MESSAGES

    out = []
    for code in codes if isinstance(codes, list) else []:
        if not isinstance(code, str):
            continue
        try:
            message = WARNING_MESSAGES[WarningCode(code)]
        except (ValueError, KeyError):
            message = "reported by the producer"
        out.append(SnapshotWarning(code=code, message=message))
    return out


@dataclass(frozen=True)
class SnapshotRecord:
    """One snapshot event as read back; ordered by (generated_at, event_seq, event time)."""

    order: tuple[float, int, int]
    attributes: dict[str, Any]
    event_time_ns: int

    def to_window(self, stage_id: str, staleness: Staleness) -> StageContextWindow:
        a = self.attributes
        window = a.get(keys.ATTR_LIMIT_TOKENS)
        window = int(window) if isinstance(window, (int, float)) and window > 0 else None
        breakdown = []
        for category in CATEGORIES:
            tokens = _int(a.get(keys.TOKENS_PREFIX + category.value, 0))
            breakdown.append(BreakdownItem(category=category, tokens=tokens, usage_percent=_percent(tokens, window)))
        input_tokens = a.get(keys.ATTR_INPUT_TOKENS)
        input_tokens = _int(input_tokens) if input_tokens is not None else sum(b.tokens for b in breakdown)
        details = []
        cats, sources, toks = (
            a.get(k) or [] for k in (keys.ATTR_DETAIL_CATEGORIES, keys.ATTR_DETAIL_SOURCES, keys.ATTR_DETAIL_TOKENS)
        )
        for cat, source, tokens in zip(cats, sources, toks, strict=False):
            try:
                details.append(DetailItem(category=Category(cat), source=str(source), tokens=_int(tokens)))
            except ValueError:
                continue
        method = a.get(keys.ATTR_COUNT_METHOD)
        try:
            count_method: Optional[CountMethod] = CountMethod(str(method))
        except ValueError:
            count_method = None
        seq = a.get(keys.ATTR_EVENT_SEQ)
        return StageContextWindow(
            stage_id=stage_id,
            available=True,
            provider=a.get(keys.ATTR_PROVIDER),
            model=a.get(keys.ATTR_MODEL),
            context_window_tokens=window,
            input_tokens=input_tokens,
            usage_percent=_percent(input_tokens, window),
            count_method=count_method,
            staleness=staleness,
            generated_at=_parse_time(a.get(keys.ATTR_GENERATED_AT), self.event_time_ns),
            event_seq=_int(seq) if seq is not None else None,
            breakdown=breakdown,
            warnings=_warnings(a.get(keys.ATTR_WARNINGS)),
            details=details,
        )


def snapshot_records(span: Span, run_id: str, stage_id: str) -> list[SnapshotRecord]:
    out = []
    for event in span.events:
        if event.name != keys.SNAPSHOT_EVENT:
            continue
        a = event.attributes
        if a.get(keys.ATTR_SUPERSEDED):  # an older call's late count: kept in the backend, never the latest
            continue
        if a.get(keys.ATTR_RUN_ID, span.attributes.get(keys.ATTR_RUN_ID)) != run_id:
            continue
        if a.get(keys.ATTR_STAGE_ID, span.attributes.get(keys.ATTR_STAGE_ID)) != stage_id:
            continue
        generated = _parse_time(a.get(keys.ATTR_GENERATED_AT), event.time_ns).timestamp()
        record = SnapshotRecord((generated, _int(a.get(keys.ATTR_EVENT_SEQ)), event.time_ns), a, event.time_ns)
        try:
            record.to_window(stage_id, Staleness.STORED)  # a damaged snapshot is skipped, not fatal
        except Exception:  # noqa: BLE001 - whatever a foreign or broken producer wrote
            continue
        out.append(record)
    return out


# ---------------------------------------------------------------- folding one stage


class SpanRole:
    START = "start"  # the stage's zero-duration marker span: the stage began
    END = "end"  # the stage span itself, exported when the stage ended
    CALL = "call"  # an LLM call span inside the stage (ends before the stage does)
    LATE = "late"  # a late snapshot's carrier span (may outlive the stage)
    OTHER = "other"


def role_of(span: Span, run_id: str, stage_id: str) -> str:
    a = span.attributes
    if a.get(keys.ATTR_RUN_ID) != run_id or a.get(keys.ATTR_STAGE_ID) != stage_id:
        # Snapshot events may carry the ids when the span does not (a foreign producer).
        if any(e.name == keys.SNAPSHOT_EVENT for e in span.events):
            return SpanRole.LATE
        return SpanRole.OTHER
    state = a.get(keys.ATTR_STAGE_STATE)
    if state == keys.STAGE_STATE_ENDED:
        return SpanRole.END
    if state == keys.STAGE_STATE_STARTED:
        # A stage span exported without its end state (old producers) still ended.
        return SpanRole.START if span.name == keys.STAGE_START_SPAN else SpanRole.END
    if a.get(keys.ATTR_LATE) or span.name == keys.LATE_SNAPSHOT_SPAN:
        return SpanRole.LATE
    return SpanRole.CALL


class StageFold:
    """Accumulates the spans of one (run_id, stage_id), newest first, into its answer.

    Feed spans newest-to-oldest (reverse export order). The newest START marker or
    END (stage span) decides staleness: the marker is exported when the stage
    begins and the stage span when it ends, so a START newer than any END is a stage
    still running. CALL spans do not decide it: a stream consumed after its stage
    ended exports its call span after the stage span. Only for a producer that
    writes no markers does a CALL mean "live". `done` says when older spans can no
    longer change the answer.
    """

    # Clock skew tolerated between writers before older spans are ignored.
    SLACK_NS = 5_000_000_000

    def __init__(self, run_id: str, stage_id: str) -> None:
        self.run_id, self.stage_id = run_id, stage_id
        self._best_writer = ""
        self.seen = False
        self.state: Optional[str] = None  # "live" | "stored"
        self.kind: Optional[str] = None
        self.best: Optional[SnapshotRecord] = None
        self.started_marker_seen = False
        self.call_seen = False
        self._older_than_best = False

    def add(self, span: Span) -> None:
        role = role_of(span, self.run_id, self.stage_id)
        if role == SpanRole.OTHER:
            return
        records = snapshot_records(span, self.run_id, self.stage_id)
        if role == SpanRole.LATE and not records:
            return
        self.seen = True
        if self.kind is None and isinstance(span.attributes.get(keys.ATTR_STAGE_KIND), str):
            self.kind = span.attributes[keys.ATTR_STAGE_KIND]
        if self.state is None and role in (SpanRole.START, SpanRole.END):
            self.state = "stored" if role == SpanRole.END else "live"
        self.call_seen |= role == SpanRole.CALL
        if role == SpanRole.START:
            self.started_marker_seen = True
        for record in records:
            if self.best is None or record.order > self.best.order:
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
        if self.state is None or self.kind is None:
            return False
        if self.best is not None:
            return self._older_than_best or self.started_marker_seen
        # No snapshot yet: an agent stage entered again may have one from an earlier entry.
        return self.kind != keys.AGENT_STAGE_KIND

    def result(self) -> Optional[StageContextWindow]:
        """The answer, or None when no span names this stage."""
        if not self.seen:
            return None
        state = self.state or ("live" if self.call_seen else None)
        staleness = Staleness.STORED if state == "stored" else Staleness.LIVE
        if self.best is not None:
            return self.best.to_window(self.stage_id, staleness)
        if self.kind is not None and self.kind != keys.AGENT_STAGE_KIND:
            return StageContextWindow.unavailable(
                self.stage_id, UnavailableReason.NOT_AGENT_STAGE, _warnings([WarningCode.NOT_AGENT_STAGE.value])
            )
        return StageContextWindow.unavailable(
            self.stage_id, UnavailableReason.NOT_OBSERVED, _warnings([WarningCode.NOT_OBSERVED.value])
        )


@dataclass
class StageSummary:
    """One stage of a run, as a listing shows it."""

    stage_id: str
    kind: Optional[str]
    staleness: Staleness  # live | stored
    started_at: Optional[datetime] = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "stage_id": self.stage_id,
            "kind": self.kind,
            "agent_stage": self.kind == keys.AGENT_STAGE_KIND if self.kind else None,
            "staleness": self.staleness.value,
            "started_at": self.started_at.isoformat() if self.started_at else None,
        }


class RunFold:
    """Accumulates spans oldest-first into the list of a run's stages."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._stages: dict[str, StageSummary] = {}

    def add(self, span: Span) -> None:
        a = span.attributes
        stage_id = a.get(keys.ATTR_STAGE_ID)
        if a.get(keys.ATTR_RUN_ID) != self.run_id or not isinstance(stage_id, str):
            for event in span.events:  # ids only on the events (a foreign producer)
                ea = event.attributes
                if (
                    event.name == keys.SNAPSHOT_EVENT
                    and ea.get(keys.ATTR_RUN_ID) == self.run_id
                    and isinstance(ea.get(keys.ATTR_STAGE_ID), str)
                ):
                    self._touch(ea[keys.ATTR_STAGE_ID], None, None, event.time_ns)
            return
        role = role_of(span, self.run_id, stage_id)
        # Markers and stage spans decide staleness (see StageFold); a call span only names the stage.
        state = {SpanRole.END: Staleness.STORED, SpanRole.START: Staleness.LIVE}.get(role)
        kind = a.get(keys.ATTR_STAGE_KIND) if isinstance(a.get(keys.ATTR_STAGE_KIND), str) else None
        self._touch(stage_id, kind, state, span.start_ns)

    def _touch(self, stage_id: str, kind: Optional[str], state: Optional[Staleness], time_ns: int) -> None:
        started = _from_ns(time_ns)
        summary = self._stages.get(stage_id)
        if summary is None:
            summary = self._stages[stage_id] = StageSummary(stage_id, kind, state or Staleness.LIVE, started)
        if kind and not summary.kind:
            summary.kind = kind
        if state is not None:
            summary.staleness = state  # oldest-first: the last record wins
        if started and (summary.started_at is None or started < summary.started_at):
            summary.started_at = started

    def result(self) -> Optional[list[StageSummary]]:
        if not self._stages:
            return None
        return sorted(self._stages.values(), key=lambda s: (s.started_at or datetime.max.replace(tzinfo=UTC), s.stage_id))


def fold_stage(spans: Iterable[Span], run_id: str, stage_id: str) -> Optional[StageContextWindow]:
    """The answer for one stage from spans in export order (oldest first)."""
    fold = StageFold(run_id, stage_id)
    for span in reversed(list(spans)):
        fold.add(span)
    return fold.result()


def fold_run(spans: Iterable[Span], run_id: str) -> Optional[list[StageSummary]]:
    fold = RunFold(run_id)
    for span in spans:
        fold.add(span)
    return fold.result()
