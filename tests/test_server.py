"""The HTTP read-back endpoint: status codes, token, OpenAPI, no stack traces.

One contract, two cores: each test runs against ``cw-middleware serve``'s server and against
``cw.asgi_app()`` under a real uvicorn (the `serve` fixture's two params); a test of what only
the stdlib core does (its Server header, a wildcard bind) says so.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.parse
import urllib.request

import pytest
from embedded_helpers import embedded_runtime

import cw_middleware as cw
from cw_middleware._serve.server import make_server

CORES = ("serve", "asgi")


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    path = tmp_path_factory.mktemp("srv") / "t.jsonl"
    with embedded_runtime(export=f"file:{path}"):
        with cw.stage("run-1", "agent@1"):
            cw.completion(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], mock_response="ok")
    return f"file:{path}"


@pytest.fixture(params=CORES)
def serve(request, backend):
    from http_servers import AsgiServer

    servers = []

    def start(token=None, url=backend, origins=()):
        if request.param == "asgi":
            server = AsgiServer(cw.asgi_app(url, token, allowed_origins=origins))
        else:
            server = make_server(cw.reader(url), "127.0.0.1", 0, token, allowed_origins=origins)
            threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def _get(url, token=None, method="GET"):
    req = urllib.request.Request(url, method=method, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read()), r.headers  # case-blind, as HTTP's names are
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), err.headers


def test_binds_loopback_by_default(serve):
    assert serve().server_address[0] == "127.0.0.1"


def test_answers_and_errors(serve):
    base = serve().url + "/api/v1/runs"
    status, body, headers = _get(f"{base}/run-1/stages/agent@1/context-window")
    assert status == 200 and body["available"] is True and headers["Content-Type"] == "application/json"
    assert _get(f"{base}/run-1/stages/agent%401/context-window")[0] == 200  # percent-encoded ids
    status, body, _ = _get(f"{base}/run-1/stages/nope/context-window")
    assert status == 404 and body == {"error": {"code": "not_found", "message": "stage 'nope' not found in run 'run-1'"}}
    assert _get(f"{base}/run-2/stages")[0] == 404
    status, body, _ = _get(f"{base}/run-1/stages/{'x' * 300}/context-window")
    assert status == 400 and body["error"]["code"] == "invalid_id"
    status, body, _ = _get(f"{base}/run-1/stages/bad%00id/context-window")
    assert status == 400 and "control" in body["error"]["message"]
    assert _get(f"{base}/run-1/stages/%ff/context-window")[0] == 400
    assert _get(f"{base}/run-1/stages/agent@1/other")[0] == 404
    assert _get(f"{base}/run-1/stages/agent@1/context-window", method="POST")[0] == 405


def test_bearer_token(serve):
    server = serve(token="s3cret")
    url = f"{server.url}/api/v1/runs/run-1/stages/agent@1/context-window"
    status, body, headers = _get(url)
    assert status == 401 and headers["WWW-Authenticate"] == "Bearer" and "Traceback" not in json.dumps(body)
    assert _get(url, token="wrong")[0] == 401
    assert _get(url, token="s3cret")[0] == 200
    assert _get(f"{server.url}/openapi.json")[0] == 401
    assert _get(f"{server.url}/healthz")[0] == 200


def test_openapi_document(serve):
    status, doc, _ = _get(serve().url + "/openapi.json")
    assert status == 200 and doc["openapi"].startswith("3.")
    path = doc["paths"]["/api/v1/runs/{run_id}/stages/{stage_id}/context-window"]["get"]
    assert set(path["responses"]) >= {"200", "400", "401", "404"}
    schema = doc["components"]["schemas"]["StageContextWindow"]
    assert {"stage_id", "available", "staleness", "breakdown", "warnings", "details"} <= set(schema["properties"])
    json.dumps(doc)  # every $ref target is present
    refs = {v.split("/")[-1] for v in _refs(doc)}
    assert refs <= set(doc["components"]["schemas"])


def test_backend_failure_is_503_without_traceback(serve, tmp_path):
    path = tmp_path / "t.jsonl"
    server = serve(url=f"file:{path}")
    path.mkdir()  # the file became unreadable after the server started
    status, body, _ = _get(f"{server.url}/api/v1/runs/r/stages/s/context-window")
    assert status == 503 and body["error"]["code"] == "backend_unavailable"


def _refs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref":
                yield v
            else:
                yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def test_runs_are_listed(serve, tmp_path):
    server = serve(token="t0k")
    assert _get(f"{server.url}/api/v1/runs")[0] == 401
    status, body, _ = _get(f"{server.url}/api/v1/runs", token="t0k")
    assert status == 200 and [r["run_id"] for r in body["runs"]] == ["run-1"]
    run = body["runs"][0]
    assert run["stages"] == 1 and run["live_stages"] == 0 and run["last_seen_at"]
    status, doc, _ = _get(f"{server.url}/openapi.json", token="t0k")
    listing = doc["paths"]["/api/v1/runs"]["get"]
    assert listing["operationId"] == "listRuns" and "200" in listing["responses"]
    assert {"run_id", "stages", "live_stages"} <= set(doc["components"]["schemas"]["RunSummary"]["properties"])
    empty = serve(url=f"file:{tmp_path / 'none.jsonl'}")
    status, body, _ = _get(f"{empty.url}/api/v1/runs")
    assert status == 200 and body == {"runs": []}


def test_a_file_that_is_not_otlp_json_is_a_502(serve, tmp_path):
    path = tmp_path / "passwd"
    path.write_text("root:x:0:0:root:/root:/bin/bash\n")
    server = serve(url=f"file:{path}")
    for route in ("/api/v1/runs", "/api/v1/runs/r/stages", "/api/v1/runs/r/stages/s/context-window"):
        status, body, _ = _get(server.url + route)
        assert status == 502 and "not an OTLP JSON file" in body["error"]["message"], route


# ---------------------------------------------------------------- who may ask: Host (DNS rebinding), token


def _raw(server, path, headers, as_json=True):
    """A GET with exactly these headers (Host included), as a browser or an attacker's page would send them."""
    import http.client

    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers:
            conn.putheader(name, value)
        conn.endheaders()
        response = conn.getresponse()
        body = response.read()
        return response.status, json.loads(body or b"null") if as_json else body
    finally:
        conn.close()


def test_without_a_token_a_foreign_host_is_refused_as_dns_rebinding(serve):
    server = serve()
    port = server.server_address[1]
    for path in ("/api/v1/runs", "/api/v1/runs/run-1/stages/agent@1/context-window", "/api/v1/runs/run-1/events", "/"):
        status, body = _raw(server, path, [("Host", f"rebind.attacker.example:{port}")])
        assert status == 403 and body["error"]["code"] == "host_not_allowed", path
        assert "run-1" not in json.dumps(body)
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST.", f"[::1]:{port}", "127.0.0.1"):
        assert _raw(server, "/api/v1/runs", [("Host", host)])[0] == 200, host


def test_with_a_token_the_token_decides_whatever_the_host(serve):
    server = serve(token="s3cret")
    host = ("Host", "cw.internal.example")
    assert _raw(server, "/api/v1/runs", [host, ("Authorization", "Bearer s3cret")])[0] == 200
    assert _raw(server, "/api/v1/runs", [host])[0] == 401


def test_two_authorization_or_host_headers_are_a_400(serve, request):
    server = serve(token="s3cret")
    local = ("Host", "127.0.0.1")
    for headers in (
        [local, ("Authorization", "Bearer s3cret"), ("Authorization", "Bearer wrong")],
        [local, ("Authorization", "Bearer wrong"), ("Authorization", "Bearer s3cret")],
        [local, local, ("Authorization", "Bearer s3cret")],
    ):
        if headers[1] == local and request.node.callspec.params["serve"] == "asgi":
            # h11 (uvicorn's parser) refuses two Hosts itself, in its own words, before the app sees the request.
            assert _raw(server, "/api/v1/runs", headers, as_json=False)[0] == 400
            continue
        status, body = _raw(server, "/api/v1/runs", headers)
        assert status == 400 and body["error"]["code"] == "bad_request", headers


def test_a_server_bound_to_every_address_answers_to_ip_addresses_but_not_to_names(backend):
    server = make_server(cw.reader(backend), "0.0.0.0", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        assert _raw(server, "/api/v1/runs", [("Host", f"10.1.2.3:{port}")])[0] == 200
        assert _raw(server, "/api/v1/runs", [("Host", f"[fd00::1]:{port}")])[0] == 200
        assert _raw(server, "/api/v1/runs", [("Host", f"rebind.attacker.example:{port}")])[0] == 403
    finally:
        server.shutdown()
        server.server_close()


def test_the_openapi_document_lists_every_route_itself_and_the_page_files_included(serve):
    from cw_middleware._serve.dispatch import ROUTES

    status, doc, _ = _get(serve().url + "/openapi.json")
    assert status == 200
    assert sorted(doc["paths"]) == sorted(route.pattern for route in ROUTES)
    assert {"/openapi.json", "/static/{name}", "/favicon.ico"} <= set(doc["paths"])


def _wire(url: str, path: str) -> tuple[bytes, bytes]:
    """The response head as the server wrote it (http.client would strip the values), and the body."""
    import socket
    from urllib.parse import urlsplit

    where = urlsplit(url)
    with socket.create_connection((where.hostname, where.port), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {where.netloc}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head, body


def test_the_server_header_is_our_name_without_a_trailing_space(serve, request):
    if request.node.callspec.params["serve"] == "asgi":
        pytest.skip("the Server header is the ASGI server's")
    head, _ = _wire(serve().url, "/healthz")
    (server,) = [line for line in head.split(b"\r\n") if line.lower().startswith(b"server:")]
    assert server == b"Server: cw-middleware"


def test_the_page_has_an_icon_served_without_the_token(serve):
    import xml.etree.ElementTree as ET

    server = serve(token="t0k")
    head, page = _wire(server.url, "/")
    assert b" 200 " in head.split(b"\r\n")[0]
    assert b'<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in page
    head, icon = _wire(server.url, "/static/favicon.svg")
    assert b" 200 " in head.split(b"\r\n")[0] and b"content-type: image/svg+xml" in head.lower()
    assert ET.fromstring(icon).tag == "{http://www.w3.org/2000/svg}svg"
    head, same = _wire(server.url, "/favicon.ico")  # where a browser asks when it has not read the page
    assert b" 200 " in head.split(b"\r\n")[0] and same == icon


def _answer(url, method="GET", headers=None):
    """Status, body bytes and headers of any answer (an error's too)."""
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as err:
        return err.code, err.read(), err.headers


APP = "http://app.example:3000"


def test_an_allowed_origin_may_read_the_api_and_no_other(serve):
    server = serve(origins=[APP + "/"])  # a trailing slash is the same origin
    window = server.url + "/api/v1/runs/run-1/stages/agent@1/context-window"
    status, _, headers = _answer(window, headers={"Origin": APP})
    assert status == 200 and headers["Access-Control-Allow-Origin"] == APP and "Origin" in headers["Vary"]
    status, _, headers = _answer(window, headers={"Origin": "http://evil.example"})
    assert status == 200 and headers["Access-Control-Allow-Origin"] is None  # the browser keeps it from that page
    status, body, headers = _answer(server.url + "/api/v1/runs/run-1/stages/nope/context-window", headers={"Origin": APP})
    assert status == 404 and headers["Access-Control-Allow-Origin"] == APP  # the page reads the error too
    assert json.loads(body)["error"]["code"] == "not_found"

    # The preflight a page sends before a request with the token or Last-Event-ID.
    asked = {"Origin": APP, "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "authorization"}
    status, body, headers = _answer(window, method="OPTIONS", headers=asked)
    assert status == 204 and body == b"" and headers["Access-Control-Allow-Origin"] == APP
    allowed = {h.strip().lower() for h in headers["Access-Control-Allow-Headers"].split(",")}
    assert {"authorization", "last-event-id"} <= allowed
    assert {m.strip() for m in headers["Access-Control-Allow-Methods"].split(",")} == {"GET", "HEAD"}
    status, body, _ = _answer(window, method="OPTIONS", headers={**asked, "Origin": "http://evil.example"})
    assert status == 405 and json.loads(body)["error"]["code"] == "method_not_allowed"


def test_no_origin_is_allowed_by_default_and_the_token_rules_stay(serve):
    window = "/api/v1/runs/run-1/stages/agent@1/context-window"
    status, _, headers = _answer(serve().url + window, headers={"Origin": APP})
    assert status == 200 and headers["Access-Control-Allow-Origin"] is None and headers["Vary"] is None
    assert _answer(serve().url + window, method="OPTIONS", headers={"Origin": APP})[0] == 405
    server = serve(token="s3cret", origins=[APP])
    status, body, headers = _answer(server.url + window, headers={"Origin": APP})
    assert status == 401 and headers["Access-Control-Allow-Origin"] == APP
    status, _, _ = _answer(server.url + window, headers={"Origin": APP, "Authorization": "Bearer s3cret"})
    assert status == 200


@pytest.mark.parametrize("bad", ["app.example", "ftp://app.example", "http://app.example/path", "http://", "*"])
def test_a_bad_origin_is_refused_when_the_app_is_made(bad):
    with pytest.raises(cw.ConfigError, match="not an origin"):
        cw.asgi_app("file:/nonexistent.jsonl", allowed_origins=[bad])


def test_the_element_and_its_preview_page_are_served_inert(serve):
    server = serve(token="s3cret")  # neither holds data: neither needs the token
    status, script, headers = _answer(server.url + "/embed.js")
    assert status == 200 and headers["Content-Type"].startswith("text/javascript")
    assert b'customElements.define("cw-context-window"' in script and b"innerHTML" not in script
    payload = '"><script>alert(1)</script><img src=x onerror=alert(2)>'
    query = urllib.parse.urlencode({"run": payload, "stage": "s&<b>"})
    status, page, headers = _answer(f"{server.url}/embed?{query}")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    text = page.decode()
    assert "<script>alert" not in text and "<img" not in text and "<b>" not in text
    assert 'run="&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;"' in text
    assert 'stage="s&amp;&lt;b&gt;"' in text and '<script src="/embed.js" defer></script>' in text


def test_the_elements_palette_is_the_pages():
    from importlib import resources

    from cw_middleware._kernel.formats import COLOUR

    script = (resources.files("cw_middleware._serve") / "static" / "embed.js").read_text()
    block = script[script.index("var COLOUR = {") : script.index("};", script.index("var COLOUR = {"))]
    found = dict(re.findall(r'(\w+): "(#[0-9A-Fa-f]{6})"', block))
    assert found == {k: v for k, v in COLOUR.items() if k != "free"}
