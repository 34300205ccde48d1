"""cw_middleware: what fills your model's context window, for every request.

Swap ``litellm.completion`` for ``cw_middleware.completion`` (or call
``cw_middleware.instrument()`` to observe every caller of LiteLLM); tag prompt
segments and tools; read the breakdown back from your telemetry backend.

The public API is this module's ``__all__``, plus one import path a LiteLLM Proxy
config names, ``cw_middleware.litellm_proxy.handler``. Everything under a name
with a leading underscore is internal and may move. The package follows a
request's data flow, one wing a step (each wing's ``__init__`` is its map)::

    _capture/    entry points and a call's lifecycle (LiteLLM, instrument(), the
                 official clients, the Proxy callback, stages, the runtime)
    _counting/   a request -> its tokens per (category, source): tags, the estimator,
                 rules/ per provider family, model facts, cost, the provider count
    _snapshots/  building, keeping and emitting snapshots (OpenTelemetry API only)
    _embedded/   the embedded OTLP pipeline: the only user of the OpenTelemetry SDK,
                 imported only where cw exports
    _readback/   a stage's answer read back from a backend, one module a backend
    _serve/      the HTTP API, its event stream and the live page
    _cli/        the ``cw-middleware`` command

under a kernel both sides share, ``_kernel/`` (the JSON contract, its telemetry
names and encoding, how it is written for people, the settings, the errors, the one
owner of process state and the one background worker). A wing imports only wings
below it in that list's data flow and the kernel; the kernel imports no wing.
"""

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from ._capture.clients import wrap
from ._capture.instrument import Instrumentation, instrument, uninstrument
from ._capture.propagation import bind
from ._capture.runtime import configure, flush
from ._capture.stages import current_stage, stage
from ._capture.wrapper import acompletion, aresponses, completion, estimate, responses, snapshots
from ._counting.tags import ToolSource, message, segment, tool
from ._kernel.config import Config
from ._kernel.contract import (
    BreakdownItem,
    CacheMiss,
    Category,
    CategoryTotals,
    Compaction,
    Cost,
    CountMethod,
    DetailItem,
    Forecast,
    HistoryPoint,
    RepeatedContent,
    RunReport,
    Snapshot,
    SnapshotWarning,
    StageContextWindow,
    StageRow,
    StageTotals,
    Staleness,
    Suggestion,
    SuggestionKind,
    ToolItem,
    UnavailableReason,
    UnusedTool,
    WarningCode,
)
from ._kernel.errors import (
    BackendError,
    BackendResponseError,
    BackendUnavailable,
    ConfigError,
    CwMiddlewareError,
    NotFound,
    TagError,
)
from ._kernel.values import ProviderCountPolicy

if _TYPE_CHECKING:
    from ._readback import Missing, Reader, ReaderOptions, RunSummary, SnapshotReader, StageSummary, reader
    from ._serve.asgi import AsgiApp, asgi_app

__version__ = "0.1.0"

__all__ = [
    "AsgiApp",
    "BackendError",
    "BackendResponseError",
    "BackendUnavailable",
    "BreakdownItem",
    "CacheMiss",
    "Category",
    "CategoryTotals",
    "Compaction",
    "Config",
    "ConfigError",
    "Cost",
    "CountMethod",
    "CwMiddlewareError",
    "DetailItem",
    "Forecast",
    "HistoryPoint",
    "Instrumentation",
    "Missing",
    "NotFound",
    "ProviderCountPolicy",
    "Reader",
    "ReaderOptions",
    "RepeatedContent",
    "RunReport",
    "RunSummary",
    "Snapshot",
    "SnapshotReader",
    "SnapshotWarning",
    "StageContextWindow",
    "StageRow",
    "StageSummary",
    "StageTotals",
    "Staleness",
    "Suggestion",
    "SuggestionKind",
    "TagError",
    "ToolItem",
    "ToolSource",
    "UnavailableReason",
    "UnusedTool",
    "WarningCode",
    "__version__",
    "acompletion",
    "aresponses",
    "asgi_app",
    "bind",
    "completion",
    "configure",
    "current_stage",
    "estimate",
    "flush",
    "instrument",
    "message",
    "reader",
    "responses",
    "segment",
    "snapshots",
    "stage",
    "tool",
    "uninstrument",
    "wrap",
]

# Loaded when first asked for: the read-back wing and its server (~50 modules) are no cost to a program
# that only makes LLM calls.
_READBACK = ("Missing", "Reader", "ReaderOptions", "RunSummary", "SnapshotReader", "StageSummary", "reader")
_LAZY = {**dict.fromkeys(_READBACK, "._readback"), "asgi_app": "._serve.asgi", "AsgiApp": "._serve.asgi"}


def __getattr__(name: str) -> _Any:
    if name in _LAZY:
        value = getattr(_importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
