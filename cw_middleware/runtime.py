"""The one piece of process state: configuration, caches, telemetry and recent snapshots.

`configure()` builds a Runtime and installs it; everything on the call path
receives it from `get_runtime()`, which configures from the environment on first
use. A Runtime owns every cache of the call path (the estimator's, the snapshot
parts and event-seq counter, the recent snapshots) and the provider counter, so
tests build their own Runtime, pass providers explicitly and can inject the
counter (``counter_factory``).
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Optional

from opentelemetry import metrics, trace

from ._log import RateLimitedLog
from ._setup import choose_providers
from .config import Config, ProviderCountPolicy, resolve
from .contract import Snapshot, WarningCode
from .estimator import Estimator
from .snapshot import CompactSnapshot, SnapshotParts, compact, expand
from .telemetry import CallTelemetry, StageInfo, Telemetry

if TYPE_CHECKING:
    from .counting import ProviderCounter

logger = logging.getLogger("cw_middleware")


# Stages whose newest call is remembered (for superseded late counts); old stages fall out.
MAX_TRACKED_STAGES = 10_000


class Runtime:
    def __init__(
        self,
        config: Optional[Config] = None,
        tracer_provider: Optional[trace.TracerProvider] = None,
        meter_provider: Optional[metrics.MeterProvider] = None,
        shutdown: Optional[Callable[[], None]] = None,
        flush: Optional[Callable[[float], bool]] = None,
        logger_provider: Any = None,
        counter_factory: Optional[Callable[[Config], ProviderCounter]] = None,
    ) -> None:
        self.config = config or resolve()
        self.estimator = Estimator()
        self.parts = SnapshotParts()
        self.telemetry = Telemetry(self.config, tracer_provider, meter_provider, logger_provider)
        self.log = RateLimitedLog()
        self._history: deque[CompactSnapshot] = deque(maxlen=self.config.snapshot_history)  # untracked by gc
        self._pending: dict[tuple[str, str], set[WarningCode]] = {}
        self._newest_call: OrderedDict[tuple[str, str], int] = OrderedDict()  # bounded: MAX_TRACKED_STAGES
        self._call_seq = 0
        self._lock = threading.Lock()
        self._shutdown = shutdown
        self._flush = flush
        self._counter_factory = counter_factory or _default_counter
        self._counter: Optional[ProviderCounter] = None

    # ------------------------------------------------------------ snapshots

    def publish(
        self, snapshot: Snapshot, call: Optional[CallTelemetry], stage: Optional[StageInfo], superseded: bool = False
    ) -> None:
        """Keep a snapshot and send it out; telemetry failures are logged, never raised."""
        row = compact(snapshot)
        with self._lock:
            self._history.append(row)
        if call is None:
            return
        try:
            call.record(snapshot, superseded=superseded)
        except Exception as exc:  # noqa: BLE001 - telemetry must never break the caller
            self.log.warning("telemetry", f"cw_middleware: could not record a snapshot ({type(exc).__name__})")

    def snapshots(self) -> list[Snapshot]:
        with self._lock:
            rows = list(self._history)
        return [expand(row, self.parts) for row in rows]

    def register_call(self, stage: Optional[StageInfo]) -> int:
        """A new call in a stage: returns its sequence number, which makes it the stage's newest."""
        key = (stage.run_id, stage.stage_id) if stage else ("", "")
        with self._lock:
            self._call_seq += 1
            self._newest_call[key] = self._call_seq
            self._newest_call.move_to_end(key)
            if len(self._newest_call) > MAX_TRACKED_STAGES:
                self._newest_call.popitem(last=False)
            return self._call_seq

    def is_newest_call(self, stage: Optional[StageInfo], call_seq: int) -> bool:
        key = (stage.run_id, stage.stage_id) if stage else ("", "")
        with self._lock:
            return self._newest_call.get(key) == call_seq

    def defer_warning(self, stage: Optional[StageInfo], code: WarningCode) -> None:
        """A warning that arrives after its call's last snapshot rides on the stage's next one."""
        key = (stage.run_id, stage.stage_id) if stage else ("", "")
        with self._lock:
            self._pending.setdefault(key, set()).add(code)

    def take_deferred(self, stage: Optional[StageInfo]) -> set[WarningCode]:
        key = (stage.run_id, stage.stage_id) if stage else ("", "")
        with self._lock:
            return self._pending.pop(key, set())

    # ------------------------------------------------------------ provider counting

    def counter(self) -> ProviderCounter:
        """The background provider counter, made by ``counter_factory`` on first use."""
        with self._lock:
            if self._counter is None:
                self._counter = self._counter_factory(self.config)
            return self._counter

    # ------------------------------------------------------------ lifecycle

    def flush(self, timeout: float = 10.0) -> bool:
        # Estimates deferred while a tokenizer loaded publish snapshots (and may queue counts): first.
        ok = self.estimator.deferred.wait_idle(timeout)
        if self._counter is not None:
            ok = self._counter.wait_idle(timeout) and ok
        if self._flush is not None:
            try:
                ok = self._flush(timeout) and ok
            except Exception as exc:  # noqa: BLE001
                self.log.warning("flush", f"cw_middleware: flush failed ({type(exc).__name__})")
                ok = False
        return ok

    def shutdown(self) -> None:
        if self._counter is not None:
            self._counter.close()
        if self._shutdown is not None:
            try:
                self._shutdown()
            except Exception as exc:  # noqa: BLE001
                self.log.warning("shutdown", f"cw_middleware: shutdown failed ({type(exc).__name__})")


def _default_counter(config: Config) -> ProviderCounter:
    from .counting import ProviderCounter  # imports httpx: only processes that count pay for it

    return ProviderCounter(timeout=config.provider_count_timeout)  # its own HTTP client, made on first count


# ---------------------------------------------------------------- the process's runtime

_runtime: Optional[Runtime] = None
_runtime_lock = threading.Lock()


def configure(
    *,
    tracer_provider: Optional[trace.TracerProvider] = None,
    meter_provider: Optional[metrics.MeterProvider] = None,
    logger_provider: Any = None,
    **settings: Any,
) -> Runtime:
    """(Re)configure cw_middleware; see `config.resolve` for the settings and their env vars.

    Raises ConfigError for a bad setting. Returns the new Runtime.
    """
    cfg = resolve(**settings)
    chosen = choose_providers(cfg, tracer_provider, meter_provider, logger_provider)
    runtime = Runtime(
        cfg,
        chosen.tracer_provider,
        chosen.meter_provider,
        shutdown=chosen.shutdown,
        flush=chosen.flush,
        logger_provider=chosen.logger_provider,
    )
    previous = set_runtime(runtime)
    if previous is not None:
        previous.flush()
        previous.shutdown()
    return runtime


def flush(timeout: float = 10.0) -> bool:
    """Export everything recorded so far (CLI, tests, short scripts). True when all went out."""
    current = _runtime
    return True if current is None else current.flush(timeout)


def _flush_at_exit() -> None:
    current = _runtime
    if current is not None:
        current.flush(5.0)
        current.shutdown()


atexit.register(_flush_at_exit)


def set_runtime(runtime: Optional[Runtime]) -> Optional[Runtime]:
    """Install a runtime (tests, configure()); returns the previous one."""
    global _runtime
    with _runtime_lock:
        previous, _runtime = _runtime, runtime
    return previous


def get_runtime() -> Runtime:
    """The configured runtime, or one built from the environment on first use.

    Never raises: the call path must not fail on a bad environment variable. Then
    the settings' defaults apply with telemetry off, and one warning says why.
    """
    runtime = _runtime
    if runtime is not None:
        return runtime
    try:
        return configure()
    except Exception as exc:  # noqa: BLE001 - ConfigError from the environment, or anything else
        logger.warning(
            "cw_middleware: configuration failed (%s: %s); telemetry is off until configure() succeeds", type(exc).__name__, exc
        )
        # No export and no provider counts: a half-read configuration must not send anything anywhere.
        fallback = Runtime(
            Config(export="none", provider_count=ProviderCountPolicy.NEVER),
            trace.NoOpTracerProvider(),
            metrics.NoOpMeterProvider(),
        )
        set_runtime(fallback)
        return fallback
