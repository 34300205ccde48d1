"""``GET /api/v1/runs/{run_id}/events``: Server-Sent Events of a run's new snapshots and stage changes.

Generic over any reader, by polling: one `RunWatcher` per watched run asks the reader
for the run's stages every ``poll_interval`` and, for each stage whose summary moved
(new activity, staleness), for its context window; what changed becomes an event:

    event: stage      data: {"run_id", "stage_id", "kind", "agent_stage", "staleness", "started_at", "last_seen_at"}
    event: snapshot   data: {"run_id", ...the StageContextWindow contract...}
    event: reset      data: {"run_id", "reason"}      the position asked for is gone; the current state follows
    event: backend_error  data: {"run_id", "error": {"code", "message"}}   a poll failed (no id)

The same field names as the JSON API, content-free like it. A snapshot event says the
stage's *latest* answer changed: two snapshots landing within one poll interval
announce once, with the newer (the reader protocol answers the latest only).

Positions. Each stage/snapshot event has ``id: <epoch>:<seq>``: the watcher's epoch
(new when a watcher starts) and its event counter. A watcher keeps its last
``history`` events and keeps polling for ``linger`` seconds after its last stream
closed, so a client that reconnects with ``Last-Event-ID`` gets exactly the events
after that position: nothing lost, nothing twice. A position the watcher no longer
holds (another epoch: the server restarted or the watcher lingered out; or one older
than its history) gets a ``reset`` event followed by the current state, every event of
which carries the current position. A new stream starts with the current state too.

The file backend (the default) is probed cheaply between polls: while the file's
inode, size and mtime stay the same, the reader is asked again only every
``full_poll_every`` seconds (for the staleness horizon); a rotated or truncated file
changes the probe and is read again at once.

Bounds: at most ``max_streams`` streams at once (then 503 with Retry-After); each
stream's backlog is a cursor into its watcher's bounded history (a client that falls
behind it gets a reset, never an unbounded buffer) and each write is time-boxed by the
socket timeout, so a stuck client is dropped. Watchers poll through the query gate,
so streams never add to the backend's load past ``max_queries``.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Optional

from ..errors import NotFound
from .api import as_http_error, query, window_json
from .core import API_PREFIX, Context, Exchange, HttpError, Route, segment

logger = logging.getLogger("cw_middleware")

RETRY_MS = 2000  # what the stream tells EventSource to wait before reconnecting


@dataclass(frozen=True)
class Event:
    seq: int
    kind: str  # "stage" | "snapshot"
    data: str  # one line of JSON


def _frame(kind: str, data: str, event_id: Optional[str]) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {kind}\ndata: {data}\n\n".encode()


def _stage_key(summary: dict[str, Any]) -> tuple[Any, ...]:
    # A stage *changes* when it appears or its kind or staleness does; last_seen_at moves with every snapshot.
    return summary.get("kind"), summary.get("staleness")


class RunWatcher:
    """Polls one run and keeps its current state and its last events (module docstring)."""

    def __init__(self, run_id: str, context: Context) -> None:
        self.run_id, self.context = run_id, context
        self.epoch = secrets.token_hex(4)
        self.cond = threading.Condition()
        self.seq = 0
        self.history: deque[Event] = deque(maxlen=context.limits.history)
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
            summaries = {s.stage_id: s.as_dict() for s in self.context.reader.stages(self.run_id)}
            now = time.monotonic()
            windows: dict[str, str] = {}
            for stage_id, summary in summaries.items():
                moved = summary != self.summaries.get(stage_id)
                stale = now - self._window_asked.get(stage_id, 0.0) >= self.context.limits.full_poll_every
                if moved or stale or stage_id not in self.windows:
                    try:
                        answer = window_json(self.context, self.run_id, stage_id)
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
        path = getattr(self.context.reader.backend, "path", None)
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
        limits = self.context.limits
        while not self.stopped.wait(limits.poll_interval):
            if self.subscribers == 0 and time.monotonic() - self.idle_since > limits.linger:
                break
            if not self._changed() and time.monotonic() - self._last_full < limits.full_poll_every:
                continue
            try:
                with self.context.gate.slot(wait=limits.poll_interval):
                    self.poll()
            except Exception as exc:  # noqa: BLE001 - a failed poll is an event, never the end of the watcher
                error = as_http_error(exc)
                if error.code != "busy":
                    self._fail(error)
        self.context.watchers.forget(self)

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

    def __init__(self) -> None:
        self._bound: Optional[Context] = None
        self._lock = threading.Lock()
        self._runs: dict[str, RunWatcher] = {}
        self.streams = 0

    def bind(self, context: Context) -> None:
        """The context the watchers poll through (it holds this object too: set once, after both exist)."""
        self._bound = context

    @property
    def context(self) -> Context:
        assert self._bound is not None, "Watchers.bind() first"
        return self._bound

    def subscribe(self, run_id: str) -> RunWatcher:
        """A stream slot and the run's watcher (started if need be); HttpError 503 past ``max_streams``."""
        limits = self.context.limits
        with self._lock:
            if self.streams >= limits.max_streams:
                raise HttpError(
                    503, "too_many_streams", f"{limits.max_streams} event streams are open; retry later", {"Retry-After": "5"}
                )
            watcher = self._runs.get(run_id)
            if watcher is None or watcher.stopped.is_set():
                if len(self._runs) >= limits.max_streams:
                    self._evict_idle()
                watcher = self._runs[run_id] = RunWatcher(run_id, self.context)
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


def _position(header: Optional[str]) -> Optional[tuple[str, int]]:
    if not header:
        return None
    epoch, _, seq = header.strip().partition(":")
    try:
        return epoch, int(seq)
    except ValueError:
        return epoch, -1


def _news(watcher: RunWatcher, ex: Exchange, cursor: int, errors_seen: int) -> Callable[[], bool]:
    """What wakes a stream: an event past its cursor, a new failure, the watcher or the server stopping."""
    return lambda: watcher.seq > cursor or watcher.error_count != errors_seen or watcher.stopped.is_set() or ex.closing


def _stream(ex: Exchange, watcher: RunWatcher) -> Iterator[bytes]:
    """The frames of one stream, until the client goes, the watcher stops or the server closes."""
    heartbeat = ex.context.limits.heartbeat
    asked = _position(ex.headers.get("Last-Event-ID"))
    yield f"retry: {RETRY_MS}\n\n".encode()
    with watcher.cond:
        pending = None
        if asked is not None and asked[0] == watcher.epoch:
            pending = watcher.after(asked[1])
        if pending is None:
            frames = []
            if asked is not None:
                reason = "unknown_position" if asked[0] != watcher.epoch else "position_too_old"
                data = json.dumps({"run_id": watcher.run_id, "reason": reason}, separators=(",", ":"))
                frames.append(_frame("reset", data, None))
            head = f"{watcher.epoch}:{watcher.seq}"
            frames.extend(_frame(kind, data, head) for kind, data in watcher.state())
            pending, cursor = [], watcher.seq
        else:
            frames, cursor = [], asked[1] if asked else 0
        errors_seen = watcher.error_count - (1 if watcher.error else 0)
    yield b"".join(frames)
    while True:
        frames = [_frame(e.kind, e.data, f"{watcher.epoch}:{e.seq}") for e in pending]
        if frames:
            cursor = pending[-1].seq
            yield b"".join(frames)
        with watcher.cond:
            news = _news(watcher, ex, cursor, errors_seen)
            quiet_until = time.monotonic() + heartbeat
            # Wake at least every second to notice a client that left (its slot frees within a second).
            while not watcher.cond.wait_for(news, timeout=min(1.0, heartbeat, max(0.0, quiet_until - time.monotonic()))):
                if ex.client_gone():
                    return
                if time.monotonic() >= quiet_until:
                    break
            if watcher.stopped.is_set() or ex.closing:
                return
            frames = []
            if watcher.error_count != errors_seen and watcher.error is not None:
                data = json.dumps({"run_id": watcher.run_id, "error": watcher.error}, separators=(",", ":"))
                frames.append(_frame("backend_error", data, None))
            errors_seen = watcher.error_count
            later = watcher.after(cursor)
            if later is None:  # fell behind the history: start over from the current state
                data = json.dumps({"run_id": watcher.run_id, "reason": "fell_behind"}, separators=(",", ":"))
                frames.append(_frame("reset", data, None))
                head = f"{watcher.epoch}:{watcher.seq}"
                frames.extend(_frame(kind, data, head) for kind, data in watcher.state())
                cursor, later = watcher.seq, []
            pending = later
        if frames:
            yield b"".join(frames)
        elif not pending:
            yield b": heartbeat\n\n"


def _events(ex: Exchange, params: list[str]) -> None:
    try:
        run_id = segment(params[0], "run_id")
    except Exception as exc:  # noqa: BLE001 - ConfigError: a bad id
        raise as_http_error(exc) from None
    watchers = ex.context.watchers
    watcher = watchers.subscribe(run_id)
    try:
        if not watcher.polled:
            query(ex.context, watcher.poll)  # 404 for an unknown run, 502/503 for a failing backend
        ex.start_stream("text/event-stream", {"X-Accel-Buffering": "no"})
        if ex.command == "HEAD":
            return
        for chunk in _stream(ex, watcher):
            ex.wfile.write(chunk)
            ex.wfile.flush()
    except (BrokenPipeError, ConnectionResetError, TimeoutError):
        pass  # the client went away, or stopped reading for longer than the write time box
    finally:
        watchers.unsubscribe(watcher)


ROUTES = [Route(f"{API_PREFIX}/runs/{{run_id}}/events", _events)]
