"""cw's gauges and counters as values the process keeps, which the metrics SDK reads when it collects.

A call's end set ~11 synchronous gauges and added to ~5 counters: each measurement went through
the SDK's whole path (a `Measurement`, the attributes hashed again per reader and view, a lock
per series), ~10-20 µs apiece, ~0.2 ms a call (issue 38). The numbers change with every call
and are read once a collection (every few seconds at most), so here a call writes them into a
dictionary, a few hundred nanoseconds each, and the observable instruments' callbacks hand the
SDK what the dictionary holds when it collects. What a reader sees is what the synchronous
instruments showed: a gauge's last value per attribute set, a counter's cumulative sum (which
the SDK turns into deltas where a reader asks for them), with the same names, units and
attributes; a gauge under delta temporality now also reports a series that did not change in
the interval.

A meter provider registers an instrument name once (asked again, the SDK hands back the first
instrument, with the first callbacks), so the instruments and their stores are made once per
meter provider and kept by the process (`MeterStores`), as the SDK keeps its instruments: a
second ``configure()`` on the same provider goes on writing to them, and its counters go on
counting, as before. Keys are the attribute sets themselves; at most `MAX_SERIES` a store, the
SDK's default cardinality limit: past it the oldest series is dropped.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from .._kernel.names import (
    COST_UNIT,
    METRIC_CACHED_TOKENS,
    METRIC_CALLS_UNTIL_THRESHOLD,
    METRIC_COST,
    METRIC_LIMIT,
    METRIC_SNAPSHOTS,
    METRIC_TOKENS,
    METRIC_UNUSED_TOOL_TOKENS,
    METRIC_UTILIZATION,
)
from .._kernel.process import PROCESS

MAX_SERIES = 2000  # the SDK's default cardinality limit per instrument


class Latest:
    """A gauge's last value per attribute set."""

    __slots__ = ("_values", "_lock")

    def __init__(self) -> None:
        self._values: dict[Hashable, tuple[Mapping[str, Any], float]] = {}
        # Taken only to drop a series past MAX_SERIES (rare): setting a value is one dict store, safe as it is, but two
        # threads dropping at once could each read the dict's first key while the other removes it.
        self._lock = threading.Lock()

    def set(self, key: Hashable, attributes: Mapping[str, Any], value: float) -> None:
        values = self._values
        if key not in values and len(values) >= MAX_SERIES:
            with self._lock:
                try:
                    while len(values) >= MAX_SERIES:
                        values.pop(next(iter(values)), None)
                except RuntimeError:  # a series added between the two steps, by a thread under the limit: one over
                    pass
        values[key] = (attributes, value)

    def observe(self, options: CallbackOptions) -> Iterable[Observation]:
        """The observable instrument's callback: every series as it stands (the attributes are never changed)."""
        return [Observation(value, attributes) for attributes, value in list(self._values.values())]

    def after_fork_in_child(self) -> None:
        self._lock = threading.Lock()  # a parent's thread may have held it


class Sums(Latest):
    """A counter's running sum per attribute set (cumulative, as an observable counter reports it)."""

    __slots__ = ("_adding",)

    def __init__(self) -> None:
        super().__init__()
        self._adding = threading.Lock()  # call ends run on the worker, or on callers' threads without one

    def add(self, key: Hashable, attributes: Mapping[str, Any], amount: float) -> None:
        with self._adding:
            held = self._values.get(key)
            self.set(key, attributes, amount if held is None else held[1] + amount)

    def after_fork_in_child(self) -> None:
        super().after_fork_in_child()
        self._adding = threading.Lock()


class Instruments:
    """The observable instruments of one meter provider, and the stores their callbacks read."""

    def __init__(self, meter: metrics.Meter) -> None:
        self.tokens, self.limit, self.utilization = Latest(), Latest(), Latest()
        self.cached, self.unused_tools, self.calls_until_threshold = Latest(), Latest(), Latest()
        self.cost, self.snapshots = Sums(), Sums()
        for name, store, unit, description in (
            (METRIC_TOKENS, self.tokens, "{token}", "Input tokens per context-window category"),
            (METRIC_LIMIT, self.limit, "{token}", "Context window size of the model"),
            (METRIC_UTILIZATION, self.utilization, "1", "Share of the context window in use"),
            (METRIC_CACHED_TOKENS, self.cached, "{token}", "Input tokens per category served from the prompt cache"),
            (
                METRIC_UNUSED_TOOL_TOKENS,
                self.unused_tools,
                "{token}",
                "Definition tokens of the tools a request defines and neither it nor its response calls",
            ),
            (
                METRIC_CALLS_UNTIL_THRESHOLD,
                self.calls_until_threshold,
                "{call}",
                "Calls left until the stage's input reaches the threshold share of its window (-1: not growing)",
            ),
        ):
            meter.create_observable_gauge(name, callbacks=[store.observe], unit=unit, description=description)
        for name, sums, unit, description in (
            (METRIC_COST, self.cost, COST_UNIT, "Input cost of the calls in USD, by context-window category"),
            (METRIC_SNAPSHOTS, self.snapshots, "{snapshot}", "Snapshots emitted, by count method"),
        ):
            meter.create_observable_counter(name, callbacks=[sums.observe], unit=unit, description=description)

    def after_fork_in_child(self) -> None:
        stores = (self.tokens, self.limit, self.utilization, self.cached, self.unused_tools, self.calls_until_threshold)
        for store in (*stores, self.cost, self.snapshots):
            store.after_fork_in_child()


class MeterStores:
    """The process's `Instruments`, one per meter provider (see the module docstring); a part of `PROCESS`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_provider: weakref.WeakKeyDictionary[Any, Instruments] = weakref.WeakKeyDictionary()

    def instruments(self, provider: Any, meter: metrics.Meter) -> Instruments:
        """``provider``'s instruments (``meter``: cw's meter of it), made on its first use."""
        with self._lock:
            try:
                found = self._by_provider.get(provider)
            except TypeError:  # a provider that takes no weak reference: instruments of its own each time
                return Instruments(meter)
            if found is None:
                found = self._by_provider[provider] = Instruments(meter)
            return found

    def after_fork_in_child(self) -> None:
        self._lock = threading.Lock()
        for instruments in list(self._by_provider.values()):
            instruments.after_fork_in_child()


def instruments_of(meter_provider: Any, meter: metrics.Meter) -> Instruments:
    """cw's observable instruments on ``meter_provider`` (None: the global one) and their stores."""
    provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
    return PROCESS.part(MeterStores).instruments(provider, meter)
