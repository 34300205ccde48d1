"""Read the context window of a stage back from a telemetry backend.

    reader = cw.reader("file:cw-telemetry.jsonl")
    answer = reader.context_window("run-42", "implement@1")   # StageContextWindow, or cw.NotFound
    stages = reader.stages("run-42")                           # [StageSummary], or cw.NotFound

Every backend implements `SnapshotReader`: absence is a return value (None), as
OpenTelemetry exporters report outcomes in a result rather than an exception;
`Reader` turns a missing run or stage into `NotFound` in one place. Backends are
named by URL scheme: ``file:PATH`` today (an OTLP JSON lines file, ours or a
Collector's); jaeger/tempo/prometheus/phoenix register here the same way.

Nothing in this package imports LiteLLM or tiktoken: the read side starts fast.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Optional, Protocol, runtime_checkable

from ..contract import MAX_ID_LENGTH, StageContextWindow, validate_id  # noqa: F401 - re-exported
from ..errors import ConfigError, NotFound
from .otlp_json import StageSummary


@runtime_checkable
class SnapshotReader(Protocol):
    """One backend. Implementations never raise for absence; they raise BackendError for failures."""

    def latest(self, run_id: str, stage_id: str) -> Optional[StageContextWindow]:
        """The stage's latest answer, or None when the backend knows no such stage."""
        ...

    def stages(self, run_id: str) -> Optional[list[StageSummary]]:
        """The run's stages, or None when the backend knows no such run."""
        ...

    def close(self) -> None: ...


class Reader:
    """The public read-back API over one `SnapshotReader`."""

    def __init__(self, backend: SnapshotReader, url: str = "") -> None:
        self.backend = backend
        self.url = url

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

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _file_backend(location: str) -> SnapshotReader:
    from .otlp_file import open_reader

    return open_reader(location)


# scheme -> factory(location). Later backends (jaeger, tempo, prometheus, phoenix) add themselves here.
BACKENDS: dict[str, Callable[[str], SnapshotReader]] = {"file": _file_backend}


def reader(url: Optional[str] = None) -> Reader:
    """A Reader for a backend URL: ``file:PATH`` (also ``file://PATH`` or a plain path).

    Default: $CW_BACKEND, else the file the embedded exporter writes ($CW_EXPORT's
    file, else ./cw-telemetry.jsonl).
    """
    url = url or default_backend_url()
    scheme, sep, rest = url.partition(":")
    if not sep or len(scheme) <= 1:  # a plain (possibly Windows) path
        scheme, rest = "file", url
    if scheme == "file" and rest.startswith("//"):
        rest = rest[2:]
    factory = BACKENDS.get(scheme)
    if factory is None:
        known = ", ".join(f"{s}:" for s in sorted(BACKENDS))
        raise ConfigError(f"unknown backend {scheme!r} in {url!r}; known: {known}")
    return Reader(factory(rest), url)


def default_backend_url() -> str:
    from ..config import DEFAULT_TELEMETRY_FILE

    if os.environ.get("CW_BACKEND"):
        return os.environ["CW_BACKEND"]
    export = os.environ.get("CW_EXPORT", "")
    if export.startswith("file:") and len(export) > 5:
        return export
    return f"file:{DEFAULT_TELEMETRY_FILE}"


__all__ = ["BACKENDS", "Reader", "SnapshotReader", "StageSummary", "default_backend_url", "reader", "validate_id"]
