"""The run watchers behind the event streams: each polls one run through the query gate and keeps its events.

Generic over any reader, by polling: one `RunWatcher` per watched run asks the reader
for the run's stages every ``poll_interval`` and, for each stage whose summary moved
(new activity, staleness), for its context window; what changed becomes an event
(``stage`` or ``snapshot``, one line of JSON each, numbered by the watcher's counter)
kept in a bounded history for the streams to read (`events.py`). A stage/snapshot
event says the stage's *latest* answer changed: two snapshots landing within one poll
interval announce once, with the newer (the reader protocol answers the latest only).

The file backend (the default) is probed cheaply between polls: while the file's
inode, size and mtime stay the same, the reader is asked again only every
``full_poll_every`` seconds (for the staleness horizon); a rotated or truncated file
changes the probe and is read again at once. A watcher keeps polling for ``linger``
seconds after its last stream closed; `Watchers` owns them all and the stream count.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from .._kernel.errors import NotFound
from .gate import QueryGate
from .http_errors import HttpError, as_http_error
from .limits import Limits

if TYPE_CHECKING:
    from .._readback import Reader


@dataclass(frozen=True)
class Event:
    seq: int
    kind: str  # "stage" | "snapshot"
    data: str  # one line of JSON


def _stage_key(summary: dict[str, Any]) -> tuple[Any, ...]:
    # A stage *changes* when it appears or its kind or staleness does; last_seen_at moves with every snapshot.
    return summary.get("kind"), summary.get("staleness")


class RunWatcher:
    """Polls one run and keeps its current state and its last events (module docstring)."""

    def __init__(self, run_id: str, owner: Watchers) -> None:
        self.run_id, self.owner = run_id, owner
        self.reader, self.limits = owner.reader, owner.limits
        self.epoch = secrets.token_hex(4)
        self.cond = threading.Condition()
        self.seq = 0
        self.history: deque[Event] = deque(maxlen=owner.limits.history)
        self.summaries: dict[str, dict[str, Any]] = {}
        self.windows: dict[str, str] = {}
        self.error: Optional[dict[str, str]] = None  # the failure of the latest poll, if it failed
        self.error_count = 0  # bumps once per failure streak, so streams announce it once
        self.polled = False
        self.subscribers = 0
        self.idle_since = time.monotonic()
        self.stopped = threading.Event()
        self._poll_lock = threading.Lock()
        self._probe: Optional[tuple[int, int, int]] = None
        self._last_full = 0.0
        self._window_asked: dict[str, float] = {}

    # ------------------------------------------------------------ polling

    def poll(self) -> None:
        """One poll: the run's stages, then the window of each stage that moved; changes become events."""
        with self._poll_lock:
            self._last_full = time.monotonic()
            summaries = {s.stage_id: s.as_dict() for s in self.reader.stages(self.run_id)}
            now = time.monotonic()
            windows: dict[str, str] = {}
            for stage_id, summary in summaries.items():
                moved = summary != self.summaries.get(stage_id)
                stale = now - self._window_asked.get(stage_id, 0.0) >= self.limits.full_poll_every
                if moved or stale or stage_id not in self.windows:
                    try:
                        answer = self.reader.context_window(self.run_id, stage_id).model_dump(mode="json")
                    except NotFound:
                        continue  # listed a moment ago, gone now (a rotated file): the next poll settles it
                    self._window_asked[stage_id] = now
                    windows[stage_id] = json.dumps({"run_id": self.run_id, **answer}, separators=(",", ":"))
            with self.cond:
                for stage_id, summary in summaries.items():
                    if stage_id not in self.summaries or _stage_key(summary) != _stage_key(self.summaries[stage_id]):
                        data = json.dumps({"run_id": self.run_id, **summary}, separators=(",", ":"))
                        self._append("stage", data)
                    self.summaries[stage_id] = summary
                    if stage_id in windows and windows[stage_id] != self.windows.get(stage_id):
                        self._append("snapshot", windows[stage_id])
                        self.windows[stage_id] = windows[stage_id]
                self.error = None
                self.polled = True
                self.cond.notify_all()

    def _append(self, kind: str, data: str) -> None:
        self.seq += 1
        self.history.append(Event(self.seq, kind, data))

    def _fail(self, error: HttpError) -> None:
        with self.cond:
            if self.error is None:
                self.error_count += 1
            self.error = {"code": error.code, "message": error.message}
            self.cond.notify_all()

    def _changed(self) -> bool:
        """False only when the backend is a file whose inode, size and mtime are as at the last poll."""
        path = getattr(self.reader.backend, "path", None)
        if not isinstance(path, str):
            return True
        try:
            st = os.stat(path)
            probe = (st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            probe = (0, -1, 0)
        changed, self._probe = probe != self._probe, probe
        return changed

    def run(self) -> None:
        limits = self.limits
        while not self.stopped.wait(limits.poll_interval):
            if self.subscribers == 0 and time.monotonic() - self.idle_since > limits.linger:
                break
            if not self._changed() and time.monotonic() - self._last_full < limits.full_poll_every:
                continue
            try:
                with self.owner.gate.slot(wait=limits.poll_interval):
                    self.poll()
            except Exception as exc:  # noqa: BLE001 - a failed poll is an event, never the end of the watcher
                error = as_http_error(exc)
                if error.code != "busy":
                    self._fail(error)
        self.owner.forget(self)

    # ------------------------------------------------------------ reading

    def state(self) -> list[tuple[str, str]]:
        """The current state as (kind, data) pairs, stage before its snapshot. Call with ``cond`` held."""
        out = []
        for stage_id, summary in self.summaries.items():
            out.append(("stage", json.dumps({"run_id": self.run_id, **summary}, separators=(",", ":"))))
            if stage_id in self.windows:
                out.append(("snapshot", self.windows[stage_id]))
        return out

    def after(self, seq: int) -> Optional[list[Event]]:
        """The events after position ``seq``, or None when the history no longer reaches back to it."""
        if seq > self.seq:
            return None
        first = self.history[0].seq if self.history else self.seq + 1
        if seq < first - 1:
            return None
        return [e for e in self.history if e.seq > seq]


class Watchers:
    """The run watchers and the stream count: one owner for both, under one lock."""

    def __init__(self, reader: Reader, gate: QueryGate, limits: Limits) -> None:
        self.reader, self.gate, self.limits = reader, gate, limits
        self._lock = threading.Lock()
        self._runs: dict[str, RunWatcher] = {}
        self.streams = 0

    def subscribe(self, run_id: str) -> RunWatcher:
        """A stream slot and the run's watcher (started if need be); HttpError 503 past ``max_streams``."""
        limits = self.limits
        with self._lock:
            if self.streams >= limits.max_streams:
                raise HttpError(
                    503, "too_many_streams", f"{limits.max_streams} event streams are open; retry later", {"Retry-After": "5"}
                )
            watcher = self._runs.get(run_id)
            if watcher is None or watcher.stopped.is_set():
                if len(self._runs) >= limits.max_streams:
                    self._evict_idle()
                watcher = self._runs[run_id] = RunWatcher(run_id, self)
                threading.Thread(target=watcher.run, name=f"cw-serve-watch-{watcher.epoch}", daemon=True).start()
            watcher.subscribers += 1
            self.streams += 1
        return watcher

    def unsubscribe(self, watcher: RunWatcher) -> None:
        with self._lock:
            watcher.subscribers -= 1
            self.streams -= 1
            if watcher.subscribers == 0:
                watcher.idle_since = time.monotonic()
                if not watcher.polled:  # its first poll failed (an unknown run): nothing worth lingering for
                    watcher.stopped.set()
                    if self._runs.get(watcher.run_id) is watcher:
                        del self._runs[watcher.run_id]

    def forget(self, watcher: RunWatcher) -> None:
        with self._lock:
            watcher.stopped.set()
            if self._runs.get(watcher.run_id) is watcher:
                del self._runs[watcher.run_id]

    def _evict_idle(self) -> None:
        idle = sorted((w for w in self._runs.values() if w.subscribers == 0), key=lambda w: w.idle_since)
        for w in idle[: max(1, len(idle) // 2)]:
            w.stopped.set()
            del self._runs[w.run_id]

    def watching(self) -> int:
        with self._lock:
            return len(self._runs)

    def close(self) -> None:
        with self._lock:
            watchers = list(self._runs.values())
            self._runs.clear()
        for w in watchers:
            w.stopped.set()
            with w.cond:
                w.cond.notify_all()
