"""``GET /api/v1/runs/{run_id}/events``: Server-Sent Events of new snapshots and stage changes, on the
file backend and on the Jaeger reader (its api_v3 stand-in); resumption with Last-Event-ID loses
nothing and repeats nothing; heartbeats, the stream cap, errors, the token, no content. (~25 s)"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from email.message import Message

import pytest
from embedded_helpers import embedded_runtime
from stubs import TraceStore, serving
from stubs.jaeger import JaegerStub

import cw_middleware as cw
from cw_middleware._serve.asgi import AsgiApp
from cw_middleware._serve.server import Limits, make_server

RUN = "run-live-1"
STAGE = "agent@1"
CANARY = "CANARY-sse-7f3a1c"
FAST = dict(poll_interval=0.05, heartbeat=0.4, full_poll_every=2.0, linger=30.0)


class Stream:
    """An SSE client on a raw socket: parses frames as the EventSource algorithm does (id, event, data, comments).

    Reads a chunked body too (an ASGI server streams HTTP/1.1 that way; serve closes the connection instead)."""

    def __init__(self, server, run_id=RUN, last_event_id=None, token=None):
        self.sock = socket.create_connection(server.server_address[:2], timeout=10)
        headers = "Accept: text/event-stream\r\nConnection: close\r\n"
        if last_event_id is not None:
            headers += f"Last-Event-ID: {last_event_id}\r\n"
        if token is not None:
            headers += f"Authorization: Bearer {token}\r\n"
        self.sock.sendall(f"GET /api/v1/runs/{run_id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}\r\n".encode())
        wire = b""
        while b"\r\n\r\n" not in wire:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            wire += chunk
        head, _, wire = wire.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = Message()
        for line in lines[1:]:
            name, _, value = line.partition(": ")
            self.headers[name] = value
        self.chunked = (self.headers.get("Transfer-Encoding") or "").lower() == "chunked"
        self._wire, self._left, self._skip, self._last = b"", 0, 0, False
        self.buffer = self._dechunk(wire) if self.chunked else wire
        self.raw = b""
        self.comments = 0

    def _dechunk(self, data: bytes) -> bytes:
        """The body bytes in ``data`` (and what was held back before it), chunk framing removed."""
        self._wire += data
        out = b""
        while self._wire and not self._last:
            if self._skip:
                n = min(self._skip, len(self._wire))
                self._wire, self._skip = self._wire[n:], self._skip - n
                continue
            if self._left == 0:
                end = self._wire.find(b"\r\n")
                if end < 0:
                    break
                size = int(self._wire[:end].split(b";")[0], 16)
                self._wire = self._wire[end + 2 :]
                self._last = size == 0
                self._left = size
                continue
            take = self._wire[: self._left]
            out += take
            self._wire, self._left = self._wire[len(take) :], self._left - len(take)
            if self._left == 0:
                self._skip = 2  # the CRLF after a chunk's data
        return out

    def _recv(self) -> bytes:
        """The next body bytes; b"" at the body's end."""
        while True:
            if self.chunked and self._last:
                return b""
            chunk = self.sock.recv(65536)
            if not chunk or not self.chunked:
                return chunk
            data = self._dechunk(chunk)
            if data:
                return data

    def body_json(self):
        while chunk := self._recv():
            self.buffer += chunk
        return json.loads(self.buffer)

    def _line(self, deadline: float) -> bytes:
        while b"\n" not in self.buffer:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self._recv()
            except TimeoutError:
                raise TimeoutError from None
            if not chunk:
                raise EOFError("the stream ended")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        self.raw += line + b"\n"
        return line

    def next(self, timeout: float = 5.0) -> dict:
        """The next dispatched event: {"id", "event", "data"}; TimeoutError past ``timeout``."""
        deadline = time.monotonic() + timeout
        frame: dict = {"data": []}
        while True:
            line = self._line(deadline).decode()
            if not line:
                if frame["data"]:
                    frame["data"] = json.loads("\n".join(frame["data"]))
                    return frame
                frame = {"data": []}
                continue
            if line.startswith(":"):
                self.comments += 1
                continue
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "data":
                frame["data"].append(value)
            elif field in ("id", "event", "retry"):
                frame[field] = value

    def until(self, predicate, timeout: float = 5.0) -> list[dict]:
        """Events up to and including the first that satisfies ``predicate``."""
        deadline = time.monotonic() + timeout
        got = []
        while True:
            got.append(self.next(max(0.01, deadline - time.monotonic())))
            if predicate(got[-1]):
                return got

    def quiet(self, seconds: float) -> list[dict]:
        """Every event within ``seconds``."""
        got = []
        deadline = time.monotonic() + seconds
        while True:
            try:
                got.append(self.next(max(0.01, deadline - time.monotonic())))
            except TimeoutError:
                return got

    def close(self):
        self.sock.close()


class Agent:
    """An agent writing to the telemetry file through the real wrapper (LiteLLM with mock_response)."""

    def __init__(self, runtime):
        self.runtime = runtime
        self.turn = 0

    def call(self, stage=STAGE, run=RUN, size: int = 1):
        self.turn += 1
        content = f"{CANARY} turn {self.turn} " + "word " * (40 * self.turn * size)
        with cw.stage(run, stage):
            cw.completion(model="gpt-4o", messages=[{"role": "user", "content": content}], mock_response="ok")
        self.runtime.flush(5.0)


@pytest.fixture(params=("serve", "asgi"))  # one contract, two cores: serve's server and cw.asgi_app() under uvicorn
def live(request, tmp_path):
    from http_servers import AsgiServer

    path = tmp_path / "t.jsonl"
    servers = []
    with embedded_runtime(export=f"file:{path}") as runtime:
        agent = Agent(runtime)
        agent.call()

        def serve(url=f"file:{path}", token=None, **limits):
            if request.param == "asgi":
                server = AsgiServer(AsgiApp(cw.reader(url), token, Limits(**{**FAST, **limits})))
                server.context = server.app.context
            else:
                server = make_server(cw.reader(url), "127.0.0.1", 0, token, Limits(**{**FAST, **limits}))
                threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
            servers.append(server)
            return server

        yield agent, serve, path
    for s in servers:
        s.shutdown()
        s.server_close()


def _api(server, path):
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=10)
    try:
        conn.request("GET", path)
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def _window(server, stage=STAGE):
    return _api(server, f"/api/v1/runs/{RUN}/stages/{stage}/context-window")


def test_a_stream_starts_with_the_state_and_announces_each_new_snapshot(live):
    agent, serve, _ = live
    server = serve()
    stream = Stream(server)
    assert stream.status == 200 and stream.headers["Content-Type"] == "text/event-stream"
    stage, snapshot = stream.next(), stream.next()
    assert stage["event"] == "stage" and stage["data"]["run_id"] == RUN and stage["data"]["stage_id"] == STAGE
    assert set(stage["data"]) >= {"kind", "agent_stage", "staleness", "started_at", "last_seen_at"}
    assert snapshot["event"] == "snapshot" and snapshot["data"] == {"run_id": RUN, **_window(server)}
    assert snapshot["id"] == stage["id"] and ":" in snapshot["id"]
    before = snapshot["data"]["input_tokens"]
    agent.call()
    got = stream.until(lambda e: e["event"] == "snapshot")
    newest = got[-1]["data"]
    assert newest == {"run_id": RUN, **_window(server)} and newest["input_tokens"] > before
    assert int(got[-1]["id"].split(":")[1]) > int(snapshot["id"].split(":")[1])
    agent.call(stage="review@1")  # a new stage: a stage event, then its snapshot
    got = stream.until(lambda e: e["event"] == "snapshot" and e["data"]["stage_id"] == "review@1")
    assert [e["event"] for e in got if e["data"]["stage_id"] == "review@1"][:1] == ["stage"]
    assert CANARY.encode() not in stream.raw and b"turn " not in stream.raw
    stream.close()


@pytest.mark.system  # seconds of sockets and threads: the fast tier stays under 3 minutes
def test_last_event_id_resumes_with_nothing_lost_and_nothing_twice(live):
    agent, serve, _ = live
    server = serve()
    control = Stream(server)  # connected throughout: what a reconnecting client must end up with
    control.until(lambda e: e["event"] == "snapshot")
    client = Stream(server)
    client.until(lambda e: e["event"] == "snapshot")
    agent.call()
    seen = client.until(lambda e: e["event"] == "snapshot")
    last_id = seen[-1]["id"]
    client.close()
    for stage in ("agent@1", "review@1", "agent@1"):  # while it is away: a new stage and new snapshots
        agent.call(stage=stage)
        time.sleep(0.2)
    resumed = Stream(server, last_event_id=last_id)
    missed = resumed.until(lambda e: e["event"] == "snapshot" and e["data"] == {"run_id": RUN, **_window(server)}, timeout=5)
    missed += resumed.quiet(0.5)
    control.quiet(1.0)
    control_after = [e for e in _all(control) if _seq(e) > _seq(seen[-1])]
    assert [(e["id"], e["event"], e["data"]) for e in missed] == [(e["id"], e["event"], e["data"]) for e in control_after]
    ids = [e["id"] for e in missed]
    assert len(ids) == len(set(ids)) and all(_seq(e) > _seq(seen[-1]) for e in missed)
    assert {e["data"]["stage_id"] for e in missed if e["event"] == "stage"} == {"review@1"}
    assert sum(e["event"] == "snapshot" for e in missed) >= 3
    resumed.close()
    control.close()


def _seq(event) -> int:
    return int(event["id"].split(":")[1])


def _all(stream):
    """Every event the control stream has dispatched so far (parsed again from its raw bytes)."""
    frames, frame = [], {}
    for line in stream.raw.decode().split("\n"):
        if not line:
            if "data" in frame:
                frame["data"] = json.loads(frame["data"])
                frames.append(frame)
            frame = {}
        elif not line.startswith(":"):
            field, _, value = line.partition(": ")
            frame[field] = value
    return [f for f in frames if "id" in f]


def test_an_unknown_position_gets_a_reset_and_the_state(live):
    _, serve, _ = live
    server = serve()
    stream = Stream(server, last_event_id="0000dead:5")
    reset = stream.next()
    assert reset["event"] == "reset" and reset["data"] == {"run_id": RUN, "reason": "unknown_position"} and "id" not in reset
    assert [e["event"] for e in stream.until(lambda e: e["event"] == "snapshot")] == ["stage", "snapshot"]
    stream.close()


def test_heartbeats_keep_a_quiet_stream_open(live):
    _, serve, _ = live
    server = serve(heartbeat=0.2)
    stream = Stream(server)
    stream.until(lambda e: e["event"] == "snapshot")
    assert stream.quiet(1.0) == [] and stream.comments >= 3
    stream.close()


def test_streams_are_capped_and_errors_are_json(live):
    _, serve, _ = live
    server = serve(max_streams=2)
    open_streams = [Stream(server), Stream(server)]
    for s in open_streams:
        s.next()
    third = Stream(server)
    assert third.status == 503 and third.headers["Retry-After"] == "5"
    assert third.body_json()["error"]["code"] == "too_many_streams"
    missing = Stream(server, run_id="no-such-run")
    assert missing.status == 503  # still capped: the cap is checked first
    open_streams.pop().close()
    time.sleep(0.4 + 0.3)  # a client that left frees its slot at the stream's next write (a heartbeat at most)
    missing = Stream(server, run_id="no-such-run")
    assert missing.status == 404 and missing.body_json()["error"]["code"] == "not_found"
    bad = Stream(server, run_id="a%00b")
    assert bad.status == 400 and bad.body_json()["error"]["code"] == "invalid_id"
    assert server.context.watchers.watching() == 1  # a run that does not exist is not watched on
    for s in open_streams:
        s.close()


def test_the_stream_needs_the_token(live):
    _, serve, _ = live
    server = serve(token="t0k")
    denied = Stream(server)
    assert denied.status == 401 and denied.body_json()["error"]["code"] == "unauthorized"
    allowed = Stream(server, token="t0k")
    assert allowed.next()["event"] == "stage"
    allowed.close()


def test_a_truncated_and_rewritten_file_is_followed(live):
    agent, serve, path = live
    server = serve()
    stream = Stream(server)
    stream.until(lambda e: e["event"] == "snapshot")
    kept = path.read_bytes()
    path.write_bytes(b"")  # copytruncate rotation
    got = stream.until(lambda e: e["event"] == "backend_error")
    assert got[-1]["data"]["error"]["code"] == "not_found" and "id" not in got[-1]
    path.write_bytes(kept)
    agent.call()
    got = stream.until(lambda e: e["event"] == "snapshot")
    assert got[-1]["data"] == {"run_id": RUN, **_window(server)}
    stream.close()


def test_the_stream_works_on_a_trace_backend_by_polling(live, tmp_path):
    agent, serve, path = live
    store = TraceStore()
    store.feed_file(str(path))
    with serving(JaegerStub(store)) as jaeger:
        server = serve(url=f"jaeger+{jaeger.url}", poll_interval=0.1)
        stream = Stream(server)
        first = stream.until(lambda e: e["event"] == "snapshot")[-1]["data"]
        assert first == {"run_id": RUN, **_window(server)}
        fed = path.stat().st_size
        agent.call(size=3)
        with open(path, "rb") as f:  # what the exporter wrote since: sent on to the backend
            f.seek(fed)
            for line in f:
                if line.startswith(b'{"resourceSpans"'):
                    store.feed(json.loads(line))
        got = stream.until(lambda e: e["event"] == "snapshot")[-1]["data"]
        assert got == {"run_id": RUN, **_window(server)} and got["input_tokens"] > first["input_tokens"]
        assert CANARY.encode() not in stream.raw
        stream.close()


def test_the_openapi_document_names_the_stream_and_the_page(live):
    _, serve, _ = live
    doc = _api(serve(), "/openapi.json")
    events = doc["paths"]["/api/v1/runs/{run_id}/events"]["get"]
    assert events["operationId"] == "streamRunEvents" and "text/event-stream" in events["responses"]["200"]["content"]
    assert "Last-Event-ID" in [p["name"] for p in events["parameters"]]
    assert {"/", "/runs/{run_id}", "/healthz"} <= set(doc["paths"])
    context_window = doc["paths"]["/api/v1/runs/{run_id}/stages/{stage_id}/context-window"]["get"]
    assert {"503", "504"} <= set(context_window["responses"])
