"""The server fixtures themselves: loopback only, a scrape lands, stop by PID leaves nothing running."""

from __future__ import annotations

import os

import pytest

from servers import free_port, require_prometheus_extra

require_prometheus_extra()  # prometheus_client comes with it; skips the module (fails it under CW_CI=1)
from prometheus_client import CollectorRegistry, Gauge, start_http_server  # noqa: E402

pytestmark = pytest.mark.system  # the system tier (pyproject.toml): `pytest -m system`


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0) until reaped; Popen.wait() in stop() reaps it.
    return True


def test_both_servers_scrape_a_target_and_stop_by_pid(prometheus_server, victoria_metrics_server):
    port = free_port()
    # The servers start before the target listens: their first scrapes fail, later ones land.
    prom = prometheus_server([f"127.0.0.1:{port}"])
    vm = victoria_metrics_server([f"127.0.0.1:{port}"])
    registry = CollectorRegistry()
    Gauge("fixture_probe_value", "probe", registry=registry).set(42)
    httpd, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        for server in (prom, vm):
            assert server.url.startswith("http://127.0.0.1:")
            (sample,) = server.wait_for("fixture_probe_value", timeout=20)
            assert sample["value"][1] == "42" and sample["metric"]["instance"] == f"127.0.0.1:{port}"
            assert 0 < server.started_in < 20
    finally:
        httpd.shutdown()
        httpd.server_close()
    for server in (prom, vm):
        server.stop()
        assert server.process.returncode is not None and not _alive(server.pid)
