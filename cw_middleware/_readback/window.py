"""The time window every networked reader searches: ``lookback`` seconds back from now.

Each backend takes the URL option ``?lookback=`` (``90``, ``90s``, ``15m``, ``12h``, ``7d``,
``2w``; default 7 days, Tempo's default ``max_duration``), parsed here once for all.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

from .._kernel.errors import ConfigError

DEFAULT_LOOKBACK = 7 * 86400.0  # seconds searched back from now
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(value: Any, name: str = "lookback") -> float:
    """Seconds from ``90``, ``90s``, ``15m``, ``12h``, ``7d`` or ``2w``."""
    match = _DURATION.match(str(value).strip())
    if not match or float(match.group(1)) <= 0:
        raise ConfigError(f"{name} must be a duration like 7d, 12h, 30m or 600 (seconds), got {value!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def lookback(params: Mapping[str, str]) -> float:
    """The ``lookback`` URL option in seconds, else the default."""
    raw = params.get("lookback")
    return parse_duration(raw) if raw else DEFAULT_LOOKBACK


def window_ns(params: Mapping[str, str]) -> tuple[int, int]:
    """(start, end) in Unix nanoseconds: the ``lookback`` before now, and a minute ahead for clock skew."""
    end = time.time_ns() + 60_000_000_000
    return end - int(lookback(params) * 1e9), end
