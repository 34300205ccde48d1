"""Read context windows back from Prometheus or VictoriaMetrics: what metrics can tell.

    cw.reader("prometheus+http://HOST:9090")                  # Prometheus
    cw.reader("prometheus+http://HOST:8428")                  # VictoriaMetrics, unchanged
    cw.reader("prometheus+https://HOST/select/0/prometheus?lookback=30d")   # a path prefix, TLS

Metrics answer per stage only when they carry the run and stage ids as labels
(``metric_run_labels`` / ``CW_METRIC_RUN_LABELS=1`` where the agent runs). Then, for
(run, stage), from the PromQL HTTP API (``/api/v1/query``) within ``lookback`` (7 days
by default, URL option ``?lookback=30d``):

- the latest request: the snapshots counter series (one per provider, model, count
  method and producer) that rose last; ``count_method`` is its method (two methods
  rising in the same scrape: the better one, in `CountMethod` order, which is what a
  call's gauges show: they are set when it ends, with its best snapshot). Two models
  (or producer processes) rising in the same scrape cannot be ordered: the answer
  then carries ``metrics_ambiguous``;
- ``generated_at``: the scrape that first showed that rise, exact from the raw
  samples of the 15 minutes before the stage's last sample, else (all the stage's
  requests came earlier) to ``lookback/1000``;
- ``breakdown`` and ``input_tokens``: the latest values of the category gauges of
  that same series (``input_tokens`` is their sum, as a snapshot's is), and
  ``context_window_tokens`` the limit gauge; ``usage_percent`` computed as everywhere;
- ``staleness``: ``live`` while the producer still exports the stage's series (its
  process runs; a stale marker ends it) and the stage rose within the staleness
  horizon (``stale_after``), else ``stored``.

What metrics cannot tell, so the answer never pretends: no ``details`` (per-source
counts are not metrics), no warnings of the snapshot itself (every answer carries
``from_metrics`` instead), no ``event_seq`` (None), no stage kind, and a stage without
any LLM call has no series at all (not found, where a trace backend answers
``not_agent_stage``). While a call is in flight its local estimate may already have
risen while the gauges still show the previous call (they are set when a call ends).
Without run labels an answer is ``available=false`` with ``metrics_without_run_labels``
and a listing is a `BackendResponseError` saying so; when the producer's series limit
folded series into ``otel_metric_overflow``, a stage not found is ``available=false``
with ``metrics_series_overflow`` instead.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Optional, Union

from .._kernel import codec as codec
from .._kernel import names
from .._kernel.contract import (
    CATEGORIES,
    BreakdownItem,
    CategoryTotals,
    CountMethod,
    HistoryPoint,
    StageContextWindow,
    StageTotals,
    Staleness,
    UnavailableReason,
    WarningCode,
)
from .._kernel.errors import BackendResponseError
from .fold import DEFAULT_HISTORY, Horizon, Missing, RunSummary, StageSummary, point
from .http import BackendClient
from .window import lookback, parse_duration

if TYPE_CHECKING:
    from .options import BackendURL, ReaderOptions

# Metric and label names as a Prometheus backend stores the contract's instruments and attributes.
SNAPSHOTS, TOKENS, LIMIT = names.PROM_SNAPSHOTS, names.PROM_TOKENS, names.PROM_LIMIT
COST, UNUSED = names.PROM_COST, names.PROM_UNUSED_TOOL_TOKENS
RUN, STAGE, CATEGORY, METHOD = names.PROM_RUN, names.PROM_STAGE, names.PROM_CATEGORY, names.PROM_COUNT_METHOD
PROVIDER, MODEL = names.PROM_PROVIDER, names.PROM_MODEL
OVERFLOW = "otel_metric_overflow"  # the SDK's otel.metric.overflow=true series, past the cardinality limit

COARSE_STEPS = 1000  # subquery resolution: lookback / COARSE_STEPS
RAW_WINDOW = 900.0  # seconds of raw samples read to time the newest rises exactly (60 samples of a 15 s scrape)
_METHOD_RANK = {method.value: rank for rank, method in enumerate(CountMethod)}  # best last
# Labels that tell series of one stage apart without naming a different producer or model.
_NOT_SOURCE = frozenset({"__name__", CATEGORY, METHOD})


def quote(value: str) -> str:
    r"""A PromQL string literal: run and stage ids may hold quotes and backslashes (never control characters)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _selector(name: str, **labels: str) -> str:
    inner = ",".join(f"{label}={quote(value)}" for label, value in labels.items())
    return f"{name}{{{inner}}}"


def _seconds(value: float) -> str:
    return f"{max(1, int(value))}s"


@dataclass(frozen=True)
class _Series:
    labels: dict[str, str]
    value: float
    time: float

    @property
    def source(self) -> tuple[tuple[str, str], ...]:
        """What identifies the producer and model of a series (not the category or method)."""
        return tuple(sorted((k, v) for k, v in self.labels.items() if k not in _NOT_SOURCE))


class PrometheusReader:
    """`SnapshotReader` over the PromQL HTTP API of Prometheus or VictoriaMetrics."""

    keeps_every_call = False  # metrics keep the latest values, not each call

    def __init__(self, url: BackendURL, options: ReaderOptions) -> None:
        self.display = url.display
        self.lookback = lookback(url.params)
        self.horizon: Horizon = options.horizon
        self._http = BackendClient("Prometheus", url, options)

    # ------------------------------------------------------------ SnapshotReader

    def latest(self, run_id: str, stage_id: str) -> Union[StageContextWindow, Missing]:
        now = self._now()
        ids = {RUN: run_id, STAGE: stage_id}
        counters = self._query(f"last_over_time({_selector(SNAPSHOTS, **ids)}[{_seconds(self.lookback)}])", now)
        if not counters:
            return self._missing(run_id, stage_id, now)
        changed = self._last_changes(_selector(SNAPSHOTS, **ids), now)
        # The latest request: the series that rose last; in the same scrape, the better method.
        ranked = sorted(
            counters,
            key=lambda s: (changed.get(_key(s), 0.0), _METHOD_RANK.get(s.labels.get(METHOD, ""), -1)),
            reverse=True,
        )
        tokens = self._query(f"last_over_time({_selector(TOKENS, **ids)}[{_seconds(self.lookback)}])", now)
        limits = self._query(f"last_over_time({_selector(LIMIT, **ids)}[{_seconds(self.lookback)}])", now)
        present = {s.source for s in self._query(_selector(SNAPSHOTS, **ids), now)}
        newest = changed.get(_key(ranked[0]), 0.0)
        rivals = {s.source for s in ranked if changed.get(_key(s), 0.0) == newest}
        for best in ranked:
            by_category = {s.labels.get(CATEGORY): s.value for s in tokens if s.source == best.source}
            if not by_category:
                continue  # a request whose gauges are not set yet (scraped mid-call): the one before it
            last_rise = changed.get(_key(best), best.time)
            live = best.source in present and not self.horizon.expired(int(last_rise * 1e9))
            limit = next((int(s.value) for s in limits if s.source == best.source and s.value > 0), None)
            codes = [WarningCode.FROM_METRICS.value]
            if len(rivals) > 1 and best.source in rivals:
                codes.append(WarningCode.METRICS_AMBIGUOUS.value)
            staleness = Staleness.LIVE if live else Staleness.STORED
            answer = _answer(stage_id, best, by_category, limit, last_rise, staleness, codes)
            return answer.model_copy(update=self._money(ids, best, now))
        return StageContextWindow.unavailable(
            stage_id,
            UnavailableReason.NOT_OBSERVED,
            codec.warnings_from_codes([WarningCode.NOT_OBSERVED.value, WarningCode.FROM_METRICS.value]),
        )

    def _money(self, ids: Mapping[str, str], best: _Series, now: float) -> dict[str, Any]:
        """What the cost counter and the unused-tools gauge tell: the stage's cost per category (every producer's
        series summed: a counter only grows), the latest request's unused definitions. Calls and tokens over the
        stage are not metrics: null."""
        window = _seconds(self.lookback)
        costs = self._query(f"sum by ({CATEGORY}) (last_over_time({_selector(COST, **ids)}[{window}]))", now)
        unused = self._query(f"last_over_time({_selector(UNUSED, **ids)}[{window}])", now)
        update: dict[str, Any] = {}
        mine = [s for s in unused if s.source == best.source] or unused
        if mine:
            update["unused_tool_tokens"] = int(max(mine, key=lambda s: s.time).value)
        if costs:
            by_category = {
                c: CategoryTotals(cost=round(next((s.value for s in costs if s.labels.get(CATEGORY) == c.value), 0.0), 10))
                for c in CATEGORIES
            }
            total = round(sum(s.value for s in costs), 10)
            update["stage_totals"] = StageTotals(calls=None, input_tokens=None, input_cost=total, by_category=by_category)
        return update

    def history(self, run_id: str, stage_id: str, limit: int = DEFAULT_HISTORY) -> Union[list[HistoryPoint], Missing]:
        """Metrics keep the latest values: the history is the latest request alone (trace backends keep every call)."""
        answer = self.latest(run_id, stage_id)
        if isinstance(answer, Missing):
            return answer
        return [point(answer)] if answer.available else []

    def stages(self, run_id: str) -> Optional[list[StageSummary]]:
        now = self._now()
        sel = _selector(SNAPSHOTS, **{RUN: run_id})
        window = _seconds(self.lookback)
        known = {s.labels.get(STAGE) for s in self._query(f"count by ({STAGE}) (last_over_time({sel}[{window}]))", now)}
        known.discard(None)
        if not known:
            if self._holds_unlabelled(now):
                raise BackendResponseError(
                    f"Prometheus at {self.display} holds context-window metrics without run/stage labels, so it cannot "
                    "list a run's stages; turn on metric_run_labels (CW_METRIC_RUN_LABELS=1) where the agent runs"
                )
            return None
        first = self._times(self._seen(sel, f"by ({STAGE})", last=False), STAGE, now)
        last = self._times(self._seen(sel, f"by ({STAGE})", last=True), STAGE, now)
        live = {s.labels.get(STAGE) for s in self._query(f"count by ({STAGE}) ({self._active(sel)})", now)}
        out = [
            StageSummary(
                stage_id,
                None,  # metrics do not carry the stage kind
                Staleness.LIVE if stage_id in live else Staleness.STORED,
                *_span(first.get(stage_id), last.get(stage_id)),
            )
            for stage_id in known
            if stage_id is not None
        ]
        return sorted(out, key=lambda s: (s.started_at or datetime.max.replace(tzinfo=UTC), s.stage_id))

    def runs(self) -> list[RunSummary]:
        now = self._now()
        sel = f'{SNAPSHOTS}{{{RUN}!=""}}'
        window = _seconds(self.lookback)
        pairs = f"count by ({RUN}, {STAGE}) (last_over_time({sel}[{window}]))"
        stage_counts = self._times(f"count by ({RUN}) ({pairs})", RUN, now)
        if not stage_counts:
            return []
        live = self._times(f"count by ({RUN}) (count by ({RUN}, {STAGE}) ({self._active(sel)}))", RUN, now)
        first = self._times(self._seen(sel, f"by ({RUN})", last=False), RUN, now)
        last = self._times(self._seen(sel, f"by ({RUN})", last=True), RUN, now)
        out = []
        for run_id, count in stage_counts.items():
            first_seen, last_seen = _span(first.get(run_id), last.get(run_id))
            out.append(RunSummary(run_id, int(count), int(live.get(run_id, 0)), first_seen, last_seen))
        return sorted(out, key=lambda r: (r.last_seen_at or datetime.min.replace(tzinfo=UTC), r.run_id), reverse=True)

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------ PromQL

    def _now(self) -> float:
        return self.horizon.now_ns / 1e9 if self.horizon.now_ns is not None else time.time()

    # Sample times come from subqueries over windows that tile the time: at each step t,
    # ``count_over_time(sel[step])`` sees every raw sample in (t - step, t], so even a series
    # that lived between two steps (a short run whose process exited) is seen; ``time()``
    # (not ``timestamp()``, which VictoriaMetrics reads as a rollup) gives the step's time.
    # Prometheus aligns subquery steps to multiples of the step, so a coarse pass over the
    # lookback (lookback/1000) is completed by a fine one over the newest two coarse steps
    # (lookback/100000, at least 1 s), and by the series' newest sample itself.

    def _step(self) -> float:
        return max(1.0, self.lookback / COARSE_STEPS)

    def _fine_step(self) -> float:
        return max(1.0, self._step() / 100)

    def _seen(self, sel: str, by: str = "without ()", *, last: bool) -> str:
        """Per group (or series), about when its first (or last) sample came."""
        fn = "max" if last else "min"
        passes = []
        for span, step in ((self.lookback, self._step()), (2 * self._step(), self._fine_step())):
            windows = f"(count_over_time({sel}[{_seconds(step)}]) * 0 + time())"
            passes.append(f"{fn} {by} ({fn}_over_time({windows}[{_seconds(span)}:{_seconds(step)}]))")
        # `or` keeps the left side where both answer: newest first for `last`, oldest first for `first`.
        if last:
            return " or ".join([f"max {by} (timestamp({sel}))", passes[1], passes[0]])
        newest = f"min {by} (min_over_time(timestamp({sel})[{_seconds(self._fine_step())}:1s]))"
        return " or ".join([passes[0], passes[1], newest])

    def _active(self, sel: str) -> str:
        """Series still exported now that rose or appeared within the staleness horizon."""
        horizon = _seconds(self.horizon.stale_after)
        return f"((changes({sel}[{horizon}]) > 0) or ({sel} unless {sel} offset {horizon})) and {sel}"

    def _query(self, promql: str, at: float) -> list[_Series]:
        body = self._http.get_json("/api/v1/query", {"query": promql, "time": f"{at:.3f}"})
        if not isinstance(body, dict) or body.get("status") != "success" or not isinstance(body.get("data"), dict):
            raise BackendResponseError(f"Prometheus at {self.display} answered a query with something that is not a result")
        data = body["data"]
        out = []
        for item in data.get("result") or []:
            if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
                continue
            if data.get("resultType") == "matrix":
                for stamp, value in item.get("values") or []:
                    if value not in ("NaN", "+Inf", "-Inf"):  # NaN: a staleness marker, not a value
                        out.append(_Series(item["metric"], _number(value), float(stamp)))
            elif isinstance(item.get("value"), list) and len(item["value"]) == 2:
                stamp, value = item["value"]
                out.append(_Series(item["metric"], _number(value), float(stamp)))
        return out

    def _times(self, promql: str, label: str, at: float) -> dict[str, float]:
        return {s.labels[label]: s.value for s in self._query(promql, at) if label in s.labels}

    def _last_changes(self, sel: str, now: float) -> dict[tuple[Any, ...], float]:
        """When each counter series last rose (or appeared): exactly near the stage's last sample, else per step.

        The raw samples of the RAW_WINDOW before the stage's last sample settle the newest
        requests to the scrape; a series with nothing there falls back to the last step at
        which it had moved, else to when it first appeared (all its requests came earlier).
        """
        last = {_key(s): s.value for s in self._query(self._seen(sel, last=True), now)}
        if not last:
            return {}
        first = {_key(s): s.value for s in self._query(self._seen(sel, last=False), now)}
        step = _seconds(self._step())
        moved = f"max without () (max_over_time((({sel} != {sel} offset {step}) * 0 + time())[{_seconds(self.lookback)}:{step}]))"
        times = {**first, **{_key(s): s.value for s in self._query(moved, now)}}
        end = min(now, max(last.values()))
        span = RAW_WINDOW + self._step()
        for key, samples in _group(self._query(f"{sel}[{_seconds(span)}]", end)).items():
            rise = _last_rise(samples, appeared=first.get(key, now) > end - span)
            if rise is not None:
                times[key] = rise
        return times

    def _missing(self, run_id: str, stage_id: str, now: float) -> Union[StageContextWindow, Missing]:
        """No series for the stage: unknown, or unknowable (no run labels, or folded into the overflow series)."""
        window = _seconds(self.lookback)
        if self._query(f'count(last_over_time({SNAPSHOTS}{{{OVERFLOW}="true"}}[{window}]))', now):
            return StageContextWindow.unavailable(
                stage_id,
                UnavailableReason.NOT_OBSERVED,
                codec.warnings_from_codes([WarningCode.METRICS_SERIES_OVERFLOW.value, WarningCode.FROM_METRICS.value]),
            )
        if self._query(f"count(last_over_time({_selector(SNAPSHOTS, **{RUN: run_id})}[{window}]))", now):
            return Missing.STAGE
        if self._holds_unlabelled(now):
            return StageContextWindow.unavailable(
                stage_id,
                UnavailableReason.NOT_OBSERVED,
                codec.warnings_from_codes([WarningCode.METRICS_WITHOUT_RUN_LABELS.value, WarningCode.FROM_METRICS.value]),
            )
        return Missing.RUN

    def _holds_unlabelled(self, now: float) -> bool:
        return bool(self._query(f'count(last_over_time({SNAPSHOTS}{{{RUN}=""}}[{_seconds(self.lookback)}]))', now))


# ---------------------------------------------------------------- helpers


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _key(series: _Series) -> tuple[Any, ...]:
    """One counter series: its source and its count method."""
    return (series.source, series.labels.get(METHOD))


def _group(samples: Iterable[_Series]) -> dict[tuple[Any, ...], list[_Series]]:
    out: dict[tuple[Any, ...], list[_Series]] = {}
    for sample in samples:
        out.setdefault(_key(sample), []).append(sample)
    return out


def _last_rise(samples: list[_Series], appeared: bool) -> Optional[float]:
    """The time of the newest sample whose value differs from the one before it; else, for a
    series that first appeared inside the window, its first sample."""
    ordered = sorted({s.time: s for s in samples}.values(), key=lambda s: s.time)
    for before, after in zip(reversed(ordered[:-1]), reversed(ordered[1:])):
        if after.value != before.value:
            return after.time
    return ordered[0].time if ordered and appeared else None


def _datetime(seconds: Optional[float]) -> Optional[datetime]:
    return datetime.fromtimestamp(seconds, tz=UTC) if seconds else None


def _span(first: Optional[float], last: Optional[float]) -> tuple[Optional[datetime], Optional[datetime]]:
    """(first seen, last seen): a first sample is known to the end of its step window, so never after the last one.

    A series so new that no subquery window holds it yet (VictoriaMetrics answers subqueries
    a little behind its newest sample) is first seen, as far as anyone can tell, when last seen.
    """
    last = last or first
    first = first or last
    if first and last:
        first = min(first, last)
    return _datetime(first), _datetime(last)


def _answer(
    stage_id: str,
    series: _Series,
    by_category: Mapping[Optional[str], float],
    limit: Optional[int],
    generated_at: float,
    staleness: Staleness,
    warning_codes: list[str],
) -> StageContextWindow:
    tokens = {category: int(by_category.get(category.value, 0)) for category in CATEGORIES}
    total = sum(tokens.values())
    try:
        method: Optional[CountMethod] = CountMethod(series.labels.get(METHOD, ""))
    except ValueError:
        method = None
    return StageContextWindow(
        stage_id=stage_id,
        available=True,
        provider=series.labels.get(PROVIDER),
        model=series.labels.get(MODEL),
        context_window_tokens=limit,
        input_tokens=total,
        usage_percent=codec.percent(total, limit),
        count_method=method,
        staleness=staleness,
        generated_at=datetime.fromtimestamp(generated_at, tz=UTC),
        event_seq=None,
        breakdown=[
            BreakdownItem(category=category, tokens=tokens[category], usage_percent=codec.percent(tokens[category], limit))
            for category in CATEGORIES
        ],
        warnings=codec.warnings_from_codes(warning_codes),
        details=[],
    )


def open_reader(url: BackendURL, options: ReaderOptions) -> PrometheusReader:
    return PrometheusReader(url, options)


__all__ = ["PrometheusReader", "open_reader", "parse_duration", "quote"]
