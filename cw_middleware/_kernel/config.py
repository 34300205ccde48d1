"""Settings, resolved once from arguments, environment and defaults: the only module that reads the environment.

Precedence: an argument (to `cw.configure()`, or a reader's or the CLI's own option)
beats an environment variable beats the default. Each setting is written down once,
in `SETTINGS` (the call path's, resolved into a frozen `Config` by `resolve`) or in
`READ_SETTINGS` (the read side's: CLI, server, readers, resolved into `ReadConfig` by
`resolve_read`): its name, its environment variables, its default, how its value is
read and what it means. The documentation's settings reference is generated from these
tables, so it cannot drift from the code.

One kind of read stays at call time, on purpose: the provider's own variables
(`provider_variable`: API keys, base URLs, ``AZURE_API_VERSION``), which LiteLLM itself
reads on every call and a user may set after the first one.

The embedded file (``file:PATH``) holds OTLP JSON lines, one export batch a line:
``{"resourceSpans":[...]}`` and ``{"resourceMetrics":[...]}``, the OpenTelemetry
file-exporter and Collector ``file`` exporter format. Relative paths are resolved
against the working directory of the process.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from .errors import ConfigError
from .values import (
    ProviderCountPolicy,
    StreamUsagePolicy,
    as_is,
    parse_context_windows,
    parse_export,
    parse_flag,
    parse_headers,
    parse_metrics,
    parse_otel_flag,
    parse_otlp_protocol,
    parse_percent,
    parse_policy,
    parse_positive_int,
    parse_seconds,
    parse_stream_usage,
    parse_text,
)

DEFAULT_TELEMETRY_FILE = "cw-telemetry.jsonl"
DEFAULT_STALE_AFTER = 1800.0  # seconds without a sign of life before an unended stage reads "stored", not "live"


# ---------------------------------------------------------------- the tables


@dataclass(frozen=True)
class Setting:
    """One setting: written down once, read by `resolve`/`resolve_read`, listed by the docs."""

    name: str  # the argument and the field of Config / ReadConfig
    env: tuple[str, ...]  # environment variables, the first one set wins
    default: Any  # a value, or a function of the environment (`Default`)
    parse: Callable[[object, str], Any]
    doc: str
    default_doc: str = ""  # the default in words, where it is not a plain value


@dataclass(frozen=True)
class Default:
    """A default that depends on other variables (the export goes to OTLP when its endpoint is set)."""

    compute: Callable[[Mapping[str, str]], Any]


def _default_export(env: Mapping[str, str]) -> str:
    return "otlp" if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") else f"file:{DEFAULT_TELEMETRY_FILE}"


def _default_index_dir(env: Mapping[str, str]) -> str:
    cache = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "cw-middleware", "file-index")


SETTINGS: tuple[Setting, ...] = (
    Setting("service_name", ("OTEL_SERVICE_NAME",), "cw-middleware", parse_text, "The service name on every span and metric."),
    Setting(
        "export",
        ("CW_EXPORT",),
        Default(_default_export),
        parse_export,
        "Where snapshots go: `file:PATH` (OTLP JSON lines), `otlp` (the OTEL_EXPORTER_OTLP_* endpoint) or `none`.",
        f"`file:{DEFAULT_TELEMETRY_FILE}`, or `otlp` when OTEL_EXPORTER_OTLP_ENDPOINT is set",
    ),
    Setting(
        "otlp_protocol",
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"),
        "http/protobuf",
        parse_otlp_protocol,
        "The OTLP transport for `export=otlp`: `http/protobuf` or `grpc`.",
    ),
    Setting(
        "otlp_endpoint",
        ("OTEL_EXPORTER_OTLP_ENDPOINT",),
        None,
        parse_text,
        "The OTLP endpoint (read by the OTLP exporters themselves; cw names it in its messages).",
        "the exporters' default, http://localhost:4318 (grpc: 4317)",
    ),
    Setting(
        "provider_count",
        ("CW_PROVIDER_COUNT",),
        ProviderCountPolicy.AUTO,
        parse_policy,
        "Provider token counts: `auto` (only where the local count is approximate and credentials exist), `always` or `never`.",
    ),
    Setting(
        "provider_count_timeout",
        ("CW_PROVIDER_COUNT_TIMEOUT",),
        5.0,
        parse_seconds,
        "Seconds one provider count may take in all.",
    ),
    Setting(
        "context_windows",
        (),
        {},
        parse_context_windows,
        "Context window sizes by model name, for models LiteLLM does not know (or to override it).",
        "none (LiteLLM's model map)",
    ),
    Setting("max_details", (), 20, parse_positive_int, "The most per-source detail rows a snapshot carries."),
    Setting(
        "max_tools",
        ("CW_MAX_TOOLS",),
        20,
        parse_positive_int,
        "The most per-tool rows a snapshot carries; the rest fold into one row, `(other tools)`, with a warning.",
    ),
    Setting("snapshot_history", (), 1000, parse_positive_int, "How many recent snapshots `cw.snapshots()` keeps."),
    Setting(
        "metrics",
        ("CW_METRICS",),
        "export",
        parse_metrics,
        "`export` (metrics go where `export` sends them), `prometheus:HOST:PORT` (a scrape endpoint instead) or `none`.",
    ),
    Setting(
        "metric_run_labels",
        ("CW_METRIC_RUN_LABELS",),
        False,
        parse_flag,
        "Add run and stage ids to metric labels (one series per stage: mind the cardinality).",
    ),
    Setting(
        "metric_series_limit",
        ("CW_METRIC_SERIES_LIMIT",),
        2000,
        parse_positive_int,
        "The most series one metric keeps in the process; beyond it, one overflow series (the SDK's cardinality limit).",
    ),
    Setting(
        "log_events",
        ("CW_LOG_EVENTS",),
        False,
        parse_flag,
        "Also emit each snapshot as a log-based event (OTEP 4430).",
    ),
    Setting(
        "threshold_percent",
        ("CW_THRESHOLD_PERCENT",),
        80.0,
        parse_percent,
        "The share of the window a stage's forecast counts the calls to (`forecast.calls_until_threshold`), "
        "and the `agent.context_window.calls_until_threshold` gauge.",
    ),
    Setting(
        "langfuse_usage_details",
        ("CW_LANGFUSE_USAGE_DETAILS",),
        False,
        parse_flag,
        "Also put Langfuse's `langfuse.observation.usage_details` on each call span: the categories as usage types "
        "(`input_system_prompt`, ...) and `output`; the categories sum to the input, which is not given twice.",
    ),
    Setting(
        "export_queue_size",
        ("OTEL_BSP_MAX_QUEUE_SIZE",),
        2048,
        parse_positive_int,
        "Spans waiting for export; a full queue drops (counted, said once a minute), never blocks.",
    ),
    Setting(
        "export_interval_ms",
        ("OTEL_BSP_SCHEDULE_DELAY",),
        1000,
        parse_positive_int,
        "Milliseconds between span exports.",
    ),
    Setting(
        "metric_interval_ms",
        ("OTEL_METRIC_EXPORT_INTERVAL",),
        60000,
        parse_positive_int,
        "Milliseconds between metric exports.",
    ),
    Setting(
        "stream_usage",
        ("CW_STREAM_USAGE",),
        StreamUsagePolicy.AUTO,
        parse_stream_usage,
        "`auto`: ask OpenAI-family streams for their usage where the endpoint accepts `stream_options`; "
        "`never`: streams go out exactly as written.",
    ),
    Setting(
        "exit_timeout",
        ("CW_EXIT_TIMEOUT",),
        2.0,
        parse_seconds,
        "Seconds cw may add to the process's exit to export what is left (a slower backend loses it).",
    ),
    Setting(
        "sdk_disabled",
        ("OTEL_SDK_DISABLED",),
        False,
        parse_otel_flag,
        "OpenTelemetry's own off switch: nothing is exported (`cw.snapshots()` and `cw.estimate()` still work).",
    ),
)

READ_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "backend",
        ("CW_BACKEND",),
        None,
        parse_text,
        "Where the CLI, the server and `cw.reader()` read from: `file:PATH`, `prometheus+http://HOST:PORT`, "
        "`phoenix+http://...`, `jaeger+http://...`, `tempo+http://...`.",
        "the file `export` writes (CW_EXPORT), `file:" + DEFAULT_TELEMETRY_FILE + "` by default",
    ),
    Setting(
        "stale_after",
        ("CW_STALE_AFTER",),
        DEFAULT_STALE_AFTER,
        parse_seconds,
        "Seconds without a new snapshot after which a stage reads `stored` instead of `live`.",
    ),
    Setting(
        "index_dir",
        ("CW_INDEX_DIR",),
        Default(_default_index_dir),
        parse_text,
        "Where the file reader keeps its indexes (`memory`: nowhere, rebuilt per process).",
        "$XDG_CACHE_HOME/cw-middleware/file-index (~/.cache/... without it)",
    ),
    Setting("backend_token", ("CW_BACKEND_TOKEN",), None, parse_text, "A bearer token sent to the backend.", "none"),
    Setting("backend_user", ("CW_BACKEND_USER",), None, parse_text, "A basic-auth user for the backend.", "none"),
    Setting("backend_password", ("CW_BACKEND_PASSWORD",), "", as_is, "The basic-auth password (with CW_BACKEND_USER).", "empty"),
    Setting(
        "backend_headers",
        ("CW_BACKEND_HEADERS",),
        {},
        parse_headers,
        "Extra headers for the backend, `name=value` pairs separated by commas (values percent-decoded).",
        "none",
    ),
    Setting("backend_timeout", ("CW_BACKEND_TIMEOUT",), 10.0, parse_seconds, "Seconds per HTTP request to the backend."),
    Setting(
        "serve_token",
        ("CW_SERVE_TOKEN",),
        None,
        parse_text,
        "The bearer token `cw-middleware serve` requires (instead of --token, which shows in `ps`).",
        "none",
    ),
)


# ---------------------------------------------------------------- the resolved settings


@dataclass(frozen=True)
class Config:
    """The call path's settings (see `SETTINGS` for each one's meaning and variables)."""

    service_name: str = "cw-middleware"
    export: str = f"file:{DEFAULT_TELEMETRY_FILE}"
    otlp_protocol: str = "http/protobuf"
    otlp_endpoint: Optional[str] = None
    provider_count: ProviderCountPolicy = ProviderCountPolicy.AUTO
    provider_count_timeout: float = 5.0
    context_windows: Mapping[str, int] = field(default_factory=dict)
    max_details: int = 20
    max_tools: int = 20
    snapshot_history: int = 1000
    metrics: str = "export"
    metric_run_labels: bool = False
    metric_series_limit: int = 2000
    log_events: bool = False
    threshold_percent: float = 80.0
    langfuse_usage_details: bool = False
    export_queue_size: int = 2048
    export_interval_ms: int = 1000
    metric_interval_ms: int = 60000
    stream_usage: StreamUsagePolicy = StreamUsagePolicy.AUTO
    exit_timeout: float = 2.0
    sdk_disabled: bool = False

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


@dataclass(frozen=True)
class ReadConfig:
    """The read side's settings (see `READ_SETTINGS`)."""

    backend: Optional[str] = None  # None: the file the write side's `export` names, see `backend_url`
    stale_after: float = DEFAULT_STALE_AFTER
    index_dir: str = ""
    backend_token: Optional[str] = None
    backend_user: Optional[str] = None
    backend_password: str = ""
    backend_headers: Mapping[str, str] = field(default_factory=dict)
    backend_timeout: float = 10.0
    serve_token: Optional[str] = None
    export: str = f"file:{DEFAULT_TELEMETRY_FILE}"  # the write side's, as `resolve` reads it
    threshold_percent: float = 80.0  # the write side's too: the forecast's threshold, one setting for both

    def backend_url(self) -> str:
        """The backend to read from: CW_BACKEND, else the file the export writes.

        Raises ConfigError when the export writes no file (``otlp``, ``none``): the answer is in
        the OTLP backend, and reading the default file would look in the wrong place.
        """
        if self.backend:
            return self.backend
        if self.export.startswith("file:"):
            return self.export
        where = "OTLP (CW_EXPORT=otlp or OTEL_EXPORTER_OTLP_ENDPOINT)" if self.export == "otlp" else "nowhere (CW_EXPORT=none)"
        raise ConfigError(
            f"telemetry is exported to {where}, not to a file: name the backend to read from with --backend "
            "or CW_BACKEND (e.g. jaeger+http://HOST:16686, tempo+http://HOST:3200, phoenix+http://HOST:6006)"
        )


def _resolve(table: tuple[Setting, ...], given: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    names = {s.name for s in table}
    unknown = sorted(set(given) - names)
    if unknown:
        raise ConfigError(f"unknown setting {unknown[0]!r}; the settings are: {', '.join(sorted(names))}")
    values: dict[str, Any] = {}
    for setting in table:
        value = given.get(setting.name)
        if value is not None:
            values[setting.name] = setting.parse(value, setting.name)
            continue
        variable = next((v for v in setting.env if env.get(v, "").strip()), None)
        if variable is not None:
            values[setting.name] = setting.parse(env[variable], variable)
        elif isinstance(setting.default, Default):
            values[setting.name] = setting.default.compute(env)
        else:
            values[setting.name] = setting.default
    return values


def resolve(*, environ: Optional[Mapping[str, str]] = None, **settings: Any) -> Config:
    """The call path's settings from ``settings`` (configure()'s arguments), the environment and the defaults.

    Raises ConfigError naming the argument or variable of a bad value, or an unknown setting.
    """
    env = os.environ if environ is None else environ
    return Config(**_resolve(SETTINGS, settings, env))


def resolve_read(*, environ: Optional[Mapping[str, str]] = None, **settings: Any) -> ReadConfig:
    """The read side's settings; the write side's ``export`` and ``threshold_percent`` too, read by the same rule as
    `resolve`'s."""
    env = os.environ if environ is None else environ
    values = _resolve(READ_SETTINGS, settings, env)
    values["export"] = environment_export(env)
    # The forecast's threshold is one setting for both sides: the reader's answers and the writer's gauge agree.
    values["threshold_percent"] = _resolve((next(s for s in SETTINGS if s.name == "threshold_percent"),), {}, env)[
        "threshold_percent"
    ]
    return ReadConfig(**values)


def environment_export(environ: Optional[Mapping[str, str]] = None) -> str:
    """``export`` as the environment says it (or its default), by `resolve`'s rule; a bad ``CW_EXPORT`` reads as the
    default file (the writer refuses it and says so; the reader looks in the default)."""
    env = os.environ if environ is None else environ
    try:
        return str(_resolve((next(s for s in SETTINGS if s.name == "export"),), {}, env)["export"])
    except ConfigError:
        return f"file:{DEFAULT_TELEMETRY_FILE}"


def provider_variable(names: tuple[str, ...], environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The first of these provider variables that is set (API keys, base URLs), read at call time as LiteLLM reads them."""
    env = os.environ if environ is None else environ
    return next((env[name] for name in names if env.get(name)), None)


def setting_names() -> list[str]:
    """Every `configure()` argument, in the order of `SETTINGS` (the docs and `configure`'s error list them)."""
    return [s.name for s in SETTINGS]
