"""Prometheus and VictoriaMetrics (Debian packages) as test servers that scrape given targets.

    with running_prometheus(["127.0.0.1:9464"], workdir=tmp) as prom:
        prom.wait_for('agent_context_window_tokens')        # the first scrape landed
        prom.query('sum(agent_context_window_tokens)')      # /api/v1/query -> result list

Both bind 127.0.0.1 on a free port, keep their data in the given work directory, scrape
every `scrape_interval` (1 s by default, so a test waits about a second for its data) and are
stopped by PID (SIGTERM, then SIGKILL after 5 s). Readiness: Prometheus `/-/ready`,
VictoriaMetrics `/health`. The `prometheus_server` / `victoria_metrics_server` fixtures are
factories: call them with the targets once they are listening; the servers stop at teardown.

Start-up is timed (`MetricsServer.started_in`): Prometheus 2.42 is ready in ~0.2-0.4 s here,
VictoriaMetrics 1.79 in ~0.1-0.3 s. Data takes longer:
- Prometheus syncs its scrape targets at most every 5 s, so its first scrape comes ~5.5 s
  after start. Start it before the target listens (pick the port with `free_port()`) and the
  wait overlaps with the test's own work.
- VictoriaMetrics scrapes at once, but makes new series searchable ~10 s later, and hides
  samples younger than `-search.latencyOffset` (30 s by default): the tests start it with 1 s
  and no response cache, and `wait_for` calls `/internal/force_flush` (data visible in ~1 s).
  A production reader works the same either way; it sees the newest samples later.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import httpx
import pytest

from . import free_port, require_binary

START_TIMEOUT = 20.0
PROMETHEUS_HINT = "apt-get install -y --no-install-recommends prometheus; CI: .ci/steps/20-debian-servers"
VICTORIA_HINT = "apt-get install -y --no-install-recommends victoria-metrics; CI: .ci/steps/20-debian-servers"


@dataclass
class MetricsServer:
    """One running Prometheus-compatible server: its URL, its process and how long it took to get ready."""

    kind: str  # "prometheus" | "victoria-metrics"
    url: str
    process: subprocess.Popen[bytes]
    workdir: Path
    started_in: float
    log_path: Path
    config_path: Path
    _client: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=10.0))

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def reader_url(self) -> str:
        """The URL our Prometheus reader takes for this server."""
        return "prometheus+" + self.url

    def api(self, path: str, **params: Any) -> Any:
        """GET /api/v1/<path>; the `data` member of a successful answer."""
        response = self._client.get(f"{self.url}/api/v1/{path}", params=params)
        body = response.json()
        if response.status_code != 200 or body.get("status") != "success":
            raise AssertionError(f"{self.kind} {path} {params}: HTTP {response.status_code} {body}")
        return body["data"]

    def query(self, promql: str, at: Optional[float] = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"query": promql}
        if at is not None:
            params["time"] = at
        return list(self.api("query", **params)["result"])

    def wait_for(self, promql: str, timeout: float = 15.0, predicate: Optional[Callable[[list[Any]], bool]] = None) -> list[Any]:
        """Poll a query until it returns a (matching) result: the scrape landed."""
        deadline = time.monotonic() + timeout
        result: list[Any] = []
        while time.monotonic() < deadline:
            self.flush()
            result = self.query(promql)
            if result and (predicate is None or predicate(result)):
                return result
            time.sleep(0.2)
        raise AssertionError(f"{self.kind}: no data for {promql!r} after {timeout} s (last: {result}); log: {self.log_tail()}")

    def flush(self) -> None:
        """VictoriaMetrics: make what it ingested searchable now (else ~10 s later); Prometheus needs nothing."""
        if self.kind == "victoria-metrics":
            self._client.get(f"{self.url}/internal/force_flush")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        self._client.close()
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        try:
            self.process.wait(5.0)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.process.wait(5.0)


def scrape_config(
    targets: Sequence[str], scrape_interval: str = "1s", job: str = "cw", rule_files: Sequence[str] = ()
) -> dict[str, Any]:
    """A Prometheus configuration (VictoriaMetrics reads the same `scrape_configs`)."""
    config: dict[str, Any] = {
        "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval},
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(targets)}]}],
    }
    if rule_files:
        config["global"]["evaluation_interval"] = scrape_interval
        config["rule_files"] = list(rule_files)
    return config


def _start(
    kind: str, argv: list[str], url: str, ready_path: str, workdir: Path, config_path: Path, timeout: float
) -> MetricsServer:
    log_path = workdir / f"{kind}.log"
    started = time.monotonic()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=workdir)
    server = MetricsServer(kind, url, process, workdir, 0.0, log_path, config_path)
    deadline = started + timeout
    with httpx.Client(timeout=1.0) as client:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{kind} exited with {process.returncode} before it was ready:\n{server.log_tail()}")
            try:
                if client.get(url + ready_path).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"{kind} not ready within {timeout} s:\n{server.log_tail()}")
            time.sleep(0.02)
    server.started_in = time.monotonic() - started
    return server


def start_prometheus(
    targets: Sequence[str],
    workdir: Path,
    *,
    scrape_interval: str = "1s",
    rule_files: Sequence[str] = (),
    timeout: float = START_TIMEOUT,
) -> MetricsServer:
    binary = require_binary("prometheus", PROMETHEUS_HINT)
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "prometheus.yml"
    # JSON is YAML: no YAML writer needed.
    config_path.write_text(json.dumps(scrape_config(targets, scrape_interval, rule_files=rule_files)))
    port = free_port()
    argv = [
        binary,
        f"--config.file={config_path}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    return _start("prometheus", argv, f"http://127.0.0.1:{port}", "/-/ready", workdir, config_path, timeout)


def start_victoria_metrics(
    targets: Sequence[str],
    workdir: Path,
    *,
    scrape_interval: str = "1s",
    timeout: float = START_TIMEOUT,
) -> MetricsServer:
    binary = require_binary("victoria-metrics", VICTORIA_HINT)
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "scrape.yml"
    config_path.write_text(json.dumps(scrape_config(targets, scrape_interval)))
    port = free_port()
    argv = [
        binary,
        f"-httpListenAddr=127.0.0.1:{port}",
        f"-storageDataPath={workdir / 'data'}",
        f"-promscrape.config={config_path}",
        "-search.latencyOffset=1s",
        "-search.disableCache",
        "-loggerLevel=WARN",
    ]
    return _start("victoria-metrics", argv, f"http://127.0.0.1:{port}", "/health", workdir, config_path, timeout)


@contextlib.contextmanager
def running_prometheus(targets: Sequence[str], workdir: Path, **options: Any) -> Iterator[MetricsServer]:
    server = start_prometheus(targets, workdir, **options)
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def running_victoria_metrics(targets: Sequence[str], workdir: Path, **options: Any) -> Iterator[MetricsServer]:
    server = start_victoria_metrics(targets, workdir, **options)
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def _factory(start: Callable[..., MetricsServer], workdir: Path) -> Iterator[Callable[..., MetricsServer]]:
    servers: list[MetricsServer] = []

    def make(targets: Sequence[str], **options: Any) -> MetricsServer:
        server = start(targets, workdir / f"{len(servers)}", **options)
        servers.append(server)
        return server

    try:
        yield make
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def prometheus_server(tmp_path: Path) -> Iterator[Callable[..., MetricsServer]]:
    """`prometheus_server(targets, scrape_interval="1s", rule_files=())` -> a running MetricsServer."""
    require_binary("prometheus", PROMETHEUS_HINT)
    with _factory(start_prometheus, tmp_path / "prometheus") as make:
        yield make


@pytest.fixture
def victoria_metrics_server(tmp_path: Path) -> Iterator[Callable[..., MetricsServer]]:
    """`victoria_metrics_server(targets, scrape_interval="1s")` -> a running MetricsServer."""
    require_binary("victoria-metrics", VICTORIA_HINT)
    with _factory(start_victoria_metrics, tmp_path / "victoria-metrics") as make:
        yield make
