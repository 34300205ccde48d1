"""The LiteLLM Proxy callback: every request the proxy serves, observed in the stage its client names.

    # config.yaml of the proxy
    litellm_settings:
      callbacks: cw_middleware.litellm_proxy.handler

The proxy imports this module (``get_instance_fn``: a file of that dotted name
next to config.yaml wins, else the importable module) and registers ``handler``,
a `CustomLogger` instance. Making it (on that first look-up, not at import)
calls `cw.instrument()` in the proxy process: the proxy's Router
calls ``litellm.acompletion`` / ``aresponses`` through the module, so each
request it forwards runs the same lifecycle as ``cw.completion`` (tags stripped,
snapshots, usage reconciled; a stream gets its terminal usage chunk, which the
client sees only if it asked for it). Telemetry is configured from the proxy's
environment (``CW_EXPORT``, ``OTEL_SERVICE_NAME``, ``OTEL_EXPORTER_OTLP_*``).

Before each call the handler reads the stage from the request:

    headers   x-cw-run-id, x-cw-stage-id, x-cw-stage-kind (kind defaults to "agent"), x-cw-parent-stage-id
    body      "metadata": {"cw_run_id": ..., "cw_stage_id": ..., "cw_stage_kind": ..., "cw_parent_stage_id": ...}

A header wins over the body. A run id alone names that run's stage of the day
(``YYYY-MM-DD``, UTC). A request that names no stage lands in the default run
(``default:<service.name>``, one stage per UTC day), like any call outside
``cw.stage()``; ``handler_per_user`` / ``handler_per_team`` instead send it to
``user:<id>`` / ``team:<id>`` (the API key's user or team; the body's ``user``
for users), one stage per UTC day. A stage id without a run id, or an id that
`contract.validate_id` refuses, is a warning in the proxy's log (the rule, never
the value) and the request goes to the default run: a bad id never breaks a call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from litellm.integrations.custom_logger import CustomLogger

from .._kernel.contract import StageInfo, validate_id
from .._kernel.errors import ConfigError
from .._kernel.names import AGENT_STAGE_KIND
from .._kernel.process import PROCESS
from .instrument import instrument
from .runtime import get_runtime
from .stages import default_stage, set_for_this_task

HEADER_RUN_ID = "x-cw-run-id"
HEADER_STAGE_ID = "x-cw-stage-id"
HEADER_STAGE_KIND = "x-cw-stage-kind"
HEADER_PARENT_STAGE_ID = "x-cw-parent-stage-id"
METADATA_RUN_ID = "cw_run_id"
METADATA_STAGE_ID = "cw_stage_id"
METADATA_STAGE_KIND = "cw_stage_kind"
METADATA_PARENT_STAGE_ID = "cw_parent_stage_id"
# Where the proxy keeps a request's metadata: "metadata" for chat, "litellm_metadata" for the Responses API.
_METADATA_FIELDS = ("metadata", "litellm_metadata")


def stage_of_request(data: Mapping[str, Any], service_name: str) -> Optional[StageInfo]:
    """The stage a proxied request names (headers, then body metadata); None when it names none.

    A run id alone names that run's stage of the day (`stages.default_stage`). Raises
    ConfigError for a stage id without a run id or an invalid id: the caller logs it and
    uses the default run.
    """
    headers = _headers(data)
    metadata = _metadata(data)

    def pick(header: str, key: str) -> Any:
        value = headers.get(header)
        return value if value is not None else metadata.get(key)

    run_id = pick(HEADER_RUN_ID, METADATA_RUN_ID)
    stage_id = pick(HEADER_STAGE_ID, METADATA_STAGE_ID)
    kind = pick(HEADER_STAGE_KIND, METADATA_STAGE_KIND)
    parent = pick(HEADER_PARENT_STAGE_ID, METADATA_PARENT_STAGE_ID)
    if run_id is None and stage_id is None:
        return None
    if run_id is None:
        raise ConfigError(f"{HEADER_STAGE_ID} needs {HEADER_RUN_ID}, which is missing")
    if stage_id is None:
        return default_stage(service_name, validate_id(HEADER_RUN_ID, run_id))
    return StageInfo(
        validate_id(HEADER_RUN_ID, run_id),
        validate_id(HEADER_STAGE_ID, stage_id),
        validate_id(HEADER_STAGE_KIND, kind) if kind is not None else AGENT_STAGE_KIND,
        validate_id(HEADER_PARENT_STAGE_ID, parent) if parent is not None and parent != stage_id else None,
    )


def _headers(data: Mapping[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    request = data.get("proxy_server_request")
    sources = [request.get("headers") if isinstance(request, Mapping) else None]
    sources += [m.get("headers") for m in (data.get(f) for f in _METADATA_FIELDS) if isinstance(m, Mapping)]
    for source in sources:
        if isinstance(source, Mapping):
            for key, value in source.items():
                if isinstance(key, str):
                    found.setdefault(key.lower(), value)
    return found


def _metadata(data: Mapping[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for field in _METADATA_FIELDS:
        metadata = data.get(field)
        if isinstance(metadata, Mapping):
            for key in (METADATA_RUN_ID, METADATA_STAGE_ID, METADATA_STAGE_KIND, METADATA_PARENT_STAGE_ID):
                if key in metadata:
                    found.setdefault(key, metadata[key])
    return found


def _group_stage(group: str, user_api_key_dict: Any, data: Mapping[str, Any], service_name: str) -> Optional[StageInfo]:
    """A request naming no stage, grouped by the key's user or team: run ``user:<id>`` / ``team:<id>``, stage of the day."""
    if group == "user":
        member = getattr(user_api_key_dict, "user_id", None) or data.get("user")
    else:
        member = getattr(user_api_key_dict, "team_id", None)
    if not isinstance(member, str) or not member:
        return None  # no identity: the service's default run
    return default_stage(service_name, validate_id(f"{group} id", f"{group}:{member}"))


class ProxyHandler(CustomLogger):  # type: ignore[misc]  # LiteLLM's base class is untyped
    """Observes every request of the proxy it is loaded into; the stage comes from each request.

    ``group`` ("user" or "team") sends requests that name no stage to a run per API key
    user / team instead of the service's default run.
    """

    def __init__(self, group: Optional[str] = None) -> None:
        if group not in (None, "user", "team"):
            raise ConfigError(f"group must be 'user' or 'team', got {group!r}")
        super().__init__()
        self.group = group
        instrument()

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: Any, **kwargs: Any
    ) -> None:
        service_name = get_runtime().config.service_name
        try:
            stage = stage_of_request(data, service_name)
            if stage is None and self.group is not None:
                stage = _group_stage(self.group, user_api_key_dict, data, service_name)
        except ConfigError as exc:  # the rule that was broken; never the id itself
            get_runtime().log.warning("proxy-stage", f"cw_middleware: request goes to the default run: {exc}")
            stage = None
        except Exception as exc:  # noqa: BLE001 - an odd request shape never breaks the call
            get_runtime().log.warning("proxy-stage", f"cw_middleware: could not read the stage ({type(exc).__name__})")
            stage = None
        # The hook runs in the request's own task, and the Router's call to litellm.acompletion runs
        # in it (or in a task it starts, which copies the context): the stage reaches the call. Set,
        # not reset: the task ends with the request. None too, so no stage can outlive its request.
        set_for_this_task(stage)
        return None  # the request goes on unchanged


# The instances a config.yaml can name, by attribute: the grouping of requests that name no stage.
_GROUPS: dict[str, Optional[str]] = {"handler": None, "handler_per_user": "user", "handler_per_team": "team"}


class _Handlers:
    """The handlers made so far, by attribute name (a part of the process state: one each per process)."""

    def __init__(self) -> None:
        self.made: dict[str, ProxyHandler] = {}

    def after_fork_in_child(self) -> None:
        pass  # no lock, no thread: a forked proxy worker keeps using its parent's handlers


def __getattr__(name: str) -> Any:
    """The handlers are made when the proxy asks for one, not at import: importing this module changes nothing."""
    if name in _GROUPS:
        made = PROCESS.part(_Handlers).made
        if name not in made:
            made[name] = ProxyHandler(_GROUPS[name])
        return made[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
