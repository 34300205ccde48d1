"""The JSON read-back API: the runs, a run's stages, a stage's context window (the contract).

Every backend call goes through the query gate (a cap and a time box, `gate.py`) and
through `query()`, the one place where the read side's errors become HTTP answers:
ConfigError 400, NotFound 404, BackendUnavailable 503, BackendError 502, and anything
else a reader raises mid-scan (a file truncated or replaced under it: OSError,
ValueError, ...) 502 ``backend_error`` naming only the exception's type, so the server
stays up and says what happened without a stack trace.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import BackendError, BackendUnavailable, ConfigError, NotFound
from .core import API_PREFIX, Context, Exchange, HttpError, Route, segment

logger = logging.getLogger("cw_middleware")
T = TypeVar("T")


def query(context: Context, fn: Callable[[], T]) -> T:
    """``fn()`` through the gate, its errors as HttpError."""
    try:
        return context.gate.run(fn)
    except Exception as exc:  # noqa: BLE001 - translated, never re-raised as is
        raise as_http_error(exc) from None


def as_http_error(exc: Exception) -> HttpError:
    """The one mapping from what a read raised to the HTTP answer (module docstring)."""
    if isinstance(exc, HttpError):
        return exc
    if isinstance(exc, ConfigError):
        return HttpError(400, "invalid_id", str(exc))
    if isinstance(exc, NotFound):
        return HttpError(404, "not_found", str(exc))
    if isinstance(exc, BackendUnavailable):
        return HttpError(503, "backend_unavailable", str(exc), {"Retry-After": "5"})
    if isinstance(exc, BackendError):
        return HttpError(502, "backend_error", str(exc))
    # A reader failing mid-scan must not take the server down, nor show its traceback.
    logger.warning("cw_middleware serve: the backend failed while reading (%s)", type(exc).__name__)
    return HttpError(
        502,
        "backend_error",
        f"the backend failed while reading ({type(exc).__name__}); the file may have been truncated or replaced"
        " during the scan: retry",
    )


def window_json(context: Context, run_id: str, stage_id: str) -> dict[str, Any]:
    answer = context.reader.context_window(run_id, stage_id)
    return json.loads(answer.model_dump_json())  # type: ignore[no-any-return]


def _runs(ex: Exchange, _: list[str]) -> None:
    runs = query(ex.context, ex.context.reader.runs)
    ex.send_json(200, {"runs": [r.as_dict() for r in runs]})


def _stages(ex: Exchange, params: list[str]) -> None:
    run_id = _id(params[0], "run_id")
    stages = query(ex.context, lambda: ex.context.reader.stages(run_id))
    ex.send_json(200, {"run_id": run_id, "stages": [s.as_dict() for s in stages]})


def _context_window(ex: Exchange, params: list[str]) -> None:
    run_id, stage_id = _id(params[0], "run_id"), _id(params[1], "stage_id")
    ex.send_json(200, query(ex.context, lambda: window_json(ex.context, run_id, stage_id)))


def _id(raw: str, name: str) -> str:
    try:
        return segment(raw, name)
    except ConfigError as exc:
        raise HttpError(400, "invalid_id", str(exc)) from None


def _openapi(ex: Exchange, _: list[str]) -> None:
    ex.send_json(200, ex.context.openapi)


def _healthz(ex: Exchange, _: list[str]) -> None:
    ex.send_json(200, {"status": "ok"})


ROUTES = [
    Route("/healthz", _healthz, auth=False),
    Route("/openapi.json", _openapi),
    Route(f"{API_PREFIX}/runs", _runs),
    Route(f"{API_PREFIX}/runs/{{run_id}}/stages", _stages),
    Route(f"{API_PREFIX}/runs/{{run_id}}/stages/{{stage_id}}/context-window", _context_window),
]
