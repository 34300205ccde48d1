"""How to reach a backend: its URL taken apart, and the options (credentials, timeouts, retries) resolved once.

``prometheus+https://user:pw@host:9090/prefix?timeout=5`` names the backend by its scheme
(`readback.BACKENDS`), where it is, credentials and options; `resolve_options` merges
them with the arguments and the environment (argument > URL > environment > default)
into one frozen `ReaderOptions`. Credentials never reach an error, a log or an answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional, Union
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from .._kernel.config import resolve_read
from .._kernel.errors import ConfigError
from .._kernel.values import parse_seconds
from .fold import DEFAULT_STALE_AFTER, Horizon, parse_stale_after


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
    stale_after: float = DEFAULT_STALE_AFTER  # `resolve_options` puts CW_STALE_AFTER's here
    index_dir: Optional[str] = None  # where the file reader keeps its index; None: CW_INDEX_DIR's (`resolve_options`)
    threshold_percent: float = 80.0  # the forecast's threshold; `resolve_options` puts CW_THRESHOLD_PERCENT's here
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
            raise ConfigError(f"name the backend in {redact(url)!r}, e.g. prometheus+{name}://..., jaeger+{name}://...")
        return BackendURL(name, rest[2:] if name == "file" and rest.startswith("//") else rest, {}, url), {}
    if transport not in ("http", "https"):
        raise ConfigError(f"backend URLs use http or https after '+', got {scheme!r}")
    parts = urlsplit(f"{transport}:{rest}")
    if not parts.hostname:
        raise ConfigError(f"the backend URL {redact(url)!r} has no host")
    options: dict[str, Any] = {}
    if parts.username is not None:
        options["basic_auth"] = (unquote(parts.username), unquote(parts.password or ""))
    netloc = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"the backend URL {redact(url)!r} has a bad port") from None
    if port is not None:
        netloc += f":{port}"
    params = dict(parse_qsl(parts.query, keep_blank_values=True))
    for key in _COMMON_PARAMS:
        if key in params:
            options[key] = params.pop(key)
    location = urlunsplit((transport, netloc, parts.path.rstrip("/"), "", ""))
    return BackendURL(name, location, params, url), options


def redact(url: str) -> str:
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
    settings = resolve_read(environ=environ)
    values: dict[str, Any] = {
        "timeout": settings.backend_timeout,
        "stale_after": settings.stale_after,
        "index_dir": settings.index_dir,
        "threshold_percent": settings.threshold_percent,
    }
    if settings.backend_token:
        values["bearer_token"] = settings.backend_token
    if settings.backend_user:
        values["basic_auth"] = (settings.backend_user, settings.backend_password)
    if settings.backend_headers:
        values["headers"] = dict(settings.backend_headers)
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


def _retries(value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"retries must be a whole number, got {value!r}") from None
    if not 0 <= number <= 10:
        raise ConfigError(f"retries must be between 0 and 10, got {value!r}")
    return number
