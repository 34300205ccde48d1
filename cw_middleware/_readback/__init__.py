"""Read the context window of a stage back from a telemetry backend.

    reader = cw.reader("file:cw-telemetry.jsonl")
    answer = reader.context_window("run-42", "implement@1")   # StageContextWindow, or cw.NotFound
    stages = reader.stages("run-42")                           # [StageSummary], or cw.NotFound
    runs = reader.runs()                                       # [RunSummary], newest first
    points = reader.history("run-42", "implement@1")           # [HistoryPoint], oldest first
    report = reader.summary("run-42")                          # RunReport: the run over its stages

Every backend implements `SnapshotReader`: absence is a return value (`Missing` or
None), as OpenTelemetry exporters report outcomes in a result rather than an
exception; `Reader` turns a missing run or stage into `NotFound` in one place. A
backend is named by the scheme of its URL (``file:PATH``, ``prometheus+http://HOST:9090``,
...) and is one module plus one line in `BACKENDS`: the module's
``open_reader(url, options)`` takes the parsed `BackendURL` and the `ReaderOptions`
(credentials, timeout, retries, an HTTP client, the staleness horizon). The span
backends (Jaeger, Tempo, Phoenix) are each one `traces.SpanSearch` under the shared
`traces.TraceReader`.

Nothing in this package imports LiteLLM or tiktoken: the read side starts fast.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import Any, Optional, Protocol, Union, runtime_checkable

from .._contract import (  # noqa: F401 - re-exported
    DEFAULT_THRESHOLD_PERCENT,
    FORECAST_CALLS,
    MAX_ID_LENGTH,
    HistoryPoint,
    RunReport,
    StageContextWindow,
    forecast_from,
    suggestions_from,
    validate_id,
)
from .._errors import ConfigError, NotFound
from .fold import DEFAULT_HISTORY, MAX_HISTORY, Missing, RunSummary, StageSummary
from .options import BackendURL, ReaderOptions, parse_backend_url, redact, resolve_options
from .summary import run_report


@runtime_checkable
class SnapshotReader(Protocol):
    """One backend. Implementations never raise for absence; they raise BackendError for failures."""

    def latest(self, run_id: str, stage_id: str) -> Union[StageContextWindow, Missing]:
        """The stage's latest answer, or which of the run and the stage the backend does not hold."""
        ...

    def stages(self, run_id: str) -> Optional[list[StageSummary]]:
        """The run's stages, or None when the backend knows no such run."""
        ...

    def runs(self) -> list[RunSummary]:
        """The runs the backend holds (as far as it can list them), newest activity first."""
        ...

    def history(self, run_id: str, stage_id: str, limit: int = DEFAULT_HISTORY) -> Union[list[HistoryPoint], Missing]:
        """The stage's newest ``limit`` calls, oldest first (each call's latest snapshot), or what is missing."""
        ...

    def close(self) -> None: ...


# ---------------------------------------------------------------- the public reader


class Reader:
    """The public read-back API over one `SnapshotReader`."""

    def __init__(
        self, backend: SnapshotReader, url: Union[str, BackendURL] = "", threshold_percent: float = DEFAULT_THRESHOLD_PERCENT
    ) -> None:
        self.backend = backend
        self.url = url.display if isinstance(url, BackendURL) else url
        self.threshold_percent = threshold_percent

    def context_window(self, run_id: str, stage_id: str) -> StageContextWindow:
        """The DESIGN.md contract for (run_id, stage_id); NotFound for a missing run or stage.

        Its ``forecast`` is read from the stage's calls as the backend holds them (each call once, at its
        latest number: `history`), whichever process made them, by the one `forecast_from`; its
        ``suggestions`` from the answer and the forecast by the one `suggestions_from`."""
        validate_id("run_id", run_id)
        validate_id("stage_id", stage_id)
        answer = self.backend.latest(run_id, stage_id)
        if answer is Missing.RUN:
            raise NotFound(f"run {run_id!r} not found")
        if answer is Missing.STAGE:
            raise NotFound(f"stage {stage_id!r} not found in run {run_id!r}")
        if answer.available:
            calls = self.backend.history(run_id, stage_id, FORECAST_CALLS) if answer.context_window_tokens else None
            if isinstance(calls, list):
                tokens = [p.input_tokens for p in calls]
                forecast = forecast_from(tokens, answer.context_window_tokens, self.threshold_percent)
                if forecast is not None:
                    answer = answer.model_copy(update={"forecast": forecast})
            answer = answer.model_copy(update={"suggestions": suggestions_from(answer)})
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

    def history(self, run_id: str, stage_id: str, limit: int = DEFAULT_HISTORY) -> list[HistoryPoint]:
        """The stage over time: its newest ``limit`` calls (1 to 10,000), oldest first; NotFound for a missing run or stage."""
        validate_id("run_id", run_id)
        validate_id("stage_id", stage_id)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_HISTORY:
            raise ConfigError(f"limit must be a whole number from 1 to {MAX_HISTORY}, got {limit!r}")
        answer = self.backend.history(run_id, stage_id, limit)
        if answer is Missing.RUN:
            raise NotFound(f"run {run_id!r} not found")
        if answer is Missing.STAGE:
            raise NotFound(f"stage {stage_id!r} not found in run {run_id!r}")
        return answer

    def summary(self, run_id: str) -> RunReport:
        """The run over its stages: each stage's latest request and totals, and the run's; NotFound for a missing run."""
        pairs = []
        for stage in self.stages(run_id):
            window = self.backend.latest(run_id, stage.stage_id)
            pairs.append((stage, window if isinstance(window, StageContextWindow) else None))
        return run_report(run_id, pairs)

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------- the backends

Opener = Callable[[BackendURL, ReaderOptions], SnapshotReader]


@dataclass(frozen=True)
class Backend:
    """One line of the registry: a URL scheme, how its URL is written (help texts, errors), what opens it."""

    scheme: str
    form: str
    open: Opener


def _module(name: str) -> Opener:
    """``readback/<name>.py``'s ``open_reader``, imported at the first use (the file reader never loads httpx)."""

    def open_reader(url: BackendURL, options: ReaderOptions) -> SnapshotReader:
        return import_module(f"{__name__}.{name}").open_reader(url, options)  # type: ignore[no-any-return]

    return open_reader


# A backend is one module (its ``open_reader(url, options)``) plus one line here.
BACKENDS: dict[str, Backend] = {
    b.scheme: b
    for b in (
        Backend("file", "file:PATH", _module("otlp_file")),
        Backend("phoenix", "phoenix+http://HOST:6006[?project=NAME]", _module("phoenix")),
        Backend("jaeger", "jaeger+http://HOST:16686[?service=NAME]", _module("jaeger")),
        Backend("tempo", "tempo+http://HOST:3200", _module("tempo")),
        Backend("prometheus", "prometheus+http://HOST:9090", _module("prometheus")),  # and VictoriaMetrics
    )
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
    """A Reader for a backend URL (see `BACKENDS`); ``file:PATH`` also as ``file://PATH`` or a plain path.

    Default URL: $CW_BACKEND, else the file the embedded exporter writes ($CW_EXPORT's
    file, else ./cw-telemetry.jsonl). Options: argument > URL (user:password@, ?timeout=,
    ?retries=, ?stale_after=, ?verify=) > environment (CW_BACKEND_TOKEN, CW_BACKEND_USER and
    CW_BACKEND_PASSWORD, CW_BACKEND_HEADERS, CW_BACKEND_TIMEOUT, CW_STALE_AFTER) > default.
    """
    url = url or default_backend_url()
    parsed, url_options = parse_backend_url(url)
    backend = BACKENDS.get(parsed.scheme)
    if backend is None:
        raise ConfigError(f"unknown backend {parsed.scheme!r} in {redact(url)!r}; known: {known_backends()}")
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
    return Reader(backend.open(parsed, options), parsed, options.threshold_percent)


def known_backends() -> str:
    """The registered backend URL forms, for help texts: ``file:PATH, prometheus+http://HOST:9090, ...``."""
    return ", ".join(b.form for b in BACKENDS.values())


def default_backend_url() -> str:
    """CW_BACKEND, else the file the writer's export names (ConfigError when it exports to no file)."""
    from .._config import resolve_read

    return resolve_read().backend_url()


__all__ = [
    "BACKENDS",
    "Backend",
    "BackendURL",
    "Missing",
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
