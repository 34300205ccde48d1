"""Read the context window of a stage back from a telemetry backend.

    reader = cw.reader("file:cw-telemetry.jsonl")
    answer = reader.context_window("run-42", "implement@1")   # StageContextWindow, or cw.NotFound
    stages = reader.stages("run-42")                           # [StageSummary], or cw.NotFound
    runs = reader.runs()                                       # [RunSummary], newest first

Every backend implements `SnapshotReader`: absence is a return value (None), as
OpenTelemetry exporters report outcomes in a result rather than an exception;
`Reader` turns a missing run or stage into `NotFound` in one place. A backend is
named by the scheme of its URL (``file:PATH``, ``prometheus+http://HOST:9090``,
...) and is one module plus one line in `BACKENDS`: a factory that takes the
parsed `BackendURL` and the `ReaderOptions` (credentials, timeout, retries, an
HTTP client, the staleness horizon).

Nothing in this package imports LiteLLM or tiktoken: the read side starts fast.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, Union, runtime_checkable
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from ..config import parse_seconds
from ..contract import MAX_ID_LENGTH, StageContextWindow, validate_id  # noqa: F401 - re-exported
from ..errors import ConfigError, NotFound
from .fold import Horizon, RunSummary, StageSummary, parse_stale_after, stale_after_from_env


@runtime_checkable
class SnapshotReader(Protocol):
    """One backend. Implementations never raise for absence; they raise BackendError for failures."""

    def latest(self, run_id: str, stage_id: str) -> Optional[StageContextWindow]:
        """The stage's latest answer, or None when the backend knows no such stage."""
        ...

    def stages(self, run_id: str) -> Optional[list[StageSummary]]:
        """The run's stages, or None when the backend knows no such run."""
        ...

    def runs(self) -> list[RunSummary]:
        """The runs the backend holds (as far as it can list them), newest activity first."""
        ...

    def close(self) -> None: ...


# ---------------------------------------------------------------- options


@dataclass(frozen=True)
class ReaderOptions:
    """How to talk to a backend. Credentials are never shown in errors, logs or answers."""

    timeout: float = 10.0  # seconds per HTTP request
    retries: int = 2  # extra attempts on connection errors and 5xx answers, with backoff
    headers: Mapping[str, str] = field(default_factory=dict)
    bearer_token: Optional[str] = None
    basic_auth: Optional[tuple[str, str]] = None
    verify: Union[bool, str] = True  # TLS: False, or a CA bundle path
    client: Any = None  # an httpx.Client to use as is (tests: httpx.MockTransport)
    stale_after: float = field(default_factory=stale_after_from_env)
    now_ns: Optional[int] = None  # pins the clock of the staleness horizon (tests)

    @property
    def horizon(self) -> Horizon:
        return Horizon(self.stale_after, self.now_ns)

    def __repr__(self) -> str:  # never the credentials
        return f"ReaderOptions(timeout={self.timeout}, retries={self.retries}, stale_after={self.stale_after})"


@dataclass(frozen=True)
class BackendURL:
    """A backend URL taken apart: ``prometheus+https://user:pw@host:9090/prefix?opt=v``.

    ``scheme`` is the registry key (``prometheus``); ``location`` the file path or the
    base URL without credentials and query (``https://host:9090/prefix``); ``params``
    the query options a backend may read (``project=...`` for Phoenix).
    """

    scheme: str
    location: str
    params: Mapping[str, str] = field(default_factory=dict)
    original: str = ""

    def __str__(self) -> str:
        return self.display

    @property
    def display(self) -> str:
        """The URL as errors and the CLI show it: no credentials, no query."""
        if self.scheme == "file":
            return f"file:{self.location}"
        return f"{self.scheme}+{self.location}"


# Query options every networked backend understands; the rest is the backend's own.
_COMMON_PARAMS = ("timeout", "retries", "stale_after", "verify")


def parse_backend_url(url: str) -> tuple[BackendURL, dict[str, Any]]:
    """(the parsed URL, options it carries: credentials from userinfo, common query options)."""
    scheme, sep, rest = url.partition(":")
    if not sep or len(scheme) <= 1 or "/" in scheme or "\\" in scheme:  # a plain (possibly Windows) path
        return BackendURL("file", url, {}, url), {}
    name, plus, transport = scheme.partition("+")
    if not plus:
        if name in ("http", "https"):
            raise ConfigError(f"name the backend in {_redact(url)!r}, e.g. prometheus+{name}://..., jaeger+{name}://...")
        return BackendURL(name, rest[2:] if name == "file" and rest.startswith("//") else rest, {}, url), {}
    if transport not in ("http", "https"):
        raise ConfigError(f"backend URLs use http or https after '+', got {scheme!r}")
    parts = urlsplit(f"{transport}:{rest}")
    if not parts.hostname:
        raise ConfigError(f"the backend URL {_redact(url)!r} has no host")
    options: dict[str, Any] = {}
    if parts.username is not None:
        options["basic_auth"] = (unquote(parts.username), unquote(parts.password or ""))
    netloc = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"the backend URL {_redact(url)!r} has a bad port") from None
    if port is not None:
        netloc += f":{port}"
    params = dict(parse_qsl(parts.query, keep_blank_values=True))
    for key in _COMMON_PARAMS:
        if key in params:
            options[key] = params.pop(key)
    location = urlunsplit((transport, netloc, parts.path.rstrip("/"), "", ""))
    return BackendURL(name, location, params, url), options


def _redact(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    host = rest.split("/", 1)[0]
    if "@" in host:
        rest = rest.replace(host, "***@" + host.rsplit("@", 1)[1], 1)
    return f"{scheme}://{rest.split('?', 1)[0]}"


def resolve_options(
    url_options: Mapping[str, Any], given: Mapping[str, Any], environ: Optional[Mapping[str, str]] = None
) -> ReaderOptions:
    """Options by precedence: argument > URL > environment > default."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    if env.get("CW_BACKEND_TOKEN"):
        values["bearer_token"] = env["CW_BACKEND_TOKEN"]
    if env.get("CW_BACKEND_USER"):
        values["basic_auth"] = (env["CW_BACKEND_USER"], env.get("CW_BACKEND_PASSWORD", ""))
    if env.get("CW_BACKEND_HEADERS"):
        values["headers"] = _parse_headers(env["CW_BACKEND_HEADERS"])
    if env.get("CW_BACKEND_TIMEOUT"):
        values["timeout"] = env["CW_BACKEND_TIMEOUT"]
    values.update(url_options)
    values.update({k: v for k, v in given.items() if v is not None})
    if "timeout" in values:
        values["timeout"] = parse_seconds(values["timeout"], "timeout")
    if "retries" in values:
        values["retries"] = _retries(values["retries"])
    if "stale_after" in values:
        values["stale_after"] = parse_stale_after(values["stale_after"])
    if isinstance(values.get("verify"), str) and values["verify"].lower() in ("0", "false", "no"):
        values["verify"] = False
    elif isinstance(values.get("verify"), str) and values["verify"].lower() in ("1", "true", "yes"):
        values["verify"] = True
    return ReaderOptions(**values)


def _parse_headers(raw: str) -> dict[str, str]:
    """``k=v,k2=v2``, the OTEL_EXPORTER_OTLP_HEADERS format (values percent-decoded)."""
    out = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError("CW_BACKEND_HEADERS must be 'name=value' pairs separated by commas")
        out[unquote(key.strip())] = unquote(value.strip())
    return out


def _retries(value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"retries must be a whole number, got {value!r}") from None
    if not 0 <= number <= 10:
        raise ConfigError(f"retries must be between 0 and 10, got {value!r}")
    return number


# ---------------------------------------------------------------- the public reader


class Reader:
    """The public read-back API over one `SnapshotReader`."""

    def __init__(self, backend: SnapshotReader, url: Union[str, BackendURL] = "") -> None:
        self.backend = backend
        self.url = url.display if isinstance(url, BackendURL) else url

    def context_window(self, run_id: str, stage_id: str) -> StageContextWindow:
        """The DESIGN.md contract for (run_id, stage_id); NotFound for a missing run or stage."""
        validate_id("run_id", run_id)
        validate_id("stage_id", stage_id)
        answer = self.backend.latest(run_id, stage_id)
        if answer is None:
            if self.backend.stages(run_id) is None:
                raise NotFound(f"run {run_id!r} not found")
            raise NotFound(f"stage {stage_id!r} not found in run {run_id!r}")
        return answer

    def stages(self, run_id: str) -> list[StageSummary]:
        validate_id("run_id", run_id)
        found = self.backend.stages(run_id)
        if found is None:
            raise NotFound(f"run {run_id!r} not found")
        return found

    def runs(self) -> list[RunSummary]:
        """Every run the backend can list, newest activity first (empty when there is none)."""
        return self.backend.runs()

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _file_backend(url: BackendURL, options: ReaderOptions) -> SnapshotReader:
    from .otlp_file import open_reader

    return open_reader(url.location, options)


def _phoenix_backend(url: BackendURL, options: ReaderOptions) -> SnapshotReader:
    from .phoenix import open_reader

    return open_reader(url, options)


def _jaeger_backend(url: BackendURL, options: ReaderOptions) -> SnapshotReader:
    from .jaeger import open_reader

    return open_reader(url, options)


def _tempo_backend(url: BackendURL, options: ReaderOptions) -> SnapshotReader:
    from .tempo import open_reader

    return open_reader(url, options)


def _prometheus_backend(url: BackendURL, options: ReaderOptions) -> SnapshotReader:
    from .prometheus import open_reader

    return open_reader(url, options)


# scheme -> factory(url, options). A backend is one module plus one line here.
BACKENDS: dict[str, Callable[[BackendURL, ReaderOptions], SnapshotReader]] = {
    "file": _file_backend,
    "phoenix": _phoenix_backend,
    "jaeger": _jaeger_backend,
    "tempo": _tempo_backend,
    "prometheus": _prometheus_backend,  # Prometheus and VictoriaMetrics (PromQL HTTP API)
}

# How each scheme is written, for help texts and errors.
BACKEND_FORMS: dict[str, str] = {
    "file": "file:PATH",
    "phoenix": "phoenix+http://HOST:6006[?project=NAME]",
    "jaeger": "jaeger+http://HOST:16686[?service=NAME]",
    "tempo": "tempo+http://HOST:3200",
    "prometheus": "prometheus+http://HOST:9090",
}


def reader(
    url: Optional[str] = None,
    *,
    client: Any = None,
    timeout: Optional[float] = None,
    headers: Optional[Mapping[str, str]] = None,
    bearer_token: Optional[str] = None,
    basic_auth: Optional[tuple[str, str]] = None,
    retries: Optional[int] = None,
    verify: Union[bool, str, None] = None,
    stale_after: Optional[float] = None,
) -> Reader:
    """A Reader for a backend URL (see `BACKEND_FORMS`); ``file:PATH`` also as ``file://PATH`` or a plain path.

    Default URL: $CW_BACKEND, else the file the embedded exporter writes ($CW_EXPORT's
    file, else ./cw-telemetry.jsonl). Options: argument > URL (user:password@, ?timeout=,
    ?retries=, ?stale_after=, ?verify=) > environment (CW_BACKEND_TOKEN, CW_BACKEND_USER and
    CW_BACKEND_PASSWORD, CW_BACKEND_HEADERS, CW_BACKEND_TIMEOUT, CW_STALE_AFTER) > default.
    """
    url = url or default_backend_url()
    parsed, url_options = parse_backend_url(url)
    factory = BACKENDS.get(parsed.scheme)
    if factory is None:
        raise ConfigError(f"unknown backend {parsed.scheme!r} in {_redact(url)!r}; known: {known_backends()}")
    given = dict(
        client=client,
        timeout=timeout,
        headers=headers,
        bearer_token=bearer_token,
        basic_auth=basic_auth,
        retries=retries,
        verify=verify,
        stale_after=stale_after,
    )
    options = resolve_options(url_options, given)
    return Reader(factory(parsed, options), parsed)


def known_backends() -> str:
    """The registered backend URL forms, for help texts: ``file:PATH, prometheus+http://HOST:9090, ...``."""
    return ", ".join(BACKEND_FORMS.get(s, f"{s}:...") for s in BACKENDS)


def default_backend_url() -> str:
    from ..config import DEFAULT_TELEMETRY_FILE

    if os.environ.get("CW_BACKEND"):
        return os.environ["CW_BACKEND"]
    export = os.environ.get("CW_EXPORT", "")
    if export.startswith("file:") and len(export) > 5:
        return export
    return f"file:{DEFAULT_TELEMETRY_FILE}"


__all__ = [
    "BACKENDS",
    "BACKEND_FORMS",
    "BackendURL",
    "Reader",
    "ReaderOptions",
    "RunSummary",
    "SnapshotReader",
    "StageSummary",
    "default_backend_url",
    "known_backends",
    "parse_backend_url",
    "reader",
    "validate_id",
]
