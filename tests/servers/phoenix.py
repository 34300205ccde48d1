"""A real Arize Phoenix for the tests: its own venv, 127.0.0.1 only, temp storage, stopped by PID.

Phoenix (~850 MB of dependencies) lives in ``.venv-phoenix/`` beside the project venv,
installed from ``requirements-phoenix.lock`` by ``.ci/steps/30-phoenix``; the path can be
overridden with ``CW_PHOENIX_PYTHON``. Without it the Phoenix tests skip, or fail under
``CW_CI=1``. Phoenix starts in ~12-16 s here (database migrations, then the server), so one
instance serves the whole session; tests keep apart by run id.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import httpx
import pytest

from . import free_port, in_ci

ROOT = Path(__file__).resolve().parents[2]
BOOT = Path(__file__).with_name("phoenix_boot.py")
READY_TIMEOUT = 90.0  # seconds; ~12-16 s measured on 2 cores, more on a loaded CI machine


def phoenix_python() -> Optional[str]:
    candidate = os.environ.get("CW_PHOENIX_PYTHON") or str(ROOT / ".venv-phoenix" / "bin" / "python")
    return candidate if os.access(candidate, os.X_OK) else None


def require_phoenix() -> str:
    """The Phoenix venv's python; skip (or fail under CW_CI=1) when it is not installed."""
    python = phoenix_python()
    if python is None:
        message = "Arize Phoenix is not installed (.ci/steps/30-phoenix builds .venv-phoenix from requirements-phoenix.lock)"
        if in_ci():
            pytest.fail(f"CW_CI=1: {message}", pytrace=False)
        pytest.skip(message)
    return python


@dataclass
class Phoenix:
    process: subprocess.Popen[bytes]
    port: int
    grpc_port: int
    workdir: str
    log_path: str
    started_in: float = 0.0
    _log: Optional[object] = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def backend(self) -> str:
        return f"phoenix+{self.url}"

    @property
    def traces_endpoint(self) -> str:
        return f"{self.url}/v1/traces"

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError), open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
        return ""

    def wait_for_run(self, run_id: str, expected: int, timeout: float = 30.0) -> None:
        """Phoenix ingests in the background: wait until it holds ``expected`` spans of the run."""
        deadline = time.monotonic() + timeout
        got = 0
        while time.monotonic() < deadline:
            got = self._count(run_id)
            if got >= expected:
                return
            time.sleep(0.2)
        raise AssertionError(f"Phoenix holds {got} of the run's {expected} spans after {timeout:g} s")

    def _count(self, run_id: str) -> int:
        # By the schema marker, counted here: Phoenix's attribute filter misses non-ASCII ids.
        params: dict[str, object] = {"attribute": "agent.context_window.schema:1", "limit": 1000}
        got = 0
        while True:
            answer = httpx.get(f"{self.url}/v1/projects/default/spans", params=params, timeout=30)  # type: ignore[arg-type]
            if answer.status_code != 200:
                return got
            body = answer.json()
            got += sum(s.get("attributes", {}).get("agent.run.id") == run_id for s in body.get("data", []))
            if not body.get("next_cursor"):
                return got
            params["cursor"] = body["next_cursor"]

    def listening(self) -> list[tuple[str, int]]:
        """(address, port) of every TCP socket the Phoenix process listens on, from /proc."""
        return listening_sockets(self.process.pid)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self._log is not None:
            self._log.close()  # type: ignore[attr-defined]
        shutil.rmtree(self.workdir, ignore_errors=True)


def listening_sockets(pid: int) -> list[tuple[str, int]]:
    """The listening TCP sockets of one process (Linux /proc; IPv4 and IPv6)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/net/{table}") as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] != "0A" or cols[9] not in inodes:  # 0A: LISTEN
                    continue
                hex_addr, hex_port = cols[1].split(":")
                raw = bytes.fromhex(hex_addr)
                # /proc writes each 32-bit word in host (little-endian) order
                raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                found.append((str(ipaddress.ip_address(raw)), int(hex_port, 16)))
    return found


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool((mapped or ip).is_loopback)


def start_phoenix(python: str, timeout: float = READY_TIMEOUT) -> Phoenix:
    """Phoenix on 127.0.0.1 (HTTP and gRPC on free ports), a temp working dir, ready or an error."""
    workdir = tempfile.mkdtemp(prefix="cw-phoenix-")
    port, grpc_port = free_port(), free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": workdir,
        "PHOENIX_WORKING_DIR": workdir,
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_TELEMETRY_ENABLED": "false",
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
        "PHOENIX_ALLOWED_SANDBOX_PROVIDERS": "NONE",
        "PHOENIX_LOG_MIGRATIONS": "false",
        "PHOENIX_LOGGING_LEVEL": "warning",
        "PHOENIX_DB_LOGGING_LEVEL": "warning",
    }
    log_path = os.path.join(workdir, "phoenix.log")
    log = open(log_path, "wb")  # noqa: SIM115 - closed by Phoenix.stop
    began = time.monotonic()
    # -I: the script's folder (these test helpers) stays off sys.path, so nothing here shadows Phoenix's modules
    process = subprocess.Popen(
        [os.path.abspath(python), "-I", str(BOOT)],
        env=env,
        cwd=workdir,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    phoenix = Phoenix(process, port, grpc_port, workdir, log_path, _log=log)
    deadline = began + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = phoenix.log_tail()
            phoenix.stop()
            raise RuntimeError(f"Phoenix exited with {process.returncode} before it was ready:\n{tail}")
        try:
            with urllib.request.urlopen(f"{phoenix.url}/healthz", timeout=2) as response:
                if response.status == 200:
                    phoenix.started_in = time.monotonic() - began
                    return phoenix
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    tail = phoenix.log_tail()
    phoenix.stop()
    raise RuntimeError(f"Phoenix was not ready within {timeout:g} s:\n{tail}")


@contextlib.contextmanager
def running_phoenix() -> Iterator[Phoenix]:
    phoenix = start_phoenix(require_phoenix())
    try:
        yield phoenix
    finally:
        phoenix.stop()


@pytest.fixture(scope="session")
def phoenix_server() -> Iterator[Phoenix]:
    """One Phoenix for the session (~12-16 s to start); tests keep apart by run id."""
    with running_phoenix() as server:
        yield server
