"""The file pipeline's span processor: finished spans queued as tuples, written on the one bounded worker.

The SDK's ``BatchSpanProcessor`` keeps each ``ReadableSpan`` (its attribute dicts and
locks, its events, their attributes) queued until the next export, up to a second and
hundreds of calls later: long enough for the collector to promote those graphs to its
oldest generation, and the promotions are what make it run full collections, each a
walk of the application's whole heap on whichever thread allocates next (issue 11 #4,
``benchmarks/gc_pauses.py``). Here ``on_end`` copies the span into a `Record` of
immutable values, which the collector stops tracking in its young collections, so a
queue of them costs it nothing, and the span's own objects die with the call.
"""

from __future__ import annotations

import collections
import os
import threading
from typing import Any, Optional

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from .._kernel.names import LATE_SNAPSHOT_SPAN
from .._kernel.worker import Worker
from .health import inside_export, warn
from .records import Origins, OwnAttributes, OwnEvents, Record, compact, index_view
from .sink import JsonLinesFile
from .span_json import SpanLines


class CompactSpanProcessor(SpanProcessor):
    """Queues finished spans as records; an export job on a `Worker` writes them to the sink, a span a line.

    As the SDK's batcher: a bounded queue (full: the span is dropped, counted, said once a
    minute, the caller never waits), a batch leaves at least every ``schedule_delay_millis``
    or as soon as ``max_export_batch_size`` spans wait. The first span after a write submits
    one export job, which waits up to the delay (woken early by a full batch), then writes
    everything queued; while it is pending no other is submitted, and once nothing is
    queued the worker's thread idles out. Each record is written straight to its OTLP JSON
    line (`SpanLines`), the bytes the SDK's encoder writes for that span, which the readers read;
    the sink extends the file's index with what each line names (`index_view`).
    ``force_flush`` exports on the calling thread (the pipeline bounds it). A forked
    child's copy queues nothing: the child builds a pipeline of its own (`Pipeline.for_child`).
    """

    def __init__(
        self,
        sink: JsonLinesFile,
        max_queue_size: int,
        schedule_delay_millis: float,
        max_export_batch_size: int,
    ) -> None:
        self._sink = sink
        self._max_queue_size = max_queue_size
        self._delay = schedule_delay_millis / 1000
        self._batch_size = max_export_batch_size
        self._queue: collections.deque[Record] = collections.deque()
        self._origins = Origins()
        self._lines = SpanLines(self._origins)
        self._lock = threading.Lock()  # guards the drop count and whether an export job is pending
        self._export_lock = threading.Lock()
        self._dropped = 0
        self._scheduled = False
        self._closed = False
        self._pid = os.getpid()
        self._wake = threading.Event()
        self._worker = Worker("cw-span-export", max_jobs=2)
        self._ending = threading.local()  # the own events and attributes of the span `end_with` is ending on this thread

    def end_with(
        self, span: Any, events: OwnEvents, end_time: Optional[int] = None, attributes: Optional[OwnAttributes] = None
    ) -> None:
        """End ``span`` (one of cw's, from this processor's provider) with ``events`` and ``attributes`` added to its record.

        cw's snapshot events and a call's attributes at its end are checked where they are made
        (``_kernel/codec.exportable``); the SDK's ``add_event`` would check each of an event's ~270 values
        again, twice a call (~70 µs an event warm, ~160 µs cold: issue 38), and ``set_attributes`` each
        of the ~45 the span takes at its end. The SDK ends the span and calls `on_end` on this thread,
        which takes them from here; a span ended twice is ended once, as the SDK does."""
        self._ending.own = (events, attributes)
        try:
            span.end(end_time=end_time)
        finally:
            self._ending.own = None

    @property
    def dropped(self) -> int:
        """Spans dropped because the queue was full."""
        return self._dropped

    @property
    def queued(self) -> int:
        """Spans waiting for the next write."""
        return len(self._queue)

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self._closed or os.getpid() != self._pid:
            return  # shut down, or the parent's processor copied by fork (the child has its own)
        if len(self._queue) >= self._max_queue_size:
            with self._lock:
                self._dropped += 1
            warn(
                "span-queue",
                f"cw_middleware: the telemetry queue is full ({self._max_queue_size} spans waiting for "
                f"{self._sink.path}); spans are dropped ({self._dropped} so far), the LLM calls proceed",
            )
            return
        own = getattr(self._ending, "own", None)
        self._queue.append(compact(span, self._origins, *own) if own is not None else compact(span, self._origins))
        # A full batch leaves now, and so does a snapshot's carrier span: a call still waiting for its provider,
        # or a count that came after its call, is read back at once (issue 36), not a batch delay later.
        if (len(self._queue) >= self._batch_size or span.name == LATE_SNAPSHOT_SPAN) and not self._wake.is_set():
            self._wake.set()
        if not self._scheduled:
            self._schedule()

    def _schedule(self) -> None:
        with self._lock:
            if not self._scheduled and not self._closed:
                self._scheduled = self._worker.submit(self._export_when_due)

    def _export_when_due(self) -> None:
        """The export job: wait for the batch to fill or the delay to pass, then write everything queued."""
        self._wake.wait(self._delay)
        self._wake.clear()
        with self._lock:
            self._scheduled = False  # a span queued from here on submits the next job
        self._export()

    def _export(self) -> bool:
        """Write everything queued, a span a line; False when a line could not be encoded or written."""
        ok = True
        with self._export_lock, inside_export():  # the encoder's own log lines are held back
            while self._queue:
                lines, views = [], []
                for _ in range(min(self._batch_size, len(self._queue))):
                    # A span a line: what the line is made of lives for one span's encoding, too
                    # briefly to be promoted (benchmarks/gc_pauses.py, issue 11 #4).
                    record = self._queue.popleft()
                    try:
                        lines.append(self._lines.line(record))
                    except Exception as exc:  # noqa: BLE001 - never into the worker, never into the app
                        warn("encode", f"cw_middleware: could not encode spans ({type(exc).__name__})")
                        ok = False
                        continue
                    views.append((index_view(record),))  # what the file index reads of the line
                if lines:
                    ok = self._sink.append(b"".join(lines), views) and ok
        return ok

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        if os.getpid() != self._pid:
            return True  # the parent's copy: its spans are the parent's to write, its lock may be held
        if self._closed:
            return False
        return self._export()

    def shutdown(self) -> None:
        """Write what is queued (on the calling thread, behind a running write) and stop the worker."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if os.getpid() != self._pid:
            return
        self._wake.set()
        self._worker.close(timeout=0)  # a pending job is abandoned: the write below takes its spans
        self._export()
