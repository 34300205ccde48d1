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

import functools
import hashlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any, Optional, Protocol, Union, runtime_checkable

from .._kernel.contract import (  # noqa: F401 - re-exported
    DEFAULT_THRESHOLD_PERCENT,
    MAX_ID_LENGTH,
    HistoryPoint,
    RunReport,
    StageContextWindow,
    Staleness,
    validate_id,
)
from .._kernel.derived import FORECAST_CALLS, forecast_from, stage_totals_from
from .._kernel.errors import BackendError, ConfigError, NotFound
from .fold import DEFAULT_HISTORY, MAX_HISTORY, Missing, RunSummary, StageSummary
from .options import BackendURL, ReaderOptions, parse_backend_url, redact, resolve_options
from .suggestions import suggestions_from
from .summary import StagePart, run_report, stage_part


@runtime_checkable
class SnapshotReader(Protocol):
    """One backend. Implementations never raise for absence; they raise BackendError for failures.

    A backend whose `history` keeps the latest values rather than every call (metrics) says so with a
    class attribute ``keeps_every_call = False``; the reader then leaves its totals to it.
    """

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

        Its ``stage_totals`` and ``forecast`` are read from the stage's calls as the backend holds them (each
        call once, at its latest number: `history`), whichever process made them, by the one
        `stage_totals_from` and `forecast_from`; its ``suggestions`` from that answer by the one
        `suggestions_from`. (A metrics backend keeps no calls: its totals are its counters'.)"""
        validate_id("run_id", run_id)
        validate_id("stage_id", stage_id)
        answer = self.backend.latest(run_id, stage_id)
        if answer is Missing.RUN:
            raise NotFound(f"run {run_id!r} not found")
        if answer is Missing.STAGE:
            raise NotFound(f"stage {stage_id!r} not found in run {run_id!r}")
        return self._with_family(run_id, stage_id, self._derived(run_id, stage_id, answer))

    def _with_family(self, run_id: str, stage_id: str, answer: StageContextWindow) -> StageContextWindow:
        """The answer with its place in the run's tree: its parent stage and the stages started from it.

        Metrics keep no parents (a backend with ``keeps_every_call = False``); a listing that fails leaves the
        answer as it is: the tree is never why a stage's window cannot be read."""
        if not getattr(self.backend, "keeps_every_call", True):
            return answer
        try:
            listing = self.backend.stages(run_id) or []
        except BackendError:
            return answer
        parent = next((s.parent_stage_id for s in listing if s.stage_id == stage_id), None)
        children = [s.stage_id for s in listing if s.parent_stage_id == stage_id]
        if parent is None and not children:
            return answer
        return answer.model_copy(update={"parent_stage_id": parent, "child_stage_ids": children})

    def _derived(
        self, run_id: str, stage_id: str, answer: StageContextWindow, calls: Optional[list[HistoryPoint]] = None
    ) -> StageContextWindow:
        """The answer with what is derived from the stage's calls (its totals, forecast, suggestions); ``calls``
        when the caller read them already (a run's summary reads every stage's at once)."""
        if not answer.available:
            return answer
        every = getattr(self.backend, "keeps_every_call", True)
        if calls is None and (every or answer.context_window_tokens):
            wanted = MAX_HISTORY if every else FORECAST_CALLS
            found = self.backend.history(run_id, stage_id, wanted)
            calls = found if isinstance(found, list) else None
        update: dict[str, Any] = {}
        if isinstance(calls, list) and calls:
            if every and len(calls) < MAX_HISTORY:  # past that many calls, the writer's own running totals stand
                update["stage_totals"] = stage_totals_from(calls)
            forecast = forecast_from([p.input_tokens for p in calls], answer.context_window_tokens, self.threshold_percent)
            if forecast is not None:
                update["forecast"] = forecast
        answer = answer.model_copy(update=update)
        return answer.model_copy(update={"suggestions": suggestions_from(answer)})

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
        """The run over its stages: each stage's latest request and totals, and the run's; NotFound for a missing run.

        Each stage's part is `context_window`'s answer (its totals from its calls as the backend holds them). A
        backend that keeps rows (the file index) keeps each stage's part as of its newest line, so a summary reads
        again only the stages a line has named since; the rest come in one pass over the run's lines."""
        stages = self.stages(run_id)
        parts: dict[str, Optional[StagePart]] = {}
        key = _row_key(self.threshold_percent)
        rows_of = getattr(self.backend, "stage_rows", None)
        for stage_id, row in ((rows_of(run_id, key) if rows_of is not None else None) or {}).items():
            if row is not None:
                try:
                    parts[stage_id] = StagePart.model_validate_json(row)
                except ValueError:
                    continue  # a row of another shape: the stage is read again
        wanted = [s.stage_id for s in stages if s.stage_id not in parts]
        whole = getattr(self.backend, "run_calls", None)  # every stage in one pass, where the backend can
        if wanted and whole is not None:

            def each(stage_id: str, window: Optional[StageContextWindow], calls: list[HistoryPoint]) -> Optional[bytes]:
                part = parts[stage_id] = stage_part(self._derived(run_id, stage_id, window, calls) if window else None)
                if part is None or window is None or window.staleness is not Staleness.STORED:
                    return None  # a live stage is read again each time: it may age out with no new line
                return part.model_dump_json().encode()

            whole(run_id, wanted, key, each)
        elif wanted:
            for stage_id in wanted:
                latest = self.backend.latest(run_id, stage_id)
                window = latest if isinstance(latest, StageContextWindow) else None
                parts[stage_id] = stage_part(self._derived(run_id, stage_id, window) if window is not None else None)
        return run_report(run_id, [(stage, parts.get(stage.stage_id)) for stage in stages])

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _row_key(threshold_percent: float) -> str:
    """What a kept stage row depends on beside the stage's lines: the code that derives it and the reader's threshold."""
    return f"{_code_digest()}:{threshold_percent!r}"


@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    """A digest of the modules a stage's part is derived by: a row kept by other code (another release) is not read."""
    from .._kernel import codec, contract, derived, names
    from . import fold, summary

    digest = hashlib.blake2b(digest_size=8)
    for module in (codec, names, contract, derived, fold, summary, sys.modules[__name__]):
        try:
            digest.update(Path(module.__file__ or "").read_bytes())
        except OSError:
            pass
    return digest.hexdigest()


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
    from .._kernel.config import resolve_read

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
