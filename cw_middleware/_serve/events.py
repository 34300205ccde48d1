"""``GET /api/v1/runs/{run_id}/events``: Server-Sent Events of a run's new snapshots and stage changes.

The events come from the run's watcher (`watch.py`, which polls any reader); this
module streams them:

    event: stage      data: {"run_id", "stage_id", "kind", "agent_stage", "staleness", "started_at", "last_seen_at"}
    event: snapshot   data: {"run_id", ...the StageContextWindow contract...}
    event: reset      data: {"run_id", "reason"}      the position asked for is gone; the current state follows
    event: backend_error  data: {"run_id", "error": {"code", "message"}}   a poll failed (no id)

The same field names as the JSON API, content-free like it.

Positions. Each stage/snapshot event has ``id: <epoch>:<seq>``: the watcher's epoch
(new when a watcher starts) and its event counter. A watcher keeps its last
``history`` events and keeps polling for ``linger`` seconds after its last stream
closed, so a client that reconnects with ``Last-Event-ID`` gets exactly the events
after that position: nothing lost, nothing twice. A position the watcher no longer
holds (another epoch: the server restarted or the watcher lingered out; or one older
than its history) gets a ``reset`` event followed by the current state, every event of
which carries the current position. A new stream starts with the current state too.

Bounds: at most ``max_streams`` streams at once (then 503 with Retry-After); each
stream's backlog is a cursor into its watcher's bounded history (a client that falls
behind it gets a reset, never an unbounded buffer) and each write is time-boxed by the
socket timeout, so a stuck client is dropped. Watchers poll through the query gate,
so streams never add to the backend's load past ``max_queries``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Optional

from .route import API_PREFIX, Exchange, Route, path_id
from .watch import RunWatcher

RETRY_MS = 2000  # what the stream tells EventSource to wait before reconnecting


def _frame(kind: str, data: str, event_id: Optional[str]) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {kind}\ndata: {data}\n\n".encode()


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
    run_id = path_id(params[0], "run_id")
    watchers = ex.context.watchers
    watcher = watchers.subscribe(run_id)
    try:
        if not watcher.polled:
            ex.context.gate.run(watcher.poll)  # 404 for an unknown run, 502/503 for a failing backend
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
