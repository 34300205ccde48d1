"""Real servers for the tests, started on 127.0.0.1 with temp storage and stopped by PID.

A suite whose server binary (or extra venv) is missing skips with the reason, but fails when
CW_CI=1 is set: CI installs everything (.ci/steps/) and must not skip silently.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket

import pytest


def in_ci() -> bool:
    return os.environ.get("CW_CI") == "1"


def require_binary(name: str, install_hint: str) -> str:
    """The binary's path; skip (or fail under CW_CI=1) when it is not installed."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed ({install_hint})"
        if in_ci():
            pytest.fail(f"CW_CI=1: {message}", pytrace=False)
        pytest.skip(message)
    return path


PROMETHEUS_EXTRA = "opentelemetry.exporter.prometheus"


def require_module(name: str, install_hint: str) -> None:
    """Skip (or fail under CW_CI=1) when ``name`` cannot be imported, e.g. an optional extra not installed."""
    if importlib.util.find_spec(name.split(".")[0]) is None or importlib.util.find_spec(name) is None:
        message = f"{name} is not installed ({install_hint})"
        if in_ci():
            pytest.fail(f"CW_CI=1: {message}", pytrace=False)
        pytest.skip(message, allow_module_level=True)  # also at a module's top: skips the module


def require_prometheus_extra() -> None:
    """The scrape endpoint's suites need cw-middleware[prometheus] (.ci/lowest's core venv has it not, by design)."""
    require_module(PROMETHEUS_EXTRA, "pip install 'cw-middleware[prometheus]'")


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the caller binds it soon after; a clash fails the start loudly)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
