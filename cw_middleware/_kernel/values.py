"""How a setting's value is read: one parser a kind of value, and the values a setting may take.

`config.py`'s tables name a parser for each setting; `cw.configure()`, the readers and the CLI read
their arguments and the environment's strings through the same parsers, so a value means the same
wherever it is given, and a bad one is refused with the name it came under (a `ConfigError`).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping
from enum import StrEnum
from typing import Any
from urllib.parse import unquote

from .errors import ConfigError

DEFAULT_METRICS_HOST = "127.0.0.1"
# The largest context window accepted (2**31 - 1): three orders of magnitude above any model's, and an
# int every backend stores exactly (the OTLP SDK logs a traceback per export for an int above int64).
MAX_CONTEXT_WINDOW = 2**31 - 1
OTLP_PROTOCOLS = ("http/protobuf", "grpc")


class StreamUsagePolicy(StrEnum):
    """Whether a stream the caller sent without ``stream_options`` is asked for its usage (``include_usage``)."""

    AUTO = "auto"  # where the endpoint is known to accept it; dropped and retried once if it refuses
    NEVER = "never"  # the request goes out exactly as written; the stream's snapshot keeps the local estimate


class ProviderCountPolicy(StrEnum):
    AUTO = "auto"  # only where the local tokenizer is approximate and credentials exist
    ALWAYS = "always"
    NEVER = "never"


# Each parser takes the raw value (an argument of any type, or an environment string) and the
# name it came under (the argument's or the variable's), which every error message names.


def parse_export(value: object, name: str = "export") -> str:
    text = str(value).strip()
    if text in ("otlp", "none") or (text.startswith("file:") and len(text) > 5):
        return text
    raise ConfigError(f"{name} must be 'file:PATH', 'otlp' or 'none', got {value!r}")


def parse_metrics(value: object, name: str = "metrics") -> str:
    """``export`` | ``none`` | ``prometheus:[HOST:]PORT``, normalised to ``prometheus:HOST:PORT``.

    HOST defaults to 127.0.0.1: the endpoint serves whoever can reach it, so anything wider
    (``0.0.0.0``, a LAN address) must be written out. IPv6 hosts go in brackets: ``[::1]:9464``.
    """
    text = str(value).strip()
    if text in ("export", "none"):
        return text
    usage = f"{name} must be 'export', 'none' or 'prometheus:HOST:PORT' (e.g. prometheus:127.0.0.1:9464), got {value!r}"
    if not text.startswith("prometheus:"):
        raise ConfigError(usage)
    host, sep, port_text = text[len("prometheus:") :].rpartition(":")
    if not sep:
        host = DEFAULT_METRICS_HOST
    if host.startswith("["):
        if not host.endswith("]"):
            raise ConfigError(usage)
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise ConfigError(f"{usage}: {host} is not an IPv6 address") from None
    elif not host or ":" in host or any(c.isspace() or c in "/@?#" for c in host):
        raise ConfigError(usage)
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigError(f"{usage}: the port must be 1-65535")
    return f"prometheus:{host}:{int(port_text)}"


def parse_policy(value: object, name: str = "provider_count") -> ProviderCountPolicy:
    try:
        return ProviderCountPolicy(str(value).strip().lower())
    except ValueError:
        raise ConfigError(f"{name} must be 'auto', 'always' or 'never', got {value!r}") from None


def parse_stream_usage(value: object, name: str = "stream_usage") -> StreamUsagePolicy:
    try:
        return StreamUsagePolicy(str(value).strip().lower())
    except ValueError:
        raise ConfigError(f"{name} must be 'auto' or 'never', got {value!r}") from None


def parse_seconds(value: object, name: str) -> float:
    """A duration in seconds (> 0, finite) from a number or a numeric string; ConfigError naming ``name`` otherwise."""
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a number of seconds, got {value!r}")
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number of seconds, got {value!r}") from None
    if not seconds > 0 or not math.isfinite(seconds):
        raise ConfigError(f"{name} must be > 0 seconds, got {value!r}")
    return seconds


def parse_positive_int(value: object, name: str) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return value


def parse_percent(value: object, name: str) -> float:
    """A share of the window, above 0 and at most 100 (``80``, ``"92.5"``)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a percentage from 0 to 100, got {value!r}") from None
    if not 0 < number <= 100:
        raise ConfigError(f"{name} must be a percentage above 0 and at most 100, got {value!r}")
    return number


def parse_flag(value: object, name: str) -> bool:
    """A bool argument as given; from the environment ``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off``."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"{name} must be 1 or 0 (true or false), got {value!r}")


def parse_otel_flag(value: object, name: str) -> bool:
    """OpenTelemetry's boolean variables: true only for ``true`` (any case), as the specification says."""
    return value if isinstance(value, bool) else str(value).strip().lower() == "true"


def parse_text(value: object, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{name} must be a non-empty string, got {value!r}")
    return value.strip()


def parse_context_windows(value: object, name: str = "context_windows") -> Mapping[str, int]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{name} must be a mapping of model name to window size, got {type(value).__name__}")
    windows = dict(value)
    for model, size in windows.items():
        if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= MAX_CONTEXT_WINDOW:
            raise ConfigError(f"context window for {model!r} must be an integer from 1 to {MAX_CONTEXT_WINDOW}, got {size!r}")
    return windows


def parse_otlp_protocol(value: object, name: str = "otlp_protocol") -> str:
    text = str(value).strip().lower()
    if text not in OTLP_PROTOCOLS:
        raise ConfigError(f"{name} must be one of {', '.join(OTLP_PROTOCOLS)}, got {value!r}")
    return text


def parse_headers(value: object, name: str = "headers") -> Mapping[str, str]:
    """A mapping as given, or ``k=v,k2=v2`` (the OTEL_EXPORTER_OTLP_HEADERS format, values percent-decoded)."""
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    out = {}
    for item in str(value).split(","):
        if not item.strip():
            continue
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{name} must be 'name=value' pairs separated by commas")
        out[unquote(key.strip())] = unquote(text.strip())
    return out


def as_is(value: object, name: str) -> Any:
    return value
