"""The HTTP read-back endpoint: status codes, token, OpenAPI, no stack traces."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
from embedded_helpers import embedded_runtime

import cw_middleware as cw
from cw_middleware.server import make_server


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    path = tmp_path_factory.mktemp("srv") / "t.jsonl"
    with embedded_runtime(export=f"file:{path}"):
        with cw.stage("run-1", "agent@1"):
            cw.completion(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], mock_response="ok")
    return f"file:{path}"


@pytest.fixture
def serve(backend):
    servers = []

    def start(token=None, url=backend):
        server = make_server(cw.reader(url), "127.0.0.1", 0, token)
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
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), dict(err.headers)


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
