"""The span queue (cw_middleware/embedded/span_queue.py) on the one worker: event-gated sinks, no wall-clock bounds."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from cw_middleware._log import RateLimitedLog
from cw_middleware.embedded import health
from cw_middleware.embedded.span_queue import CompactSpanProcessor


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(health, "export_warnings", RateLimitedLog())


class GatedSink:
    """A sink whose writes block until the test opens the gate; it keeps the span names it was given."""

    path = "gated.jsonl"

    def __init__(self, is_open: bool = True) -> None:
        self.gate = threading.Event()
        if is_open:
            self.gate.set()
        self.entered = threading.Event()
        self.written = threading.Condition()
        self.names: list[str] = []
        self.writers: set[str] = set()
        self.answer = True

    def append(self, line: bytes, spans: Any = None) -> bool:
        self.entered.set()
        assert self.gate.wait(30)
        with self.written:
            for doc in line.splitlines():
                for rs in json.loads(doc)["resourceSpans"]:
                    self.names += [s["name"] for ss in rs["scopeSpans"] for s in ss["spans"]]
            self.writers.add(threading.current_thread().name)
            self.written.notify_all()
        return self.answer

    def wait_for(self, count: int) -> bool:
        with self.written:
            return self.written.wait_for(lambda: len(self.names) >= count, timeout=30)


def _pipeline(sink: GatedSink, **settings: Any) -> tuple[CompactSpanProcessor, Any]:
    options = {"max_queue_size": 64, "schedule_delay_millis": 60_000, "max_export_batch_size": 8, **settings}
    processor = CompactSpanProcessor(sink, **options)  # type: ignore[arg-type]
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    return processor, provider.get_tracer("t")


def _end(tracer: Any, *names: str) -> None:
    for name in names:
        with tracer.start_as_current_span(name):
            pass


def _export_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "cw-span-export"]


def test_no_thread_until_the_first_span_and_spans_are_written_on_the_worker():
    sink = GatedSink()
    before = len(_export_threads())
    processor, tracer = _pipeline(sink, schedule_delay_millis=10)
    assert len(_export_threads()) == before  # nothing started for an idle pipeline
    _end(tracer, "a", "b")
    assert sink.wait_for(2)  # the delay passed: the job wrote them without a flush
    assert sink.names == ["a", "b"] and sink.writers == {"cw-span-export"}
    processor.shutdown()


def test_a_full_batch_leaves_before_the_delay():
    sink = GatedSink()
    processor, tracer = _pipeline(sink)  # a delay of a minute: only a full batch makes it leave now
    _end(tracer, *(f"s{i}" for i in range(8)))
    assert sink.wait_for(8)
    assert sink.names == [f"s{i}" for i in range(8)]
    processor.shutdown()


def test_the_caller_never_waits_for_a_stuck_write_and_a_full_queue_drops_and_says_so_once(caplog):
    sink = GatedSink(is_open=False)
    processor, tracer = _pipeline(sink, max_queue_size=4, max_export_batch_size=1)
    _end(tracer, "first")
    assert sink.entered.wait(30)  # the worker is inside the write, which blocks
    with caplog.at_level(logging.WARNING, logger="cw_middleware"):
        _end(tracer, *(f"n{i}" for i in range(20)))  # returns while the gate is still shut
    assert not sink.gate.is_set()
    assert processor.queued == 4 and processor.dropped == 16
    assert len(_export_threads()) >= 1
    full = [r.getMessage() for r in caplog.records if "telemetry queue is full" in r.getMessage()]
    assert len(full) == 1 and "spans are dropped" in full[0] and sink.path in full[0]
    sink.gate.set()
    assert processor.force_flush()
    assert sink.names == ["first", "n0", "n1", "n2", "n3"]
    processor.shutdown()


def test_one_export_job_at_a_time_while_a_write_is_stuck():
    sink = GatedSink(is_open=False)
    processor, tracer = _pipeline(sink, max_export_batch_size=1)
    _end(tracer, "first")
    assert sink.entered.wait(30)
    _end(tracer, *(f"n{i}" for i in range(30)))
    assert processor._worker.pending <= 1  # one job waits behind the stuck one, not one a span
    sink.gate.set()
    assert sink.wait_for(31)
    processor.shutdown()


def test_force_flush_writes_everything_queued_on_the_calling_thread():
    sink = GatedSink()
    processor, tracer = _pipeline(sink)
    _end(tracer, "a", "b", "c")
    assert processor.force_flush()
    assert sink.names == ["a", "b", "c"] and threading.current_thread().name in sink.writers
    sink.answer = False
    _end(tracer, "d")
    assert processor.force_flush() is False  # the write failed
    processor.shutdown()


def test_shutdown_writes_what_is_queued_ends_the_worker_and_takes_no_more():
    sink = GatedSink()
    processor, tracer = _pipeline(sink)
    _end(tracer, "a")
    worker_threads = _export_threads()
    processor.shutdown()
    assert sink.names == ["a"]
    for thread in worker_threads:
        thread.join(30)  # a hang guard: a closed worker's thread ends
    assert not any(t.is_alive() for t in worker_threads)
    _end(tracer, "late")
    assert processor.queued == 0 and processor.force_flush() is False
    processor.shutdown()  # twice is harmless
