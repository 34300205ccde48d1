"""Telemetry out: one span per LLM call, snapshots as span events, and metrics.

Only the OpenTelemetry *API* is used here; which SDK (if any) receives the data
is decided by the application or by ``_embedded/`` (see ``_capture/providers.py``).
Attribute keys and metric names are a contract with dashboards and readers: they
live in ``_kernel/names.py``, which the readers share.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Optional

from opentelemetry import metrics, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from .._kernel.codec import Flat, exportable, exportable_text, snapshot_attributes, span_level
from .._kernel.config import Config
from .._kernel.contract import CATEGORIES, Category, Forecast, Snapshot, StageInfo
from .._kernel.names import (
    ATTR_CALL_ID,
    ATTR_CATEGORY,
    ATTR_COUNT_METHOD,
    ATTR_LATE,
    ATTR_PARENT_STAGE_ID,
    ATTR_RUN_ID,
    ATTR_SCHEMA,
    ATTR_STAGE_ID,
    ATTR_STAGE_KIND,
    ATTR_STAGE_STATE,
    ATTR_SUPERSEDED,
    DURATION_HISTOGRAM_BOUNDARIES,
    ERROR_TYPE,
    GEN_AI_CACHE_CREATION,
    GEN_AI_CACHE_READ,
    GEN_AI_CACHE_WRITE,
    GEN_AI_CONTEXT_UTILIZATION,
    GEN_AI_CONTEXT_WINDOW_SIZE,
    GEN_AI_CONVERSATION_COMPACTED,
    GEN_AI_FINISH_REASONS,
    GEN_AI_INPUT_TOKENS,
    GEN_AI_OPERATION,
    GEN_AI_OUTPUT_TOKENS,
    GEN_AI_PROVIDER,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_REQUEST_STREAM,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_TOKEN_TYPE,
    LANGFUSE_USAGE_DETAILS,
    LATE_SNAPSHOT_SPAN,
    METRIC_COUNT_FAILURES,
    METRIC_OPERATION_DURATION,
    METRIC_TOKEN_USAGE,
    SCHEMA_VERSION,
    SERVICE_NAME,
    SNAPSHOT_EVENT,
    STAGE_SPAN_PREFIX,
    STAGE_START_SPAN,
    STAGE_STATE_ENDED,
    STAGE_STATE_STARTED,
    TOKEN_HISTOGRAM_BOUNDARIES,
)
from .observed import instruments_of

if TYPE_CHECKING:
    from .._embedded.records import OwnEvents

logger = logging.getLogger("cw_middleware")

# The stage's forecast, made only for the snapshot the gauges show (`Telemetry.set_gauges`).
ForecastOf = Callable[[], Optional[Forecast]]
# (series key, common metric attributes, per-category attributes, the snapshot counter's per count method, filled
# as methods are seen): see `Telemetry._attributes`.
_Attributes = tuple[tuple[Any, ...], dict[str, Any], list[tuple[Category, dict[str, Any]]], dict[str, dict[str, Any]]]


class Telemetry:
    """Tracer, meter and instruments, created once per Runtime (the observable instruments once per meter provider)."""

    def __init__(
        self,
        config: Config,
        tracer_provider: Optional[trace.TracerProvider] = None,
        meter_provider: Optional[metrics.MeterProvider] = None,
        logger_provider: Any = None,
        own_events: Any = None,
    ) -> None:
        self.config = config
        # The embedded file pipeline's span processor, when cw's spans go there and nowhere else: the snapshot events
        # go to it with their span's end (`CompactSpanProcessor.end_with`), not through the SDK's add_event.
        self.own_events = own_events
        self._attribute_cache: dict[Any, _Attributes] = {}
        self.tracer = trace.get_tracer("cw_middleware", tracer_provider=tracer_provider)
        # Optional log-based events (OTEP 4430): the same attributes, event_name = SNAPSHOT_EVENT.
        self.event_logger = None
        if config.log_events:
            from opentelemetry import _logs

            self.event_logger = _logs.get_logger("cw_middleware", logger_provider=logger_provider)
        meter = metrics.get_meter("cw_middleware", meter_provider=meter_provider)
        # The context-window numbers change at every call's end and are read once a collection: observable
        # instruments read them from stores when the SDK collects, one set per meter provider (observed.py).
        self.observed = instruments_of(meter_provider, meter)
        self.count_failures = meter.create_counter(
            METRIC_COUNT_FAILURES,
            unit="{failure}",
            description="Provider token counts that failed or timed out",
        )
        self.token_usage = meter.create_histogram(
            METRIC_TOKEN_USAGE,
            unit="{token}",
            description="Tokens used per call (GenAI semantic conventions)",
            explicit_bucket_boundaries_advisory=TOKEN_HISTOGRAM_BOUNDARIES,
        )
        self.operation_duration = meter.create_histogram(
            METRIC_OPERATION_DURATION,
            unit="s",
            description="Duration of a call from its start to its end (GenAI semantic conventions)",
            explicit_bucket_boundaries_advisory=DURATION_HISTOGRAM_BOUNDARIES,
        )

    @contextmanager
    def stage_span(self, stage: StageInfo) -> Iterator[trace.Span]:
        """The stage span, announced at once by a marker span so live stages are visible."""
        attrs: dict[str, Any] = exportable(
            {
                ATTR_RUN_ID: stage.run_id,
                ATTR_STAGE_ID: stage.stage_id,
                ATTR_STAGE_KIND: stage.kind,
                ATTR_SCHEMA: SCHEMA_VERSION,
                ATTR_STAGE_STATE: STAGE_STATE_STARTED,
                **({ATTR_PARENT_STAGE_ID: stage.parent_stage_id} if stage.parent_stage_id else {}),
            }
        )
        # Exceptions are not recorded: their messages may quote prompts or provider error bodies.
        with self.tracer.start_as_current_span(
            f"{STAGE_SPAN_PREFIX} {attrs[ATTR_STAGE_KIND]}",
            kind=SpanKind.INTERNAL,
            attributes=attrs,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                marker = self.tracer.start_span(STAGE_START_SPAN, kind=SpanKind.INTERNAL, attributes=attrs)
                marker.end()
            except Exception:  # noqa: BLE001 - telemetry never breaks the stage
                logger.debug("cw_middleware: could not emit the stage marker", exc_info=False)
            try:
                yield span
            except BaseException as exc:
                span.set_attribute(ERROR_TYPE, type(exc).__qualname__)
                span.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
                raise
            finally:
                span.set_attribute(ATTR_STAGE_STATE, STAGE_STATE_ENDED)

    def start_call(
        self, operation: str, provider: Optional[str], model: Optional[str], stage: Optional[StageInfo]
    ) -> CallTelemetry:
        attrs: dict[str, Any] = {GEN_AI_OPERATION: operation}
        if provider:
            attrs[GEN_AI_PROVIDER] = provider
        if model:
            attrs[GEN_AI_REQUEST_MODEL] = model
        if stage is not None:
            attrs[ATTR_RUN_ID] = stage.run_id
            attrs[ATTR_STAGE_ID] = stage.stage_id
            attrs[ATTR_STAGE_KIND] = stage.kind
            if stage.parent_stage_id:
                attrs[ATTR_PARENT_STAGE_ID] = stage.parent_stage_id
        name = exportable_text(f"{operation} {model or ''}".strip())
        attrs = exportable(attrs)
        if self.own_events is not None:
            # Its record takes them with its end, as the snapshot events (`CallTelemetry.end`): checked here, once. (The
            # pipeline's sampler is one of the SDK's, which read no attributes: `_embedded/pipeline._kept_whole`.)
            span = self.tracer.start_span(name, kind=SpanKind.CLIENT)
            return CallTelemetry(self, span, provider, model, stage, operation, started=attrs)
        span = self.tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attrs)
        return CallTelemetry(self, span, provider, model, stage, operation)

    def metric_attributes(self, provider: Optional[str], model: Optional[str], stage: Optional[StageInfo]) -> dict[str, Any]:
        return dict(self._attributes(provider, model, stage)[1])

    def _attributes(self, provider: Optional[str], model: Optional[str], stage: Optional[StageInfo]) -> _Attributes:
        """(series key, common metric attributes, per-category and per-count-method ones), built once per model and stage.

        The key is the attribute set itself: one series in the stores (observed.py) per attribute set, whichever
        Telemetry of the process wrote it."""
        labelled = stage if self.config.metric_run_labels else None
        cache_key = (provider, model, labelled)
        cached = self._attribute_cache.get(cache_key)
        if cached is None:
            base = self._base_attributes(provider, model, stage)
            per_category = [(c, {**base, ATTR_CATEGORY: c.value}) for c in CATEGORIES]
            cached = (tuple(sorted(base.items())), base, per_category, {})
            if len(self._attribute_cache) >= 1024:
                self._attribute_cache.clear()
            self._attribute_cache[cache_key] = cached
        return cached

    def _base_attributes(self, provider: Optional[str], model: Optional[str], stage: Optional[StageInfo]) -> dict[str, Any]:
        attrs: dict[str, Any] = {SERVICE_NAME: self.config.service_name}
        if provider:
            attrs[GEN_AI_PROVIDER] = provider
        if model:
            attrs[GEN_AI_REQUEST_MODEL] = model
        if self.config.metric_run_labels and stage is not None:
            attrs[ATTR_RUN_ID] = stage.run_id
            attrs[ATTR_STAGE_ID] = stage.stage_id
        return exportable(attrs)

    def count_snapshot(self, snapshot: Snapshot, stage: Optional[StageInfo]) -> None:
        key, base, _, by_method = self._attributes(snapshot.provider, snapshot.model, stage)
        method = snapshot.count_method.value
        attributes = by_method.get(method)
        if attributes is None:  # a handful of methods: the entry stays small
            attributes = by_method[method] = {**base, ATTR_COUNT_METHOD: method}
        self.observed.snapshots.add((key, method), attributes, 1)

    def set_gauges(self, snapshot: Snapshot, stage: Optional[StageInfo], forecast_of: Optional[ForecastOf] = None) -> None:
        """The gauges as of ``snapshot``; ``forecast_of`` makes the stage's forecast (only where the gauges show it)."""
        key, base, per_category, _ = self._attributes(snapshot.provider, snapshot.model, stage)
        observed = self.observed
        forecast = forecast_of() if forecast_of is not None else None
        if forecast is not None:
            left = forecast.calls_until_threshold
            observed.calls_until_threshold.set(key, base, -1 if left is None else left)
        tokens = {item.category: item.tokens for item in snapshot.breakdown}
        for category, attrs in per_category:
            observed.tokens.set((key, category), attrs, tokens.get(category, 0))
        if snapshot.cached_tokens is not None:  # the response reported its cache
            cached = {item.category: item.cached_tokens or 0 for item in snapshot.breakdown}
            for category, attrs in per_category:
                observed.cached.set((key, category), attrs, cached.get(category, 0))
        if snapshot.context_window_tokens:
            observed.limit.set(key, base, snapshot.context_window_tokens)
            observed.utilization.set(key, base, snapshot.input_tokens / snapshot.context_window_tokens)
        observed.unused_tools.set(key, base, snapshot.unused_tool_tokens)

    def add_cost(self, snapshot: Snapshot, stage: Optional[StageInfo]) -> None:
        """A call's input cost, once, at its end (from its last snapshot): the counter sums calls, never snapshots."""
        cost = snapshot.cost
        if cost is None:
            return
        key, _, per_category, _ = self._attributes(snapshot.provider, snapshot.model, stage)
        for category, attrs in per_category:
            usd = cost.by_category.get(category)
            if usd:
                self.observed.cost.add((key, category), attrs, usd)


class CallTelemetry:
    """The span of one LLM call; snapshots land on it as events, or on a linked span once it ended."""

    # One a call: slots keep a queued call light (see _capture/call.py).
    __slots__ = (
        "_owner", "span", "_operation", "_recording", "_call_id", "_provider", "_model", "_stage", "_ended",
        "_gauges", "_forecast", "_mirrored", "_lock", "_started_ns", "_own", "_events", "_started",
    )  # fmt: skip

    def __init__(
        self,
        owner: Telemetry,
        span: trace.Span,
        provider: Optional[str],
        model: Optional[str],
        stage: Optional[StageInfo],
        operation: str = "chat",
        started: Optional[dict[str, Any]] = None,
    ):
        self._owner = owner
        self.span = span
        self._operation = operation
        # Known once, while the span is open (an ended SDK span says False): with no SDK behind the
        # tracer (telemetry off) the event attributes would go nowhere, so they are never built.
        self._recording = span.is_recording()
        self._call_id = format(span.get_span_context().span_id, "016x") if self._recording else ""
        self._provider = provider
        self._model = model
        self._stage = stage
        self._ended = False
        # Gauges hold last values: a call's earlier snapshots would be overwritten by its last one
        # within the same call, so they are set once, when the call ends (or at once if it has ended).
        self._gauges: Optional[Snapshot] = None
        self._forecast: Optional[ForecastOf] = None  # the stage's, as of the snapshot the gauges will show
        self._mirrored: Optional[dict[str, Any]] = None  # likewise the span-level copy of the latest snapshot
        # A provider count finishes on another thread: without the lock its event could
        # land on a span that is ending, where the SDK drops it.
        self._lock = threading.Lock()
        self._started_ns = time.time_ns()
        # The snapshot events, kept here until the span ends, where the owner's pipeline (as of the call's start)
        # takes them as they are.
        self._own = owner.own_events if self._recording else None
        self._events: Optional[OwnEvents] = [] if self._own is not None else None
        self._started = started  # the span's attributes at its start, when they go with its end (`Telemetry.start_call`)

    def record(
        self,
        snapshot: Snapshot,
        superseded: bool = False,
        at: Optional[int] = None,
        live: bool = False,
        forecast: Optional[ForecastOf] = None,
        flat: Optional[Flat] = None,
    ) -> None:
        """The snapshot as the call span's event (``at``: its time in ns, the call's end for one recorded later).

        ``live``: the call is still waiting for its provider. A span is exported only when it ends, so the
        event also goes out at once on a short carrier span of its own (the one a late snapshot rides on),
        which every reader reads as the same contract; a stage's answer shows the call while it runs, and
        a process that exits or is killed mid-call leaves it in the backend. The same event on the call
        span, when that ends, is one snapshot for the readers (the same call id and event seq). ``flat``: how
        the rows' arrays are made (`SnapshotParts.flat`: kept while the same rows come again)."""
        if not self._recording and self._owner.event_logger is None:
            with self._lock:
                on_span = not self._ended
                if on_span and not superseded:
                    self._gauges, self._forecast = snapshot, forecast
            self._owner.count_snapshot(snapshot, self._stage)
            if not on_span and not superseded:
                self._owner.set_gauges(snapshot, self._stage, forecast)
            return
        attrs = snapshot_attributes(snapshot, include_details=True, flat=flat)  # as the SDK holds them: arrays as tuples
        if self._call_id:
            attrs[ATTR_CALL_ID] = self._call_id
        if superseded:
            attrs[ATTR_SUPERSEDED] = True
        own = self._own
        with self._lock:
            on_span = not self._ended
            if on_span:
                if self._events is not None:
                    self._events.append((SNAPSHOT_EVENT, at if at is not None else time.time_ns(), attrs))
                else:
                    self.span.add_event(SNAPSHOT_EVENT, attributes=attrs, timestamp=at)
                if not superseded:
                    self._gauges, self._mirrored, self._forecast = snapshot, attrs, forecast
        if not on_span or live:
            # The call span is gone (a slow provider count), or still open for a while: a short span linked to it
            # carries the event now.
            late_attrs = span_level(attrs)
            late_attrs[ATTR_LATE] = True
            if self._stage is not None:
                late_attrs[ATTR_STAGE_KIND] = self._stage.kind
            late = self._owner.tracer.start_span(
                LATE_SNAPSHOT_SPAN,
                links=[Link(self.span.get_span_context())],
                attributes=late_attrs,
                context=trace.set_span_in_context(trace.NonRecordingSpan(self.span.get_span_context())),
            )
            if own is not None:
                own.end_with(late, [(SNAPSHOT_EVENT, at if at is not None else time.time_ns(), attrs)])
            else:
                late.add_event(SNAPSHOT_EVENT, attributes=attrs, timestamp=at)
                late.end()
        event_logger = self._owner.event_logger
        if event_logger is not None:
            # Correlated with the call span through the context, as a span event would be.
            event_logger.emit(
                event_name=SNAPSHOT_EVENT,
                attributes=attrs,
                context=trace.set_span_in_context(trace.NonRecordingSpan(self.span.get_span_context())),
            )
        self._owner.count_snapshot(snapshot, self._stage)
        if not on_span and not superseded:  # the gauges show the stage's newest request, not an older one's
            self._owner.set_gauges(snapshot, self._stage, forecast)

    def _context_attributes(self, last: Snapshot, output_tokens: Optional[int], into: dict[str, Any]) -> None:
        """The call's context window on its span, from its last snapshot: the names GenAI-aware backends read."""
        if last.context_window_tokens:
            into[GEN_AI_CONTEXT_WINDOW_SIZE] = last.context_window_tokens
        if last.usage_percent is not None:
            into[GEN_AI_CONTEXT_UTILIZATION] = round(last.usage_percent / 100.0, 6)
        if last.compaction is not None:
            into[GEN_AI_CONVERSATION_COMPACTED] = True
        if self._owner.config.langfuse_usage_details:
            # The categories as usage types: together they are the input, which is not also given as "input",
            # so Langfuse's total (the sum of the usage types) counts it once.
            details = {f"input_{item.category.value}": item.tokens for item in last.breakdown}
            if output_tokens is not None:
                details["output"] = output_tokens
            into[LANGFUSE_USAGE_DETAILS] = json.dumps(details, separators=(",", ":"))

    def end(
        self,
        response_model: Optional[str] = None,
        input_tokens: Optional[int] = None,
        output_tokens: Optional[int] = None,
        cache_read_tokens: Optional[int] = None,
        error: Optional[BaseException] = None,
        end_time: Optional[int] = None,  # ns since the epoch; None: now (the call ends when it ended, not when its estimate came)
        cache_write_tokens: Optional[int] = None,
        finish_reasons: tuple[str, ...] = (),
        streamed: Optional[bool] = None,
    ) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
            gauges, self._gauges = self._gauges, None
            mirrored, self._mirrored = self._mirrored, None
            events, self._events = self._events, None
        # The span's attributes at its end, in the order they are set: the latest snapshot's span-level copy first.
        at_end: dict[str, Any] = span_level(mirrored) if mirrored is not None else {}
        if gauges is not None:
            try:
                self._owner.set_gauges(gauges, self._stage, self._forecast)
                if error is None:  # a failed call is not billed: its last snapshot is the local estimate
                    self._owner.add_cost(gauges, self._stage)
            except Exception:  # noqa: BLE001 - a metrics failure must not leave the span open
                logger.warning("cw_middleware: could not record context-window gauges")
        if response_model:
            at_end[GEN_AI_RESPONSE_MODEL] = exportable_text(response_model)
        base = {**self._owner._attributes(self._provider, self._model, self._stage)[1], GEN_AI_OPERATION: self._operation}
        for key, value, token_type in (
            (GEN_AI_INPUT_TOKENS, input_tokens, "input"),
            (GEN_AI_OUTPUT_TOKENS, output_tokens, "output"),
        ):
            if value is not None:
                at_end[key] = value
                self._owner.token_usage.record(value, {**base, GEN_AI_TOKEN_TYPE: token_type})
        if cache_read_tokens:
            at_end[GEN_AI_CACHE_READ] = cache_read_tokens
        if cache_write_tokens:
            at_end[GEN_AI_CACHE_CREATION] = cache_write_tokens
            at_end[GEN_AI_CACHE_WRITE] = cache_write_tokens
        if finish_reasons:
            at_end[GEN_AI_FINISH_REASONS] = tuple(exportable_text(r) for r in finish_reasons)
        if streamed is not None:
            at_end[GEN_AI_REQUEST_STREAM] = streamed
        if gauges is not None:
            self._context_attributes(gauges, output_tokens, at_end)
        ended = end_time if end_time is not None else time.time_ns()
        error_type = {ERROR_TYPE: type(error).__qualname__} if error is not None else {}
        self._owner.operation_duration.record(max(0, ended - self._started_ns) / 1e9, {**base, **error_type})
        span = self.span
        if error is not None:
            # The exception type only: provider error bodies are content.
            at_end[ERROR_TYPE] = type(error).__qualname__
            span.set_status(Status(StatusCode.ERROR, type(error).__qualname__))
        if events is not None and self._own is not None:
            # Checked where they were made: they go into the file's record with the span's end, as the events do, after
            # those it started with (a key set again moves to the end, as set_attributes moves it).
            if self._started:
                at_end = {**{k: v for k, v in self._started.items() if k not in at_end}, **at_end}
            self._own.end_with(span, events, end_time, at_end)
        else:
            span.set_attributes(at_end)
            span.end(end_time=end_time)
