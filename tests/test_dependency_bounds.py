"""The dependency ranges pyproject.toml declares are the ones CI tests at both ends.

The low end: requirements-lowest.in pins the lowest version of each direct dependency, and .ci/run runs
the fast tier on its lock. This keeps the two files in step, so a bound cannot be raised or lowered in
one place only. The high end is requirements-dev.lock, which README's test command installs.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _declared() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = [Requirement(r) for r in project["dependencies"]]
    extras = [Requirement(r) for r in project["optional-dependencies"]["prometheus"]]
    return {r.name: r for r in runtime + extras}


def _lowest_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements-lowest.in").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==([^\s#]+)", line)
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def _lower_bound(requirement: Requirement) -> Version:
    bounds = [spec.version for spec in requirement.specifier if spec.operator == ">="]
    assert len(bounds) == 1, f"{requirement} should have one lower bound (>=)"
    return Version(bounds[0])


def test_no_runtime_dependency_is_pinned_to_one_version() -> None:
    for requirement in _declared().values():
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
