"""Settings, resolved once from arguments, environment and defaults into a frozen Config.

Precedence: an argument to `cw.configure()` beats an environment variable beats
the default. Environment variables:

    CW_EXPORT              file:PATH | otlp | none     (default: file:./cw-telemetry.jsonl,
                                                         or otlp when OTEL_EXPORTER_OTLP_ENDPOINT is set)
    CW_PROVIDER_COUNT      auto | always | never       (default: auto)
    CW_PROVIDER_COUNT_TIMEOUT  seconds                 (default: 5)
    CW_METRICS             export | prometheus:HOST:PORT | none  (default: export, metrics go where
                                                         CW_EXPORT sends them; prometheus:... serves
                                                         them for scraping on HOST:PORT instead)
    CW_METRIC_RUN_LABELS   1 to add run/stage ids to metrics (cardinality!)
    CW_METRIC_SERIES_LIMIT  most series one metric keeps in the process (default: 2000, the
                                                         OpenTelemetry SDK's cardinality limit)
    OTEL_SERVICE_NAME      service name                (default: cw-middleware)
    OTEL_BSP_MAX_QUEUE_SIZE    spans waiting for export; beyond it they are dropped (default: 2048)
    OTEL_BSP_SCHEDULE_DELAY    ms between span exports (default: 1000)
    OTEL_METRIC_EXPORT_INTERVAL  ms between metric exports (default: 60000)
    CW_BACKEND             where the CLI and server read from (default: file:<the export file>)
    CW_SERVE_TOKEN         bearer token required by `cw-middleware serve`
    CW_LOG_EVENTS          1 to also emit each snapshot as a log-based event (OTEP 4430)
    CW_STREAM_USAGE        auto | never                (default: auto: ask OpenAI-family streams for their
                                                         usage where the endpoint accepts stream_options)
    CW_EXIT_TIMEOUT        seconds cw may add to the process's exit to export what is left
                                                        (default: 2; a backend slower than that loses it)

The embedded file (``file:PATH``) holds OTLP JSON lines, one export batch a line:
``{"resourceSpans":[...]}`` and ``{"resourceMetrics":[...]}``, the OpenTelemetry
file-exporter and Collector ``file`` exporter format. Relative paths are resolved
against the working directory of the process.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Optional

from .errors import ConfigError

DEFAULT_TELEMETRY_FILE = "cw-telemetry.jsonl"
DEFAULT_METRICS_HOST = "127.0.0.1"
# The largest context window accepted (2**31 - 1): three orders of magnitude above any model's, and an
# int every backend stores exactly (the OTLP SDK logs a traceback per export for an int above int64).
MAX_CONTEXT_WINDOW = 2**31 - 1


class StreamUsagePolicy(StrEnum):
    """Whether a stream the caller sent without ``stream_options`` is asked for its usage (``include_usage``)."""

    AUTO = "auto"  # where the endpoint is known to accept it; dropped and retried once if it refuses
    NEVER = "never"  # the request goes out exactly as written; the stream's snapshot keeps the local estimate


def parse_stream_usage(value: object) -> StreamUsagePolicy:
    try:
        return StreamUsagePolicy(str(value).strip().lower())
    except ValueError:
        raise ConfigError(f"stream_usage must be 'auto' or 'never', got {value!r}") from None


class ProviderCountPolicy(StrEnum):
    AUTO = "auto"  # only where the local tokenizer is approximate and credentials exist
    ALWAYS = "always"
    NEVER = "never"


@dataclass(frozen=True)
class Config:
    service_name: str = "cw-middleware"
    export: str = f"file:{DEFAULT_TELEMETRY_FILE}"
    provider_count: ProviderCountPolicy = ProviderCountPolicy.AUTO
    provider_count_timeout: float = 5.0
    context_windows: Mapping[str, int] = field(default_factory=dict)
    max_details: int = 20
    snapshot_history: int = 1000
    metrics: str = "export"  # "export" | "prometheus:HOST:PORT" | "none"
    metric_run_labels: bool = False
    metric_series_limit: int = 2000  # the SDK's default cardinality limit; beyond it, one overflow series
    log_events: bool = False  # also emit each snapshot as a log record (OTEP 4430 events)
    export_queue_size: int = 2048  # spans waiting for export; a full queue drops, never blocks
    export_interval_ms: int = 1000  # span batches leave at least this often
    metric_interval_ms: int = 60000
    stream_usage: StreamUsagePolicy = StreamUsagePolicy.AUTO
    exit_timeout: float = 2.0  # the most cw's exit hook waits for the last export

    @property
    def export_path(self) -> Optional[str]:
        return self.export[5:] if self.export.startswith("file:") else None

    @property
    def metrics_endpoint(self) -> Optional[tuple[str, int]]:
        """(host, port) of the scrape endpoint, when ``metrics="prometheus:HOST:PORT"``."""
        if not self.metrics.startswith("prometheus:"):
            return None
        host, _, port = self.metrics[len("prometheus:") :].rpartition(":")
        return host.strip("[]"), int(port)


def parse_metrics(value: str) -> str:
    """``export`` | ``none`` | ``prometheus:[HOST:]PORT``, normalised to ``prometheus:HOST:PORT``.

    HOST defaults to 127.0.0.1: the endpoint serves whoever can reach it, so anything wider
    (``0.0.0.0``, a LAN address) must be written out. IPv6 hosts go in brackets: ``[::1]:9464``.
    """
    value = value.strip()
    if value in ("export", "none"):
        return value
    usage = f"metrics must be 'export', 'none' or 'prometheus:HOST:PORT' (e.g. prometheus:127.0.0.1:9464), got {value!r}"
    if not value.startswith("prometheus:"):
        raise ConfigError(usage)
    rest = value[len("prometheus:") :]
    host, sep, port_text = rest.rpartition(":")
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


def parse_export(value: str) -> str:
    value = value.strip()
    if value in ("otlp", "none") or (value.startswith("file:") and len(value) > 5):
        return value
    raise ConfigError(f"export must be 'file:PATH', 'otlp' or 'none', got {value!r}")


def parse_policy(value: object) -> ProviderCountPolicy:
    try:
        return ProviderCountPolicy(str(value))
    except ValueError:
        raise ConfigError(f"provider_count must be 'auto', 'always' or 'never', got {value!r}") from None


def resolve(
    *,
    service_name: Optional[str] = None,
    export: Optional[str] = None,
    provider_count: Optional[str] = None,
    provider_count_timeout: Optional[float] = None,
    context_windows: Optional[Mapping[str, int]] = None,
    max_details: Optional[int] = None,
    snapshot_history: Optional[int] = None,
    metrics: Optional[str] = None,
    metric_run_labels: Optional[bool] = None,
    metric_series_limit: Optional[int] = None,
    log_events: Optional[bool] = None,
    export_queue_size: Optional[int] = None,
    export_interval_ms: Optional[int] = None,
    metric_interval_ms: Optional[int] = None,
    stream_usage: Optional[str] = None,
    exit_timeout: Optional[float] = None,
    environ: Optional[Mapping[str, str]] = None,
) -> Config:
    env = os.environ if environ is None else environ
    if export is None:
        export = env.get("CW_EXPORT") or ("otlp" if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") else None)
    timeout = provider_count_timeout
    if timeout is None and env.get("CW_PROVIDER_COUNT_TIMEOUT"):
        try:
            timeout = float(env["CW_PROVIDER_COUNT_TIMEOUT"])
        except ValueError:
            raise ConfigError("CW_PROVIDER_COUNT_TIMEOUT must be a number of seconds") from None
    if timeout is not None and not timeout > 0:
        raise ConfigError("provider_count_timeout must be > 0 seconds")
    for name, value in (("max_details", max_details), ("snapshot_history", snapshot_history)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    windows = dict(context_windows or {})
    for model, size in windows.items():
        if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= MAX_CONTEXT_WINDOW:
            raise ConfigError(f"context window for {model!r} must be an integer from 1 to {MAX_CONTEXT_WINDOW}, got {size!r}")
    defaults = Config()
    queue = _positive_int("export_queue_size", export_queue_size, env.get("OTEL_BSP_MAX_QUEUE_SIZE"), defaults.export_queue_size)
    delay = _positive_int(
        "export_interval_ms", export_interval_ms, env.get("OTEL_BSP_SCHEDULE_DELAY"), defaults.export_interval_ms
    )
    metric_delay = _positive_int(
        "metric_interval_ms", metric_interval_ms, env.get("OTEL_METRIC_EXPORT_INTERVAL"), defaults.metric_interval_ms
    )
    series_limit = _positive_int(
        "metric_series_limit", metric_series_limit, env.get("CW_METRIC_SERIES_LIMIT"), defaults.metric_series_limit
    )
    if metrics is None:
        metrics = env.get("CW_METRICS") or None
    if exit_timeout is None and env.get("CW_EXIT_TIMEOUT"):
        exit_timeout = parse_seconds(env["CW_EXIT_TIMEOUT"], "CW_EXIT_TIMEOUT")
    elif exit_timeout is not None:
        exit_timeout = parse_seconds(exit_timeout, "exit_timeout")
    return Config(
        service_name=service_name or env.get("OTEL_SERVICE_NAME") or defaults.service_name,
        export=parse_export(export) if export else defaults.export,
        provider_count=parse_policy(provider_count or env.get("CW_PROVIDER_COUNT") or "auto"),
        provider_count_timeout=timeout or defaults.provider_count_timeout,
        context_windows=windows,
        max_details=max_details or defaults.max_details,
        snapshot_history=snapshot_history or defaults.snapshot_history,
        metrics=parse_metrics(metrics) if metrics is not None else defaults.metrics,
        metric_run_labels=bool(metric_run_labels) if metric_run_labels is not None else env.get("CW_METRIC_RUN_LABELS") == "1",
        metric_series_limit=series_limit,
        log_events=bool(log_events) if log_events is not None else env.get("CW_LOG_EVENTS") == "1",
        export_queue_size=queue,
        export_interval_ms=delay,
        metric_interval_ms=metric_delay,
        stream_usage=parse_stream_usage(stream_usage or env.get("CW_STREAM_USAGE") or "auto"),
        exit_timeout=exit_timeout or defaults.exit_timeout,
    )


def parse_seconds(value: object, name: str) -> float:
    """A duration in seconds (> 0) from a number or a numeric string; ConfigError naming ``name`` otherwise."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number of seconds, got {value!r}") from None
    if not seconds > 0:
        raise ConfigError(f"{name} must be > 0 seconds, got {value!r}")
    return seconds


def _positive_int(name: str, value: Optional[int], env_value: Optional[str], default: int) -> int:
    if value is None and env_value:
        try:
            value = int(env_value)
        except ValueError:
            raise ConfigError(f"{name} (from the environment) must be an integer, got {env_value!r}") from None
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return value
