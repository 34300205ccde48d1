"""The span queue (cw_middleware/_embedded/span_queue.py): finished spans wait as tuples, not as SDK objects (issue 11 #4).

The SDK's BatchSpanProcessor kept every ReadableSpan (attributes, events, locks) until its
batch left, long enough for the collector to promote them and run full collections on the
caller. The first tests drive the queue on the one worker with event-gated sinks (no wall-clock
bounds); the rest pin, through real calls, what replaced the SDK's batcher: no span object
outlives its call, every span still reaches the file in the readers' format with its snapshot
event, a full queue drops and warns once without blocking, and flush stays bounded by its
timeout when the write blocks.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import threading
import time
from typing import Any

import pytest
from embedded_helpers import embedded_runtime
from gates import returns_while_held
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import cw_middleware as cw
from cw_middleware._embedded import health
from cw_middleware._embedded.encode import to_json_line
from cw_middleware._embedded.sink import JsonLinesFile
from cw_middleware._embedded.span_queue import CompactSpanProcessor
from cw_middleware._kernel.log import RateLimitedLog


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


# Through real calls and the file pipeline
MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]


def _finished_spans_alive(run_id: str) -> int:
    """Finished span objects of this run still alive (other tests' exporters may hold theirs)."""
    gc.collect()
    return sum(
        1
        for o in gc.get_objects()
        if isinstance(o, ReadableSpan) and o.end_time is not None and (o.attributes or {}).get("agent.run.id") == run_id
    )


def _span_lines(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.startswith('{"resourceSpans"')]


def test_no_finished_span_object_outlives_its_call_and_the_file_gets_every_span(tmp_path):
    path = tmp_path / "t.jsonl"
    calls = 40
    # A long interval: nothing leaves before the check, so whatever the queue holds is still held.
    with embedded_runtime(export=f"file:{path}", export_interval_ms=60_000) as runtime:
        with cw.stage(run_id="run-q", stage_id="impl@1"):
            for i in range(calls):
                cw.completion(model="gpt-4o", messages=[*MESSAGES, {"role": "user", "content": f"turn {i}"}], mock_response="ok")
        # Once its background estimate ran (a process's first calls wait for the tokenizer on a worker).
        last = cw.snapshots()[-1]
        assert _finished_spans_alive("run-q") == 0  # not even the last call's: no worker keeps its last job
        assert runtime.flush(5)
    spans = [
        span for line in _span_lines(path) for rs in line["resourceSpans"] for ss in rs["scopeSpans"] for span in ss["spans"]
    ]
    chat = [s for s in spans if s["name"] == "chat gpt-4o"]
    assert len(chat) == calls
    assert all(any(e["name"] == "agent.context_window.snapshot" for e in s["events"]) for s in chat)
    window = cw.reader(f"file:{path}").context_window("run-q", "impl@1")
    assert window.available and window.staleness.value == "stored"
    assert window.input_tokens == last.input_tokens > 0


def test_a_span_reaches_the_file_as_the_sdk_would_encode_it(tmp_path):
    """Remote parent, trace state, a link, an error status, events and dropped counts survive the tuples."""
    path = tmp_path / "t.jsonl"
    processor = CompactSpanProcessor(
        JsonLinesFile(str(path)), max_queue_size=64, schedule_delay_millis=60_000, max_export_batch_size=64
    )
    seen = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=3, max_events=1, max_event_attributes=2))
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(seen))
    tracer = provider.get_tracer("cw_middleware", "1.2.3")
    remote = trace.SpanContext(
        0x1234, 0x5678, is_remote=True, trace_flags=trace.TraceFlags(1), trace_state=trace.TraceState([("vendor", "v1")])
    )
    linked = trace.SpanContext(0x9999, 0x4444, is_remote=False)
    with tracer.start_as_current_span(
        "chat m",
        context=trace.set_span_in_context(trace.NonRecordingSpan(remote)),
        kind=trace.SpanKind.CLIENT,
        links=[trace.Link(linked, {"link.k": "v"})],
    ) as span:
        span.set_attributes({"a": 1, "b": 2.5, "c": True, "d": ("x", "y")})  # one over the limit of 3
        span.add_event("agent.context_window.snapshot", {"k1": 1, "k2": "two", "k3": [3, 4]}, timestamp=10)
        span.add_event("dropped.event")
        span.set_status(trace.Status(trace.StatusCode.ERROR, "ValueError"))
    with tracer.start_as_current_span("child"):
        pass
    assert processor.force_flush()
    provider.shutdown()
    written = path.read_bytes().splitlines(keepends=True)
    expected = [to_json_line(encode_spans([s])) for s in seen.get_finished_spans()]  # the SDK's encoder
    assert written == expected
    first = json.loads(written[0])["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert first["droppedAttributesCount"] == 1 and first["droppedEventsCount"] == 1
    assert first["parentSpanId"] == "0000000000005678" and first["traceState"] == "vendor=v1"


def _stalled_fifo(tmp_path):
    fifo = tmp_path / "stalled.fifo"
    os.mkfifo(fifo)
    return fifo, os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # held open, never read: writes fill the pipe, then block


def test_a_full_queue_drops_and_warns_once_and_never_blocks_the_call(tmp_path, caplog):
    fifo, reader = _stalled_fifo(tmp_path)
    read = threading.Event()  # set just before the pipe's reader goes: until then every write past a full pipe blocks
    try:
        with caplog.at_level(logging.WARNING, logger="cw_middleware"):
            with embedded_runtime(export=f"file:{fifo}", export_queue_size=4, export_interval_ms=10, exit_timeout=0.5) as runtime:
                processor = runtime.pipeline.span_processor  # type: ignore[attr-defined]

                def calls() -> list[str]:
                    replies = []
                    for i in range(60):
                        result = cw.completion(
                            model="gpt-4o", messages=[*MESSAGES, {"role": "user", "content": f"t{i}"}], mock_response="ok"
                        )
                        replies.append(result.choices[0].message.content)
                        if processor.dropped == 0:
                            time.sleep(0.005)  # the worker writes until the pipe is full, then blocks in write()
                    return replies

                # A call that waited for the stuck writer could not return before the pipe is read.
                assert returns_while_held(calls, lambda: not read.is_set()) == ["ok"] * 60
                assert processor.dropped > 0  # the writer was stuck: the queue filled and dropped
                assert returns_while_held(lambda: runtime.flush(0.5), lambda: not read.is_set()) is False
                read.set()
                os.close(reader)  # the blocked write fails with EPIPE: the worker drains and the runtime ends at once
                reader = None
        full = [r for r in caplog.records if "telemetry queue is full" in r.getMessage()]
        assert len(full) == 1, [r.getMessage() for r in caplog.records]
        assert "spans are dropped" in full[0].getMessage()
    finally:
        if reader is not None:
            os.close(reader)


def test_the_otlp_export_keeps_the_sdk_batcher(monkeypatch):
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    with embedded_runtime(export="otlp", exit_timeout=0.5) as runtime:
        assert isinstance(runtime.pipeline.span_processor, BatchSpanProcessor)  # type: ignore[attr-defined]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_the_parents_queue_copied_by_fork_takes_nothing_in_the_child(tmp_path):
    path = tmp_path / "t.jsonl"
    processor = CompactSpanProcessor(
        JsonLinesFile(str(path)), max_queue_size=64, schedule_delay_millis=60_000, max_export_batch_size=64
    )
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("parent-span"):
        pass
    pid = os.fork()
    if pid == 0:  # the child: its copy queues nothing and writes nothing, without waiting on the parent's lock
        with tracer.start_as_current_span("child-span"):
            pass
        os._exit(0 if processor.force_flush() and processor.queued == 1 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert processor.force_flush()
    provider.shutdown()
    names = [s["name"] for line in _span_lines(path) for s in line["resourceSpans"][0]["scopeSpans"][0]["spans"]]
    assert names == ["parent-span"]
