"""The HTTP core under hostile or unlucky clients: idle and slow sockets, load, odd methods and ids,
non-ASCII tokens, heavy queries, a reader failing mid-scan. Each answer is our JSON error, the
server stays up and its threads stay bounded. (~25 s on a loaded 2-core machine)"""

from __future__ import annotations

import http.client
import json
import select
import socket
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from embedded_helpers import embedded_runtime
from gates import HANG_GUARD, eventually, returns_while_held

import cw_middleware as cw
from cw_middleware._readback import Missing, Reader, stop
from cw_middleware._serve.server import Limits, make_server


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    path = tmp_path_factory.mktemp("limits") / "t.jsonl"
    with embedded_runtime(export=f"file:{path}"):
        with cw.stage("run-1", "agent@1"):
            cw.completion(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], mock_response="ok")
    return f"file:{path}"


@pytest.fixture
def serve(backend):
    servers = []

    def start(token=None, reader=None, start_loop=True, **limits):
        server = make_server(reader or cw.reader(backend), "127.0.0.1", 0, token, Limits(**limits))
        if start_loop:
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append((server, start_loop))
        return server

    yield start
    for s, looping in servers:
        if looping:
            s.shutdown()
        s.server_close()


def _raw(server, request: bytes, timeout: float = 5.0) -> tuple[int, dict, dict]:
    """Send raw bytes, read the whole answer: (status, headers, JSON body)."""
    with socket.create_connection(server.server_address[:2], timeout=timeout) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, json.loads(body) if body else {}


def _get(server, path: str, headers: dict | None = None, method: str = "GET") -> tuple[int, dict, dict]:
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        response = conn.getresponse()
        body = response.read()
        return response.status, dict(response.getheaders()), json.loads(body) if body else {}
    finally:
        conn.close()


# ---------------------------------------------------------------- methods, ids, tokens


@pytest.mark.parametrize("method", ["OPTIONS", "TRACE", "POST", "PUT", "DELETE", "PATCH", "CONNECT"])
def test_other_methods_get_a_json_405_with_allow(serve, method):
    server = serve()
    status, headers, body = _raw(server, f"{method} /api/v1/runs HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert status == 405 and headers["Allow"] == "GET, HEAD" and headers["Content-Type"] == "application/json"
    assert body["error"]["code"] == "method_not_allowed"


def test_unknown_methods_and_bad_request_lines_get_json_not_the_stdlib_html(serve):
    server = serve()
    status, headers, body = _raw(server, b"BREW /api/v1/runs HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 501 and headers["Content-Type"] == "application/json" and headers["Allow"] == "GET, HEAD"
    assert body["error"]["code"] == "method_not_allowed" and "<html" not in json.dumps(body).lower()
    status, headers, body = _raw(server, b"GET / HTTP/9.9\r\n\r\n")
    assert status == 505 and headers["Content-Type"] == "application/json" and body["error"]["code"]
    status, _, body = _raw(server, b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n")
    assert status == 414 and body["error"]["code"] == "request_uri_too_long"
    status, _, body = _raw(server, b"garbage\r\n\r\n")
    assert status == 400 and body["error"]["code"] == "bad_request"


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/api/v1/runs/..%2F..%2Fetc%2Fpasswd/stages", 404, "not_found"),
        ("/api/v1/runs/../stages", 404, "not_found"),
        ("/api/v1/runs//stages", 404, "no_route"),
        ("/api/v1/runs/%/stages", 404, "not_found"),
        ("/api/v1/runs/%ff%fe/stages", 400, "invalid_id"),
        ("/api/v1/runs/a%00b/stages", 400, "invalid_id"),
        ("/api/v1/runs/" + "r" * 300 + "/stages", 400, "invalid_id"),
        ("/api/v1/runs/%E2%9C%93/stages/%F0%9F%98%80/context-window", 404, "not_found"),
        ("/api/v1/runs/run-1/stages/agent@1/context-window/extra", 404, "no_route"),
        ("/api/v1/runs/run-1/events/x", 404, "no_route"),
        ("/static/..%2Fpage.py", 404, "no_route"),
        ("/static/../page.py", 404, "no_route"),
        ("/api/v1//runs", 404, "no_route"),
    ],
)
def test_odd_ids_and_paths_get_json_errors(serve, path, status, code):
    got, headers, body = _get(serve(), path)
    assert (got, body["error"]["code"]) == (status, code) and headers["Content-Type"] == "application/json"


TOKEN = "pässwörd-✓"  # noqa: S105 - a test token; the check mark is outside ISO-8859-1
LATIN_TOKEN = "pässwörd"  # noqa: S105


def test_a_non_ascii_token_sent_as_utf8_is_accepted(serve):
    server = serve(token=TOKEN)
    request = b"GET /api/v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode("utf-8") + b"\r\n\r\n"
    assert _raw(server, request)[0] == 200
    wrong = b"GET /api/v1/runs HTTP/1.1\r\nAuthorization: Bearer " + "pässwörd-x".encode() + b"\r\n\r\n"
    assert _raw(server, wrong)[0] == 401


def test_a_latin1_token_is_accepted_as_utf8_and_as_iso_8859_1(serve):
    server = serve(token=LATIN_TOKEN)
    for encoding in ("utf-8", "latin-1"):  # curl sends UTF-8; browsers and http.client send ISO-8859-1
        request = b"GET /api/v1/runs HTTP/1.1\r\nAuthorization: Bearer " + LATIN_TOKEN.encode(encoding) + b"\r\n\r\n"
        assert _raw(server, request)[0] == 200, encoding
    assert _get(server, "/api/v1/runs", {"Authorization": f"Bearer {LATIN_TOKEN}"})[0] == 200  # http.client: latin-1
    assert _get(server, "/api/v1/runs", {"Authorization": "Bearer passwoerd"})[0] == 401


# ---------------------------------------------------------------- sockets and threads


@pytest.mark.system  # seconds of sockets and threads: the fast tier stays under 3 minutes
def test_idle_sockets_do_not_pin_threads_and_are_closed(serve):
    server = serve(idle_timeout=1.0, head_timeout=5.0, max_connections=32)
    before = threading.active_count()
    socks = [socket.create_connection(server.server_address[:2], timeout=5) for _ in range(300)]
    try:
        time.sleep(0.5)
        assert server.connections <= 32
        assert threading.active_count() - before <= 32 + 2  # the connection threads, not one per socket
        status, _, _ = _get(server, "/healthz")  # refused (503) or answered: never a hang
        assert status in (200, 503)
        deadline = time.monotonic() + 5
        closed = 0
        for sock in socks:
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                data = sock.recv(4096)
            except TimeoutError:
                continue
            closed += 1
            assert data == b"" or data.startswith(b"HTTP/1.0 503")
        assert closed == 300, f"{300 - closed} idle sockets still open after the timeout"
        assert _get(server, "/healthz")[0] == 200
        assert eventually(lambda: server.connections == 0), server.connections  # the last threads let go
    finally:
        for sock in socks:
            sock.close()


def test_a_slow_client_is_cut_at_the_head_deadline(serve):
    server = serve(idle_timeout=5.0, head_timeout=1.0)
    head = b"GET /healthz HTTP/1.0\r\nX-Slow: " + b"a" * 600  # a byte every 0.1 s: never idle, ~60 s to send
    sent, answer = 0, None
    with socket.create_connection(server.server_address[:2], timeout=5) as sock:
        try:
            for byte in head:
                sock.send(bytes([byte]))
                sent += 1
                if select.select([sock], [], [], 0.1)[0]:  # the server spoke, or closed: what did it say?
                    answer = sock.recv(100)
                    break
        except (BrokenPipeError, ConnectionResetError):
            answer = b""
    # Cut while the client still sent and was never idle for the idle timeout: only the head deadline does that.
    assert answer == b"" and sent < len(head), (answer, sent)


def test_the_listen_backlog_holds_a_burst_of_connections(serve):
    server = serve(start_loop=False)  # nothing accepts: only the kernel's queue holds them
    socks = []
    try:
        for _ in range(100):
            sock = socket.socket()
            sock.settimeout(0.5)
            sock.connect(server.server_address[:2])  # with the stdlib's backlog of 5 this times out by the 7th
            socks.append(sock)
    finally:
        for sock in socks:
            sock.close()
    assert len(socks) == 100


@pytest.mark.system  # seconds of sockets and threads: the fast tier stays under 3 minutes
def test_2000_requests_over_20_threads(serve):
    # Every request waits for its query slot however loaded the machine (shedding past query_wait, a 503
    # busy, is the heavy-queries test's): here the threads stay bounded and every request is answered.
    server = serve(query_wait=HANG_GUARD)
    paths = ["/healthz", "/api/v1/runs", "/api/v1/runs/run-1/stages", "/api/v1/runs/run-1/stages/agent@1/context-window"]
    before = threading.active_count()
    peak = [0]

    def one(i: int) -> tuple[int, float]:
        start = time.perf_counter()
        status = _get(server, paths[i % len(paths)])[0]
        peak[0] = max(peak[0], server.connections)
        return status, time.perf_counter() - start

    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(one, range(2000)))
    statuses = [s for s, _ in results]
    times = sorted(t for _, t in results)
    p50, p99 = statistics.median(times), times[int(len(times) * 0.99)]
    print(f"\n2,000 requests over 20 threads: p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max {times[-1] * 1000:.1f} ms")
    assert statuses.count(200) == 2000, {s: statuses.count(s) for s in set(statuses)}
    # 20 clients hold at most 20 connections; a few more threads may be finishing a connection whose answer was sent.
    assert peak[0] <= 25 and threading.active_count() - before <= 25 + server.limits.max_queries + 2


# ---------------------------------------------------------------- heavy queries, failing readers


class _Backend:
    """A SnapshotReader that blocks, or raises what a reader scanning a changing file may raise."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.running = 0
        self._lock = threading.Lock()
        self.raises: BaseException | None = None

    def latest(self, run_id, stage_id):
        return Missing.RUN

    def stages(self, run_id):
        if self.raises is not None:
            raise self.raises
        return None

    def runs(self):
        with self._lock:
            self.running += 1
        self.release.wait(HANG_GUARD)
        with self._lock:
            self.running -= 1
        return []

    def close(self):
        pass


def test_heavy_queries_are_capped_and_time_boxed_while_healthz_stays_fast(serve):
    backend = _Backend()
    server = serve(reader=Reader(backend), max_queries=2, query_wait=0.3, query_timeout=0.8)
    try:
        with ThreadPoolExecutor(2) as pool:
            slow = [pool.submit(_get, server, "/api/v1/runs") for _ in range(2)]
            assert eventually(lambda: backend.running == 2)  # both slots taken, both scans held
            status, headers, body = _get(server, "/api/v1/runs")
            assert status == 503 and body["error"]["code"] == "busy" and headers["Retry-After"] == "1"
            # Answered while both scans are still held: /healthz never waits behind the queries.
            assert returns_while_held(lambda: _get(server, "/healthz")[0], lambda: not backend.release.is_set()) == 200
            for future in slow:
                status, headers, body = future.result()
                assert status == 504 and body["error"]["code"] == "query_timeout" and "Retry-After" in headers
        assert backend.running == 2  # past the time box the scans go on, and keep their slots
        assert _get(server, "/api/v1/runs")[0] == 503
    finally:
        backend.release.set()
    assert eventually(lambda: backend.running == 0)
    assert eventually(lambda: _get(server, "/api/v1/runs")[0] == 200)  # the scans' slots came back
    status, _, body = _get(server, "/api/v1/runs")  # (its headers carry a Date: two answers may straddle a second)
    assert (status, body) == (200, {"runs": []})


class _StoppableBackend(_Backend):
    """A scan that looks, between its lines, whether its request went (as the file reader's loops do)."""

    def runs(self):
        with self._lock:
            self.running += 1
        try:
            deadline = time.monotonic() + 2 * HANG_GUARD  # past the tests' own waits: only a stop ends it sooner
            while not self.release.is_set() and time.monotonic() < deadline:
                stop.check()
                time.sleep(0.01)
            return []
        finally:
            with self._lock:
                self.running -= 1


def _next_query_runs(server, backend) -> None:
    """The stopped query's slot is free again: the next query runs (held until released), and answers."""
    with ThreadPoolExecutor(1) as pool:
        again = pool.submit(_get, server, "/api/v1/runs")
        assert eventually(lambda: backend.running == 1)
        backend.release.set()
        assert again.result()[0] == 200


def test_a_query_past_its_time_box_stops_and_frees_its_slot(serve):
    backend = _StoppableBackend()
    server = serve(reader=Reader(backend), max_queries=1, query_wait=0.3, query_timeout=0.8)
    try:
        status, headers, body = _get(server, "/api/v1/runs")
        assert status == 504 and body["error"]["code"] == "query_timeout" and "Retry-After" in headers
        assert eventually(lambda: backend.running == 0)  # stopped, not released
        assert not backend.release.is_set()
        _next_query_runs(server, backend)
    finally:
        backend.release.set()


def test_a_query_whose_client_left_stops_and_frees_its_slot(serve):
    backend = _StoppableBackend()
    server = serve(reader=Reader(backend), max_queries=1, query_wait=0.3, query_timeout=30)
    try:
        with socket.create_connection(server.server_address[:2], timeout=5) as sock:
            sock.sendall(b"GET /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert eventually(lambda: backend.running == 1)
        assert eventually(lambda: backend.running == 0)  # within a look or two (GONE_POLL), long before the time box
        assert not backend.release.is_set()
        _next_query_runs(server, backend)
    finally:
        backend.release.set()


@pytest.mark.parametrize("error", [OSError(7, "Bus error"), ValueError("mmap offset is greater than file size"), IndexError()])
def test_a_reader_failing_mid_scan_is_a_json_502_and_the_server_stays_up(serve, error):
    backend = _Backend()
    backend.raises = error
    server = serve(reader=Reader(backend))
    status, _, body = _get(server, "/api/v1/runs/r/stages")
    assert status == 502 and body["error"]["code"] == "backend_error"
    assert type(error).__name__ in body["error"]["message"] and "Traceback" not in body["error"]["message"]
    assert _get(server, "/healthz")[0] == 200


# ---------------------------------------------------------------- event-stream clients that never read


class _BigRun:
    """A SnapshotReader whose run's state is some megabytes of events: more than a socket's buffers hold."""

    STAGES = 200

    def latest(self, run_id, stage_id):
        from cw_middleware._kernel.contract import Category, DetailItem, StageContextWindow, Staleness

        details = [DetailItem(category=Category.MEMORY, source=f"memory-file-{i:03d}-" + "x" * 200, tokens=i) for i in range(40)]
        return StageContextWindow(stage_id=stage_id, available=True, staleness=Staleness.LIVE, input_tokens=1, details=details)

    def stages(self, run_id):
        from cw_middleware._kernel.contract import Staleness
        from cw_middleware._readback import StageSummary

        return [StageSummary(f"stage-{i:03d}@1", "agent", Staleness.LIVE) for i in range(self.STAGES)]

    def runs(self):
        return []

    def history(self, run_id, stage_id, limit=100):
        return []

    def close(self):
        pass


def test_event_stream_clients_that_never_read_hold_bounded_threads_and_memory_and_are_dropped(serve):
    import tracemalloc

    big = _BigRun()
    state = big.STAGES * len(json.dumps(big.latest("r", "s").model_dump(mode="json")))  # what each stream is sent first
    server = serve(reader=Reader(big), max_streams=2, idle_timeout=1.0, heartbeat=0.5, max_connections=16)
    threads_before = threading.active_count()
    tracemalloc.start()
    clients = []
    try:
        for _ in range(12):  # six times the stream cap
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a client that reads nothing, with a small window
            sock.connect(server.server_address[:2])
            sock.sendall(b"GET /api/v1/runs/r/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            clients.append(sock)
        peak_threads = peak_connections = peak_streams = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            peak_threads = max(peak_threads, threading.active_count() - threads_before)
            peak_connections = max(peak_connections, server.connections)
            peak_streams = max(peak_streams, server.context.watchers.streams)
            if peak_streams and server.context.watchers.streams == 0 and server.connections == 0:
                break  # every stream's write timed out: the clients (still connected) hold nothing
            time.sleep(0.02)
        _, peak_memory = tracemalloc.get_traced_memory()
        assert peak_streams == 2 and server.context.watchers.streams == 0 and server.connections == 0
        # The watcher's state and each served stream's first frames; nothing per client that never reads
        # (twelve of them would be 12 states).
        assert peak_memory < 6 * state, (peak_memory, state)
        assert peak_connections <= 12 and peak_threads <= 12 + 1 + server.limits.max_queries + 2
        assert _get(server, "/healthz")[0] == 200  # and the server goes on
    finally:
        tracemalloc.stop()
        for sock in clients:
            sock.close()
