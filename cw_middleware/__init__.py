"""cw_middleware: what fills your model's context window, for every request.

Swap ``litellm.completion`` for ``cw_middleware.completion`` (or call
``cw_middleware.instrument()`` to observe every caller of LiteLLM); tag prompt
segments and tools; read the breakdown back from your telemetry backend.
"""

from .clients import wrap
from .config import Config, ProviderCountPolicy
from .contract import (
    BreakdownItem,
    Category,
    CountMethod,
    DetailItem,
    Snapshot,
    SnapshotWarning,
    StageContextWindow,
    Staleness,
    UnavailableReason,
    WarningCode,
)
from .errors import (
    BackendError,
    BackendResponseError,
    BackendUnavailable,
    ConfigError,
    CwMiddlewareError,
    NotFound,
    TagError,
)
from .instrument import instrument, uninstrument
from .propagation import bind
from .readback import Reader, ReaderOptions, RunSummary, SnapshotReader, StageSummary, reader
from .runtime import configure, flush
from .stages import current_stage, stage
from .tags import ToolSource, message, segment, tool
from .wrapper import acompletion, aresponses, completion, estimate, responses, snapshots

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "BackendResponseError",
    "BackendUnavailable",
    "BreakdownItem",
    "Category",
    "Config",
    "ConfigError",
    "CountMethod",
    "CwMiddlewareError",
    "DetailItem",
    "NotFound",
    "ProviderCountPolicy",
    "Reader",
    "ReaderOptions",
    "RunSummary",
    "Snapshot",
    "SnapshotReader",
    "SnapshotWarning",
    "StageContextWindow",
    "StageSummary",
    "Staleness",
    "TagError",
    "ToolSource",
    "UnavailableReason",
    "WarningCode",
    "__version__",
    "acompletion",
    "aresponses",
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
