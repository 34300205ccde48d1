"""The JSON read-back API: the runs, a run's stages and summary, a stage's context window (the contract) and history.

Every backend call goes through the query gate (`gate.py`: a cap, a time box, and what
a read raised as the HTTP answer it means, `http_errors.py`).
"""

from __future__ import annotations

from .._readback.fold import DEFAULT_HISTORY, MAX_HISTORY
from .route import API_PREFIX, Exchange, Route, path_id, query_int


def _runs(ex: Exchange, _: list[str]) -> None:
    runs = ex.context.gate.run(ex.context.reader.runs, gone=ex.client_gone)
    ex.send_json(200, {"runs": [r.as_dict() for r in runs]})


def _stages(ex: Exchange, params: list[str]) -> None:
    run_id = path_id(params[0], "run_id")
    stages = ex.context.gate.run(lambda: ex.context.reader.stages(run_id), gone=ex.client_gone)
    ex.send_json(200, {"run_id": run_id, "stages": [s.as_dict() for s in stages]})


def _context_window(ex: Exchange, params: list[str]) -> None:
    run_id, stage_id = path_id(params[0], "run_id"), path_id(params[1], "stage_id")
    reader = ex.context.reader
    ex.send_json(
        200, ex.context.gate.run(lambda: reader.context_window(run_id, stage_id).model_dump(mode="json"), gone=ex.client_gone)
    )


def _history(ex: Exchange, params: list[str]) -> None:
    run_id, stage_id = path_id(params[0], "run_id"), path_id(params[1], "stage_id")
    limit = query_int(ex, "limit", DEFAULT_HISTORY, MAX_HISTORY)
    reader = ex.context.reader
    points = ex.context.gate.run(lambda: reader.history(run_id, stage_id, limit), gone=ex.client_gone)
    body = {"run_id": run_id, "stage_id": stage_id, "limit": limit, "snapshots": [p.model_dump(mode="json") for p in points]}
    ex.send_json(200, body)


def _summary(ex: Exchange, params: list[str]) -> None:
    run_id = path_id(params[0], "run_id")
    reader = ex.context.reader
    ex.send_json(200, ex.context.gate.run(lambda: reader.summary(run_id).model_dump(mode="json"), gone=ex.client_gone))


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
    Route(f"{API_PREFIX}/runs/{{run_id}}/stages/{{stage_id}}/history", _history),
    Route(f"{API_PREFIX}/runs/{{run_id}}/summary", _summary),
]
