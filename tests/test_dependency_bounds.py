"""The dependency ranges pyproject.toml declares are the ones CI tests at both ends.

The low end: requirements-lowest.in pins the lowest version of each runtime dependency, and .ci/lowest
runs the fast tier on its lock; requirements-lowest-prometheus.in pins the Prometheus extra's lowest (with
the SDK it asks for), and .ci/lowest runs the Prometheus suites on that. This keeps the files in step, so
a bound cannot be raised or lowered in one place only. The high end is requirements-dev.lock, which
README's test command installs.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _declared() -> dict[str, Requirement]:
    return {r.name: r for r in map(Requirement, _project()["dependencies"])}


def _prometheus_extra() -> dict[str, Requirement]:
    return {r.name: r for r in map(Requirement, _project()["optional-dependencies"]["prometheus"])}


def _lowest_pins(name: str = "requirements-lowest.in") -> dict[str, str]:
    pins = {}
    for line in (ROOT / name).read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==([^\s#]+)", line)
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def _lower_bound(requirement: Requirement) -> Version:
    bounds = [spec.version for spec in requirement.specifier if spec.operator == ">="]
    assert len(bounds) == 1, f"{requirement} should have one lower bound (>=)"
    return Version(bounds[0])


def test_no_runtime_dependency_is_pinned_to_one_version() -> None:
    for requirement in [*_declared().values(), *_prometheus_extra().values()]:
        assert not any(spec.operator in ("==", "===", "~=") for spec in requirement.specifier), requirement


def test_litellm_excludes_the_compromised_releases() -> None:
    litellm = _declared()["litellm"]
    for bad in ("1.82.7", "1.82.8", "1.107.0"):
        assert not litellm.specifier.contains(bad), bad
    assert litellm.specifier.contains("1.83.7")


def test_each_pinned_lowest_version_is_the_declared_lower_bound() -> None:
    declared, pins = _declared(), _lowest_pins()
    pinned_here = {name: version for name, version in pins.items() if name in declared}
    assert pinned_here, "requirements-lowest.in pins none of the declared dependencies"
    for name, version in pinned_here.items():
        assert _lower_bound(declared[name]) == Version(version), (
            f"{name}: pyproject says {declared[name]}, lowest.in pins {version}"
        )
    # Those not pinned there are pinned exactly by LiteLLM at its lowest version: their bound is that pin.
    lock = (ROOT / "requirements-lowest.lock").read_text()
    for name, requirement in declared.items():
        if name not in pinned_here:
            locked = re.search(rf"^{re.escape(name)}==(\S+)", lock, re.M | re.I)
            assert locked, f"{name} is not in requirements-lowest.lock"
            assert _lower_bound(requirement) == Version(locked.group(1)), (
                f"{name}: bound {requirement}, lowest lock {locked.group(1)}"
            )


def test_the_prometheus_extra_is_pinned_at_its_lower_bound_beside_the_rest_at_theirs() -> None:
    declared, extra = _declared(), _prometheus_extra()
    pins = _lowest_pins("requirements-lowest-prometheus.in")
    for name, requirement in extra.items():
        assert name in pins, f"{name} is not pinned in requirements-lowest-prometheus.in"
        assert _lower_bound(requirement) == Version(pins[name]), f"{name}: extra says {requirement}, pinned {pins[name]}"
    # The rest: at their lower bounds, except where the extra's lowest asks for more (the SDK it was released with).
    lock = (ROOT / "requirements-lowest-prometheus.lock").read_text()
    for name, requirement in declared.items():
        locked = re.search(rf"^{re.escape(name)}==(\S+)", lock, re.M | re.I)
        assert locked, f"{name} is not in requirements-lowest-prometheus.lock"
        assert requirement.specifier.contains(locked.group(1), prereleases=True), (name, locked.group(1))
        if not name.startswith("opentelemetry-"):
            assert _lower_bound(requirement) == Version(locked.group(1)), f"{name}: {requirement}, locked {locked.group(1)}"


def test_each_lock_was_compiled_from_its_in_file() -> None:
    for name in ("requirements-lowest", "requirements-lowest-prometheus"):
        lock = (ROOT / f"{name}.lock").read_text()
        for package, version in _lowest_pins(f"{name}.in").items():
            assert re.search(rf"^{re.escape(package)}=={re.escape(version)}\b", lock, re.M | re.I), (
                f"{name}.lock: {package}=={version}"
            )


# Extras that a locked package asks of another: (package, its extras as the asker spells them, the asker).
# Read from the installed venvs' metadata (each dist's Requires-Dist with extras), 2026-12-06.
EXTRAS_ASKED = (
    ("fastmcp-slim", "client,server", "arize-phoenix"),
    ("gepa", "dspy", "dspy"),
    ("google-auth", "requests", "google-genai"),  # broke the Phoenix venv the day google-auth 2.63.1 came out
    ("google-auth", "pyopenssl", "google-adk"),  # and the frameworks-otel venv the same day
    ("httpx", "http2", "arize-phoenix"),
    ("httpx", "http2", "litellm"),  # README's commands failed the day httpx 0.29.0 came out
    ("litellm", "mcp", "langchain-litellm"),
    ("opentelemetry-exporter-http-transport", "requests", "opentelemetry-exporter-otlp-proto-http"),
    ("pydantic", "email", "fastapi-sso"),
    ("pydantic", "email", "fastmcp-slim"),
    ("pydantic-ai-slim", "anthropic,bedrock,google,mcp,openai,ui", "arize-phoenix"),  # the Phoenix venv, pydantic-ai-slim 2.78
    ("pyjwt", "crypto", "mcp"),
    ("sqlalchemy", "asyncio", "arize-phoenix"),
    ("urllib3", "socks", "selenium"),
)


def test_every_lock_names_the_extras_its_packages_ask_for_at_the_asked_packages_pin() -> None:
    """A lock from ``uv pip compile`` names ``httpx`` and ``pydantic-ai-slim``, not the extras other packages ask for.

    The pip a Python 3.11 venv brings (23.2) then resolves ``httpx[http2]`` (litellm, arize-phoenix) or
    ``pydantic-ai-slim[anthropic,...]`` (arize-phoenix) on its own, to the newest release on the index,
    and refuses the install in hash mode ("all requirements must have their versions pinned"):
    README's commands failed so the day httpx 0.29.0 came out, the Phoenix venv the day
    pydantic-ai-slim 2.78.0 did. The lock must name the extra at the version it pins the package at.
    """
    locks = sorted(ROOT.glob("requirements*.lock")) + [ROOT / "examples" / "proxy" / "requirements.lock"]
    checked: dict[str, int] = {}
    for lock in locks:
        text = lock.read_text()
        for package, extras, asker in EXTRAS_ASKED:
            pin = re.search(rf"^{re.escape(package)}==(\S+) \\$", text, re.M | re.I)
            # The lowest-versions locks hold an older asker that may not ask (litellm 1.83.7 asks no http2): a lock
            # without the extra's own dependencies locked was compiled without the ask.
            if pin is None or not re.search(rf"^{re.escape(asker)}==", text, re.M | re.I) or "lowest" in lock.name:
                continue
            named = re.search(rf"^{re.escape(package)}\[{re.escape(extras)}\]==(\S+) \\$", text, re.M | re.I)
            assert named is not None and named.group(1) == pin.group(1), f"{lock.name}: add {package}[{extras}]=={pin.group(1)}"
            checked[package] = checked.get(package, 0) + 1
    assert checked.get("httpx", 0) >= 2 and checked.get("pydantic-ai-slim", 0) >= 1, checked
