"""Stages: which (run, stage) a call belongs to.

`stage(run_id, stage_id)` opens one around the calls inside (a context variable:
sync and async safe, and copied into tasks a stage starts). A call outside any
stage still exports, into the default run of the service: `default_stage` is the
rule, the one place it is written (the LiteLLM Proxy callback applies it too,
with ids from request headers where they are given):

* run id ``default:<service.name>`` (e.g. ``default:cw-middleware``),
* one stage per UTC day, stage id ``YYYY-MM-DD``, kind ``agent``.

No stage spans are emitted for the default run (it never starts or ends): readers
see its calls' spans, and a default stage ages out as stored by the read side's
staleness horizon.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Optional

from .._kernel.contract import StageInfo, validate_id
from .._kernel.errors import ConfigError
from .._kernel.names import AGENT_STAGE_KIND
from .runtime import get_runtime

DEFAULT_RUN_PREFIX = "default:"

_current_stage: contextvars.ContextVar[Optional[StageInfo]] = contextvars.ContextVar("cw_stage", default=None)


def default_run_id(service_name: str) -> str:
    return DEFAULT_RUN_PREFIX + service_name


def default_stage_id(now: Optional[datetime] = None) -> str:
    """The day's stage of a default run: the UTC date, ``YYYY-MM-DD``."""
    return (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%d")


def default_stage(service_name: str, run_id: Optional[str] = None, now: Optional[datetime] = None) -> StageInfo:
    """Where a call outside any stage lands: the service's default run (or ``run_id``), today's stage."""
    return StageInfo(run_id or default_run_id(service_name), default_stage_id(now), AGENT_STAGE_KIND)


@contextmanager
def stage(run_id: str, stage_id: str, kind: str = "agent", *, parent_stage_id: Optional[str] = None) -> Iterator[StageInfo]:
    """Attribute the calls inside to (run_id, stage_id); opens the stage span. Sync and async safe.

    A stage opened inside another stage of the same run is that stage's sub-agent: it records the
    outer stage as its parent (``parent_stage_id=`` names one outright, e.g. for a sub-agent run on
    another task or process). The read side shows the run as a tree (a parent's own calls, and its
    children's rolled up).
    """
    for name, value in (("run_id", run_id), ("stage_id", stage_id), ("kind", kind)):
        validate_id(name, value)  # the same rule the readers apply: what is written can be read
    outer = _current_stage.get()
    if outer is not None and (outer.run_id, outer.stage_id) == (run_id, stage_id):
        # Its inner end would make the still-running outer stage read as ended.
        raise ConfigError(f"stage {stage_id!r} of run {run_id!r} is already open here; give the inner stage its own id")
    if parent_stage_id is None and outer is not None and outer.run_id == run_id:
        parent_stage_id = outer.stage_id
    if parent_stage_id is not None:
        validate_id("parent_stage_id", parent_stage_id)
        if parent_stage_id == stage_id:
            raise ConfigError(f"stage {stage_id!r} cannot be its own parent")
    info = StageInfo(run_id, stage_id, kind, parent_stage_id)
    token = _current_stage.set(info)
    try:
        with get_runtime().telemetry.stage_span(info):
            yield info
    finally:
        _current_stage.reset(token)


def current_stage() -> Optional[StageInfo]:
    """The stage open here (None outside any; calls then go to `default_stage`)."""
    return _current_stage.get()


def set_for_this_task(stage: Optional[StageInfo]) -> None:
    """Attribute the rest of the current task's calls to ``stage`` (None: the default run).

    For a host that owns the task's lifetime, as the LiteLLM Proxy owns a request's: the
    value ends with the task, so no reset is needed, and none can leak into another request.
    """
    _current_stage.set(stage)
