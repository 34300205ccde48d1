"""The reader factory: backend URLs, options by precedence, and the shared HTTP client's errors."""

from __future__ import annotations

import logging

import httpx
import pytest

import cw_middleware as cw
from cw_middleware._readback import BACKENDS, Backend, BackendURL, Missing, ReaderOptions, parse_backend_url, resolve_options
from cw_middleware._readback.http import BackendClient

SECRET = "s3cr3t-CANARY-pw"


def test_backend_urls_are_taken_apart():
    url, opts = parse_backend_url(f"prometheus+https://alice:{SECRET}@prom.example:9443/sub/?timeout=3&retries=0&x=1")
    assert (url.scheme, url.location, dict(url.params)) == ("prometheus", "https://prom.example:9443/sub", {"x": "1"})
    assert opts == {"basic_auth": ("alice", SECRET), "timeout": "3", "retries": "0"}
    assert SECRET not in url.display and url.display == "prometheus+https://prom.example:9443/sub"
    assert parse_backend_url("file:/tmp/t.jsonl")[0].location == "/tmp/t.jsonl"
    assert parse_backend_url("file:///tmp/t.jsonl")[0].location == "/tmp/t.jsonl"
    assert parse_backend_url("relative/t.jsonl")[0] == BackendURL("file", "relative/t.jsonl", {}, "relative/t.jsonl")
    assert parse_backend_url("C:\\t.jsonl")[0].scheme == "file"


@pytest.mark.parametrize(
    "url, message",
    [
        ("http://host:9090", "name the backend"),
        ("prometheus+ftp://host", "http or https"),
        ("prometheus+http://", "has no host"),
        ("nosuch+http://host", "unknown backend 'nosuch'"),
    ],
)
def test_bad_backend_urls_are_config_errors_without_credentials(url, message):
    with pytest.raises(cw.ConfigError, match=message) as err:
        cw.reader(url.replace("://", f"://u:{SECRET}@") if "host" in url else url)
    assert SECRET not in str(err.value)


def test_unknown_scheme_lists_the_known_ones():
    with pytest.raises(cw.ConfigError, match="file:PATH"):
        cw.reader("nosuch:thing")


def test_options_precedence_argument_over_url_over_environment():
    env = {"CW_BACKEND_TOKEN": "env-token", "CW_BACKEND_TIMEOUT": "7", "CW_BACKEND_HEADERS": "X-Org=acme,X-A=b%20c"}
    opts = resolve_options({"timeout": "3"}, {"retries": 5}, environ=env)
    assert (opts.timeout, opts.retries, opts.bearer_token) == (3.0, 5, "env-token")
    assert dict(opts.headers) == {"X-Org": "acme", "X-A": "b c"}
    assert resolve_options({}, {"timeout": 1.5}, environ=env).timeout == 1.5
    assert "env-token" not in repr(opts)
    for bad in ({"timeout": "soon"}, {"retries": -1}, {"stale_after": 0}):
        with pytest.raises(cw.ConfigError):
            resolve_options(bad, {}, environ={})
    with pytest.raises(cw.ConfigError, match="CW_BACKEND_HEADERS"):
        resolve_options({}, {}, environ={"CW_BACKEND_HEADERS": "novalue"})


def test_a_backend_is_one_registry_line(monkeypatch):
    seen = {}

    class Fake:
        def __init__(self, url, options):
            seen["url"], seen["options"] = url, options

        def latest(self, run_id, stage_id):
            return Missing.RUN

        def stages(self, run_id):
            return None

        def runs(self):
            return []

        def history(self, run_id, stage_id, limit=50):
            return Missing.RUN

        def close(self):
            pass

    monkeypatch.setitem(BACKENDS, "fake", Backend("fake", "fake+http://HOST", Fake))
    r = cw.reader(f"fake+http://bob:{SECRET}@h:1/?project=p", timeout=2)
    assert isinstance(r.backend, cw.SnapshotReader)
    assert seen["url"].params == {"project": "p"} and seen["options"].basic_auth == ("bob", SECRET)
    assert seen["options"].timeout == 2 and SECRET not in r.url
    with pytest.raises(cw.NotFound, match="run 'r' not found"):
        r.context_window("r", "s")
    assert r.runs() == []


def test_a_miss_is_one_backend_question_that_says_which_id_is_missing():
    asked = []

    class Backend_:
        def __init__(self, missing):
            self.missing = missing

        def latest(self, run_id, stage_id):
            asked.append("latest")
            return self.missing

        def stages(self, run_id):
            raise AssertionError("a miss needs no run listing to name what is missing")

        def runs(self):
            return []

        def close(self):
            pass

    with pytest.raises(cw.NotFound, match="^run 'r' not found$"):
        cw.Reader(Backend_(Missing.RUN)).context_window("r", "s")
    with pytest.raises(cw.NotFound, match="^stage 's' not found in run 'r'$"):
        cw.Reader(Backend_(Missing.STAGE)).context_window("r", "s")
    assert asked == ["latest", "latest"]


def _client(handler, **options):
    url, _ = parse_backend_url("test+http://backend.local:1234/base")
    transport = httpx.MockTransport(handler)
    return BackendClient("TestBackend", url, ReaderOptions(client=httpx.Client(transport=transport), **options))


def test_client_retries_5xx_with_backoff_then_succeeds(monkeypatch):
    monkeypatch.setattr("cw_middleware._readback.http.time.sleep", lambda s: sleeps.append(s))
    sleeps: list[float] = []
    answers = iter([503, 500, 200])

    def handler(request):
        status = next(answers)
        return httpx.Response(status, json={"ok": status == 200})

    assert _client(handler, retries=2).get_json("/q") == {"ok": True}
    assert sleeps == [0.2, 0.4]


def test_client_errors_name_the_backend_never_credentials_or_bodies(monkeypatch, caplog):
    monkeypatch.setattr("cw_middleware._readback.http.time.sleep", lambda s: None)
    seen_auth = []

    def handler(request):
        seen_auth.append(request.headers.get("authorization"))
        path = request.url.path
        if path.endswith("/down"):
            raise httpx.ConnectError("refused")
        if path.endswith("/slow"):
            raise httpx.ReadTimeout("slow")
        if path.endswith("/auth"):
            return httpx.Response(401, text=f"bad token {SECRET}")
        if path.endswith("/garbage"):
            return httpx.Response(200, text=f"<html>{SECRET}</html>")
        if path.endswith("/missing"):
            return httpx.Response(404, json={"error": SECRET})
        return httpx.Response(500, text=SECRET)

    client = _client(handler, retries=1, bearer_token=SECRET, timeout=0.5)
    caplog.set_level(logging.DEBUG)
    cases = [
        ("/down", cw.BackendUnavailable, "could not be reached"),
        ("/slow", cw.BackendUnavailable, "did not answer within 0.5 s"),
        ("/auth", cw.BackendResponseError, "HTTP 401"),
        ("/garbage", cw.BackendResponseError, "not JSON"),
        ("/missing", cw.BackendResponseError, "HTTP 404"),
        ("/boom", cw.BackendUnavailable, "HTTP 500 2 time"),
    ]
    for path, error, message in cases:
        with pytest.raises(error, match=message) as err:
            client.get_json(path)
        assert "TestBackend at test+http://backend.local:1234/base" in str(err.value)
        assert SECRET not in str(err.value)
    assert client.get_json("/missing", absent_on_404=True) is None
    assert seen_auth and all(a == f"Bearer {SECRET}" for a in seen_auth)
    assert SECRET not in caplog.text
