"""``cw.asgi_app()``: the read-back API mounted in the user's own ASGI app (issue 40 item 3).

The HTTP contract itself runs against both cores in tests/test_server.py and
tests/test_server_events.py; here, what only a mount has: a path prefix (Starlette's ``Mount``,
uvicorn's ``--root-path``) carried by the page's links and its API calls, the host's event loop
never held by a backend read, the connection cap, lifespan, and the app driven in-process by
nothing but the ASGI calling convention.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import urllib.error
import urllib.request

import pytest
from embedded_helpers import embedded_runtime
from http_servers import AsgiServer

import cw_middleware as cw
from cw_middleware._serve.asgi import AsgiApp
from cw_middleware._serve.limits import Limits

RUN, STAGE = "run/α 1", "agent@1"  # a "/" and a non-ASCII letter: percent-encoded in every path


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    path = tmp_path_factory.mktemp("asgi") / "t.jsonl"
    with embedded_runtime(export=f"file:{path}"):
        with cw.stage(RUN, STAGE):
            cw.completion(model="gpt-4o", messages=[{"role": "user", "content": "hi " * 50}], mock_response="ok")
    return f"file:{path}"


def _get(url: str, headers: dict | None = None) -> tuple[int, bytes, dict]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read(), {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as err:
        return err.code, err.read(), {k.lower(): v for k, v in err.headers.items()}


def _quoted(run: str) -> str:
    return urllib.request.quote(run, safe="")


# ---------------------------------------------------------------- mounted in a real Starlette app, under uvicorn


def _starlette_app(cw_app):
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Mount, Route

    async def hello(request):
        return PlainTextResponse("the host app")

    @contextlib.asynccontextmanager
    async def lifespan(_):
        yield
        cw_app.close()  # Starlette does not pass lifespan on to a mounted app: the host closes it

    return Starlette(routes=[Route("/hello", hello), Mount("/cw", app=cw_app)], lifespan=lifespan)


def test_mounted_under_a_path_the_api_the_page_and_the_host_app_answer(backend):
    cw_app = cw.asgi_app(backend)
    server = AsgiServer(_starlette_app(cw_app))
    try:
        status, body, headers = _get(f"{server.url}/cw/api/v1/runs")
        assert status == 200 and headers["content-type"] == "application/json"
        assert [r["run_id"] for r in json.loads(body)["runs"]] == [RUN]
        status, body, _ = _get(f"{server.url}/cw/api/v1/runs/{_quoted(RUN)}/stages/{STAGE}/context-window")
        window = json.loads(body)
        assert status == 200 and window["stage_id"] == STAGE and window["available"] is True
        expected = cw.reader(backend).context_window(RUN, STAGE).model_dump(mode="json")
        assert window == expected  # the same answer as the library call
        status, body, _ = _get(f"{server.url}/cw/api/v1/runs/nope/stages")
        assert status == 404 and json.loads(body)["error"]["code"] == "not_found"
        assert _get(f"{server.url}/hello")[1] == b"the host app"
        # The page: its files and every link and API call it makes carry the mount's path.
        status, page, headers = _get(f"{server.url}/cw/")
        assert status == 200 and headers["content-type"].startswith("text/html")
        assert b'data-root="/cw"' in page and b'src="/cw/static/app.js"' in page and b'href="/cw/"' in page
        assert b'"/static/' not in page
        assert "default-src 'none'" in headers["content-security-policy"]
        for name in ("app.js", "app.css", "favicon.svg"):
            assert _get(f"{server.url}/cw/static/{name}")[0] == 200, name
        assert _get(f"{server.url}/cw/runs/{_quoted(RUN)}")[0] == 200
    finally:
        server.close()
    assert cw_app.closing  # the host's shutdown closed it (Starlette does not pass lifespan to a mount)


def test_under_uvicorns_root_path_the_routes_are_found(backend):
    server = AsgiServer(cw.asgi_app(backend), root_path="/proxied")
    try:
        assert _get(f"{server.url}/api/v1/runs")[0] == 200  # a proxy in front strips the prefix
        status, page, _ = _get(f"{server.url}/")
        assert status == 200 and b'src="/proxied/static/app.js"' in page  # and the page asks for it back
    finally:
        server.close()


def test_a_slow_backend_read_never_holds_the_host_apps_event_loop(backend):
    reader = cw.reader(backend)
    real = reader.runs

    def slow_runs():
        time.sleep(1.5)
        return real()

    reader.runs = slow_runs  # type: ignore[method-assign]
    server = AsgiServer(_starlette_app(AsgiApp(reader)))
    try:
        slow = threading.Thread(target=_get, args=(f"{server.url}/cw/api/v1/runs",))
        slow.start()
        time.sleep(0.2)
        started = time.monotonic()
        assert _get(f"{server.url}/hello")[1] == b"the host app"
        assert time.monotonic() - started < 0.5  # answered while the read sleeps on its own thread
        slow.join()
    finally:
        server.close()


# ---------------------------------------------------------------- in-process: nothing but the ASGI calling convention


def _call(app, path: str, method: str = "GET", headers: tuple = (), kind: str = "http") -> list[dict]:
    """One request straight to the app (no server); the messages it sent back."""
    sent: list[dict] = []
    messages = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive():
        if messages:
            return messages.pop(0)
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    raw = path.split("?", 1)[0].encode()
    scope = {
        "type": kind,
        "method": method,
        "path": urllib.request.unquote(path.split("?", 1)[0]),
        "raw_path": raw,
        "query_string": path.partition("?")[2].encode(),
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), *headers],
    }
    asyncio.run(asyncio.wait_for(app(scope, receive, send), 10))
    return sent


def _status_body(sent: list[dict]) -> tuple[int, bytes]:
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_in_process_the_app_answers_as_serve_does(backend):
    app = cw.asgi_app(backend, "t0k")
    status, body = _status_body(_call(app, "/healthz"))
    assert status == 200 and json.loads(body) == {"status": "ok"}
    status, body = _status_body(_call(app, "/api/v1/runs"))
    assert status == 401 and json.loads(body)["error"]["code"] == "unauthorized"
    token = ((b"authorization", b"Bearer t0k"),)
    status, body = _status_body(_call(app, f"/api/v1/runs/{_quoted(RUN)}/stages", headers=token))
    assert status == 200 and json.loads(body)["run_id"] == RUN  # an encoded "/" stays inside its id
    status, body = _status_body(_call(app, f"/api/v1/runs/{_quoted(RUN)}/stages/{STAGE}/history?limit=0", headers=token))
    assert status == 400 and json.loads(body)["error"]["code"] == "invalid_parameter"
    status, body = _status_body(_call(app, "/api/v1/runs", method="POST", headers=token))
    assert status == 405 and json.loads(body)["error"]["code"] == "method_not_allowed"
    sent = _call(app, "/api/v1/runs", method="HEAD", headers=token)
    assert sent[0]["status"] == 200 and sent[1]["body"] == b""
    assert dict(sent[0]["headers"])[b"content-length"] != b"0"  # the length a GET would have
    assert _call(app, "/", kind="websocket") == [{"type": "websocket.close", "code": 1008}]


def test_lifespan_shutdown_closes_the_app(backend):
    app = cw.asgi_app(backend)
    incoming = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[dict] = []

    async def receive():
        return incoming.pop(0)

    async def send(message):
        sent.append(message)

    asyncio.run(app({"type": "lifespan"}, receive, send))
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert app.closing


def test_past_the_connection_cap_a_request_is_a_503(backend):
    reader = cw.reader(backend)
    entered, release = threading.Event(), threading.Event()
    real = reader.runs

    def held_runs():
        entered.set()
        release.wait(10)
        return real()

    reader.runs = held_runs  # type: ignore[method-assign]
    app = AsgiApp(reader, limits=Limits(max_connections=1))
    server = AsgiServer(app)
    try:
        first = threading.Thread(target=_get, args=(f"{server.url}/api/v1/runs",))
        first.start()
        assert entered.wait(10)
        status, body, headers = _get(f"{server.url}/healthz")
        assert status == 503 and json.loads(body)["error"]["code"] == "busy" and headers["retry-after"] == "1"
        release.set()
        first.join()
        deadline = time.monotonic() + 5
        while app.requests and time.monotonic() < deadline:  # a request's slot frees just after its answer
            time.sleep(0.01)
        assert app.requests == 0
        assert _get(f"{server.url}/healthz")[0] == 200
    finally:
        release.set()
        server.close()


def test_asgi_app_is_loaded_only_when_asked_for():
    import subprocess
    import sys

    code = (
        "import sys, cw_middleware as cw; print('cw_middleware._serve' in sys.modules); "
        "cw.asgi_app; print('cw_middleware._serve.asgi' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert out == ["False", "True"]


def test_the_docs_mount_runs_as_written(backend, monkeypatch, tmp_path):
    """docs/in-your-app.md's Starlette app, as written, under uvicorn: the API and the page under its path."""
    from docs_blocks import block

    monkeypatch.setenv("CW_BACKEND", backend)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(block("asgi-mount").code, "docs/in-your-app.md", "exec"), namespace)
    server = AsgiServer(namespace["app"])
    try:
        status, body, _ = _get(f"{server.url}/cw/api/v1/runs")
        assert status == 200 and [r["run_id"] for r in json.loads(body)["runs"]] == [RUN]
        assert b'src="/cw/static/app.js"' in _get(f"{server.url}/cw/")[1]
    finally:
        server.close()
    assert namespace["context_window"].closing
