"""What the networked span backends (Phoenix, Jaeger, Tempo) share beyond the decoder.

A backend hands spans back in its own order (by trace, by insertion, by score), but
the folds read staleness from the order spans were *exported* in: the stage's start
marker is exported when the stage begins, the stage span when it ends. One writer
exports spans in the order they end, so sorting by end time restores that order
(`export_order`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from .. import codec
from .._log import RateLimitedLog
from ..errors import ConfigError
from .otlp_json import Span

# Array attributes of the contract. Stores built on Jaeger's span model (Elasticsearch,
# OpenSearch, Cassandra, Badger) keep arrays as their JSON text.
ARRAY_KEYS = (codec.ATTR_WARNINGS, codec.ATTR_DETAIL_CATEGORIES, codec.ATTR_DETAIL_SOURCES, codec.ATTR_DETAIL_TOKENS)


_log = RateLimitedLog()


def warn_truncated(display: str, limit: str) -> None:
    """A search stopped at its limit: the answer may miss older data. Logged once a minute per backend."""
    _log.warning(
        f"truncated:{display}",
        f"cw_middleware: {display} returned as much as one query may ({limit}); older spans may be missing "
        "from the answer: raise that URL option or narrow ?lookback=",
    )


def export_order(spans: Iterable[Span]) -> list[Span]:
    """Spans oldest export first, as the folds expect them (ties: the earlier start first)."""
    return sorted(spans, key=lambda s: (s.end_ns or s.start_ns, s.start_ns, s.span_id))


def positive_int(params: Mapping[str, str], name: str, default: int, maximum: int = 1_000_000) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        number = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {raw!r}") from None
    if not 0 < number <= maximum:
        raise ConfigError(f"{name} must be between 1 and {maximum}, got {raw!r}")
    return number


def restore_arrays(span: Span) -> Span:
    """Arrays a store kept as JSON text (``'["a","b"]'``) back to lists, on the span and its events."""
    for attrs in (span.attributes, *(e.attributes for e in span.events)):
        for key in ARRAY_KEYS:
            value = attrs.get(key)
            if isinstance(value, str) and value.startswith("["):
                try:
                    decoded = json.loads(value)
                except ValueError:
                    continue
                if isinstance(decoded, list):
                    attrs[key] = decoded
    return span
