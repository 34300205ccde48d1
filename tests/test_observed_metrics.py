"""cw's gauges and counters are read from the process when the SDK collects (observable instruments): what a reader
sees is what synchronous instruments showed, under cumulative and delta temporality alike."""

from __future__ import annotations

import threading

import pytest
from opentelemetry.sdk.metrics import Counter, MeterProvider, ObservableCounter
from opentelemetry.sdk.metrics.export import AggregationTemporality, Gauge, InMemoryMetricReader, Sum

import cw_middleware as cw
from cw_middleware._capture.runtime import Runtime, set_runtime
from cw_middleware._kernel.config import resolve
from cw_middleware._snapshots.observed import MAX_SERIES, Instruments, Latest, Sums

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]


def _metrics(reader: InMemoryMetricReader) -> dict:
    return {m.name: m.data for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics}


@pytest.fixture
def readers():
    """A runtime whose meter provider has a cumulative reader and a delta one."""
    cumulative = InMemoryMetricReader()
    delta = InMemoryMetricReader(
        preferred_temporality={Counter: AggregationTemporality.DELTA, ObservableCounter: AggregationTemporality.DELTA}
    )
    provider = MeterProvider(metric_readers=[cumulative, delta])
    rt = Runtime(resolve(export="none", environ={}), meter_provider=provider)
    previous = set_runtime(rt)
    yield cumulative, delta
    rt.shutdown()
    set_runtime(previous)


def _call(messages):
    with cw.stage("run-observed", "agent@1"):
        cw.completion(model="gpt-4o", messages=messages, mock_response="ok")
    return cw.snapshots()[-1]


def test_gauges_show_the_last_call_and_counters_sum_calls_as_synchronous_instruments_did(readers):
    cumulative, delta = readers
    first = _call(MESSAGES)
    _metrics(delta)  # the delta reader's interval starts after the first call
    second = _call([*MESSAGES, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "Again, longer."}])
    assert second.input_tokens > first.input_tokens
    for reader in (cumulative, delta):
        data = _metrics(reader)
        tokens = data["agent.context_window.tokens"]
        assert isinstance(tokens, Gauge)
        by_category = {p.attributes["agent.context_window.category"]: p.value for p in tokens.data_points}
        assert by_category == {b.category.value: b.tokens for b in second.breakdown}
        (limit,) = data["agent.context_window.limit"].data_points
        assert limit.value == second.context_window_tokens
        (utilization,) = data["agent.context_window.utilization"].data_points
        assert utilization.value == pytest.approx(second.input_tokens / second.context_window_tokens)
    cost, snapshots = _metrics(cumulative)["agent.context_window.cost"], _metrics(cumulative)["agent.context_window.snapshots"]
    assert isinstance(cost, Sum) and cost.is_monotonic and cost.aggregation_temporality == AggregationTemporality.CUMULATIVE
    total = {p.attributes["agent.context_window.category"]: p.value for p in cost.data_points}
    for category, usd in second.cost.by_category.items():
        if usd:
            assert total[category.value] == pytest.approx(usd + first.cost.by_category[category])
    # every snapshot counted once, by its count method: each call published two
    methods = {p.attributes["agent.context_window.count_method"]: p.value for p in snapshots.data_points}
    assert sum(methods.values()) == len(cw.snapshots()) == 4


def test_a_delta_reader_gets_each_interval_s_own_cost(readers):
    _, delta = readers
    first = _call(MESSAGES)
    points = _metrics(delta)["agent.context_window.cost"].data_points
    before = {p.attributes["agent.context_window.category"]: p.value for p in points}
    assert sum(before.values()) == pytest.approx(first.cost.input_cost)
    second = _call(MESSAGES)
    data = _metrics(delta)["agent.context_window.cost"]
    assert data.aggregation_temporality == AggregationTemporality.DELTA
    after = {p.attributes["agent.context_window.category"]: p.value for p in data.data_points}
    assert sum(after.values()) == pytest.approx(second.cost.input_cost)


def test_a_store_keeps_at_most_max_series_dropping_the_oldest():
    store = Latest()
    for i in range(MAX_SERIES + 1):
        store.set(("model", i), {"n": i}, i)
    seen = sorted(o.value for o in store.observe(None))
    assert len(seen) == MAX_SERIES and seen[0] == 1 and seen[-1] == MAX_SERIES


def test_threads_setting_new_series_past_the_limit_all_land_and_the_store_stays_bounded():
    """Past MAX_SERIES every new series drops the oldest: threads doing it at once must neither raise nor grow it."""
    store, threads, each = Latest(), 8, MAX_SERIES // 2
    for i in range(MAX_SERIES):
        store.set(("full", i), {}, 0)
    errors: list[BaseException] = []

    def set_many(t: int) -> None:
        try:
            for i in range(each):
                store.set((t, i), {}, 1)
        except BaseException as error:  # noqa: BLE001 - the test reports it
            errors.append(error)

    workers = [threading.Thread(target=set_many, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    assert MAX_SERIES <= len(store.observe(None)) <= MAX_SERIES + threads


def test_sums_added_from_many_threads_lose_nothing():
    sums, each, threads = Sums(), 2000, 8

    def add():
        for _ in range(each):
            sums.add(("k",), {"k": "v"}, 1)

    workers = [threading.Thread(target=add) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    (observation,) = sums.observe(None)
    assert observation.value == each * threads and observation.attributes == {"k": "v"}


def test_a_second_runtime_on_the_same_meter_provider_writes_to_the_same_instruments():
    """The SDK registers an instrument name once per provider (the first callbacks stay): the stores are the provider's."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    runtimes = [Runtime(resolve(export="none", environ={}), meter_provider=provider) for _ in range(2)]
    previous = set_runtime(runtimes[0])
    try:
        first = _call(MESSAGES)
        set_runtime(runtimes[1])
        second = _call([*MESSAGES, {"role": "user", "content": "And once more, with feeling."}])
        data = _metrics(reader)
        by_category = {
            p.attributes["agent.context_window.category"]: p.value for p in data["agent.context_window.tokens"].data_points
        }
        assert by_category == {b.category.value: b.tokens for b in second.breakdown}
        total = sum(p.value for p in data["agent.context_window.cost"].data_points)
        assert total == pytest.approx(first.cost.input_cost + second.cost.input_cost)  # the counter went on counting
    finally:
        for rt in runtimes:
            rt.shutdown()
        set_runtime(previous)


def test_a_forked_child_gets_fresh_locks_for_its_sums():
    instruments = Instruments(MeterProvider().get_meter("t"))
    instruments.cost._lock.acquire()  # as a parent's thread may hold it at the fork
    instruments.after_fork_in_child()
    instruments.cost.add(("k",), {"k": "v"}, 1.5)
    assert [o.value for o in instruments.cost.observe(None)] == [1.5]
