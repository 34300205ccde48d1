"""A Runtime: configuration, telemetry, and every worker and cache of the call path; and the process's current one.

`configure()` builds a Runtime and installs it; everything on the call path receives it from
`get_runtime()`, which configures from the environment on first use (once, however many
threads make their first call at the same moment). A Runtime builds and owns every worker and
cache of the call path: the estimator's caches, the model facts, the snapshot parts and
event-seq counter, the stages' running totals, the recent snapshots, the background-estimate worker and the provider
counter; tests build their own Runtime, pass providers explicitly and can inject the counter
(``counter_factory``). What outlives a configure() (the current Runtime itself, LiteLLM's patch
state, ...) is the process's, in _kernel/process.py.

The Runtime is also the one owner of what must change when the process does:

* exit: `close` exports what is left within ``config.exit_timeout`` (CW_EXIT_TIMEOUT,
  2 s by default) and stops the pipeline; the exit hook and `configure()` (for the
  runtime it replaces) call it, and a backend that does not answer costs no more.
* ``os.fork()``: the process's one at-fork hook (_kernel/process.py) renews every part of the process
  state; the current Runtime is one (`_Installed`), and it makes its own lock, caches and
  workers anew (`Runtime.after_fork_in_child`), the provider counter is dropped (its HTTP
  connections are the parent's), and the embedded telemetry pipeline gets a pipeline of the
  child's own on first use. A fork while other threads are inside cw (gunicorn, Celery
  prefork, multiprocessing) leaves the child's next call free to run. multiprocessing's
  children end with ``os._exit`` after its own finalizers, not atexit: one of those closes
  the child's runtime too; a child ended by SIGTERM (``Pool.terminate()``) closes it in
  sigterm.py's handler, where SIGTERM's handler was still the default.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Optional

from opentelemetry import metrics, trace

from .._counting.estimator import Estimator
from .._counting.model_facts import ModelFacts
from .._kernel.config import Config, resolve
from .._kernel.contract import Snapshot, StageInfo, WarningCode
from .._kernel.log import RateLimitedLog
from .._kernel.process import PROCESS
from .._kernel.values import ProviderCountPolicy
from .._kernel.worker import Worker
from .._snapshots.build import SnapshotParts
from .._snapshots.ledger import Ledgers
from .._snapshots.rows import CompactSnapshot, compact, expand
from .._snapshots.telemetry import CallTelemetry, ForecastOf, Telemetry
from . import sigterm
from .live_firsts import LiveFirsts
from .providers import Providers, choose_providers

if TYPE_CHECKING:
    from .._counting.provider_count import ProviderCounter

logger = logging.getLogger("cw_middleware")


# Stages whose newest call is remembered (for superseded late counts), and stages holding a
# warning for their next snapshot (a provider count that failed after its call ended): the
# oldest stages fall out of each.
MAX_TRACKED_STAGES = 10_000


SNAPSHOTS_WAIT = 5.0  # the most `snapshots()` waits for background estimates (calls made while a tokenizer loaded)
# Each queued call holds its request's copies and its span (~250 objects): a burst of fast calls (a loop
# over a mocked client) fills a queue, and the arenas they took stay with the process after it drains
# (1,024 a queue: +11 MB of RSS after 5,000 calls). A real call waits on its provider far longer than cw's
# work for it takes, so these fill only when calls come faster than that work, where the caller doing it
# (or its snapshot saying ``estimate_failed``, with the provider's total) is the backpressure.
MAX_BACKGROUND_ESTIMATES = 256  # calls waiting for a tokenizer; beyond it a call publishes no local estimate
MAX_QUEUED_ENDS = 256  # call ends waiting for the call-end worker; beyond it a call ends on its own thread


class Runtime:
    def __init__(
        self,
        config: Optional[Config] = None,
        tracer_provider: Optional[trace.TracerProvider] = None,
        meter_provider: Optional[metrics.MeterProvider] = None,
        shutdown: Optional[Callable[..., None]] = None,  # shutdown(timeout): bounded
        flush: Optional[Callable[[float], bool]] = None,
        logger_provider: Any = None,
        counter_factory: Optional[Callable[[Config], ProviderCounter]] = None,
        for_child: Optional[Callable[[], Providers]] = None,
        ends_off_thread: bool = False,
        own_events: Any = None,  # see providers.Providers
    ) -> None:
        self.config = config or resolve()
        self.estimator = Estimator()
        self.model_facts = ModelFacts()
        self.parts = SnapshotParts()
        self.ledgers = Ledgers()  # each recent stage's running totals (_snapshots/ledger.py)
        # Estimates of calls made while their tokenizer loaded (see pending_estimate.py).
        self.background_estimates = Worker("cw-background-estimate", MAX_BACKGROUND_ESTIMATES, fork_gated=True)
        # Where the telemetry pipeline is cw's own (or none), a call's end is recorded here, not on its caller's thread.
        self.call_ends: Optional[Worker] = Worker("cw-call-end", MAX_QUEUED_ENDS, fork_gated=True) if ends_off_thread else None
        self.live_firsts = LiveFirsts()  # calls whose first snapshot waits for their end (live_firsts.py)
        self._telemetry = Telemetry(self.config, tracer_provider, meter_provider, logger_provider, own_events)
        self.log = RateLimitedLog()
        self._history: deque[CompactSnapshot] = deque(maxlen=self.config.snapshot_history)  # untracked by gc
        self._late_warnings: OrderedDict[tuple[str, str], set[WarningCode]] = OrderedDict()  # bounded: MAX_TRACKED_STAGES
        self._newest_call: OrderedDict[tuple[str, str], int] = OrderedDict()  # bounded: MAX_TRACKED_STAGES
        self._call_seq = 0
        self._lock = threading.Lock()
        self._shutdown = shutdown
        self._flush = flush
        self._counter_factory = counter_factory or _default_counter
        self._counter: Optional[ProviderCounter] = None
        self._for_child = for_child
        self._closed = False
        self._forked = False  # set in a forked child: its telemetry pipeline is rebuilt on first use

    @property
    def telemetry(self) -> Telemetry:
        if self._forked:
            self._own_pipeline()
        return self._telemetry

    # ------------------------------------------------------------ snapshots

    def publish(
        self,
        snapshot: Snapshot,
        call: Optional[CallTelemetry],
        stage: Optional[StageInfo],
        superseded: bool = False,
        at: Optional[int] = None,
        live: bool = False,
        forecast: Optional[ForecastOf] = None,
    ) -> None:
        """Keep a snapshot and send it out (``at``: its event's time in ns; ``live``: its call still runs, see
        `CallTelemetry.record`); telemetry failures are logged, never raised."""
        row = compact(snapshot, self.parts)
        with self._lock:
            self._history.append(row)
        if call is None:
            return
        try:
            call.record(snapshot, superseded=superseded, at=at, live=live, forecast=forecast, flat=self.parts.flat)
        except Exception as exc:  # noqa: BLE001 - telemetry must never break the caller
            self.log.warning("telemetry", f"cw_middleware: could not record a snapshot ({type(exc).__name__})")

    def snapshots(self, wait: float = SNAPSHOTS_WAIT) -> list[Snapshot]:
        """The recent snapshots, oldest first.

        A call made while its tokenizer was still loading publishes its local estimate a little
        after it returns; this first waits (at most ``wait`` seconds) for such estimates, so a call
        that has returned is listed, as it is once the tokenizers are warm.
        """
        self.background_estimates.wait_idle(wait)
        if self.call_ends is not None:
            if wait > 0:
                self.live_firsts.release_all()  # calls still running: their first snapshots, now
            self.call_ends.wait_idle(wait)
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

    def hold_late_warning(self, stage: Optional[StageInfo], code: WarningCode) -> None:
        """A warning that arrives after its call's last snapshot (a failed provider count) rides on the stage's next one."""
        key = (stage.run_id, stage.stage_id) if stage else ("", "")
        with self._lock:
            self._late_warnings.setdefault(key, set()).add(code)
            self._late_warnings.move_to_end(key)
            if len(self._late_warnings) > MAX_TRACKED_STAGES:
                self._late_warnings.popitem(last=False)  # a stage not called for this long: its warning is dropped

    def take_late_warnings(self, stage: Optional[StageInfo]) -> set[WarningCode]:
        key = (stage.run_id, stage.stage_id) if stage else ("", "")
        with self._lock:
            return self._late_warnings.pop(key, set())

    # ------------------------------------------------------------ provider counting

    def counter(self) -> ProviderCounter:
        """The background provider counter, made by ``counter_factory`` on first use."""
        with self._lock:
            if self._counter is None:
                self._counter = self._counter_factory(self.config)
            return self._counter

    # ------------------------------------------------------------ lifecycle

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait for background estimates and queued provider counts, then export; returns within about
        ``timeout`` whatever the backend does."""
        deadline = time.monotonic() + timeout
        if self._forked:
            self._own_pipeline()
        # Background estimates publish snapshots (and may queue counts): first.
        ok = self.background_estimates.wait_idle(timeout)
        if self.call_ends is not None:  # ends wait for their estimates: after them
            self.live_firsts.release_all()  # calls still running: their first snapshots go out now
            ok = self.call_ends.wait_idle(max(0.0, deadline - time.monotonic())) and ok
        if self._counter is not None:
            ok = self._counter.wait_idle(max(0.0, deadline - time.monotonic())) and ok
        if self._flush is not None:
            try:
                ok = self._flush(max(0.0, deadline - time.monotonic())) and ok
            except Exception as exc:  # noqa: BLE001
                self.log.warning("flush", f"cw_middleware: flush failed ({type(exc).__name__})")
                ok = False
        return ok

    def shutdown(self, timeout: Optional[float] = None) -> None:
        """Stop the workers and the telemetry pipeline, waiting at most ``timeout`` (exit_timeout)."""
        if self._forked:
            self._own_pipeline()
        self.background_estimates.close(timeout=0.0)  # flush waited for them; what is left is abandoned
        if self.call_ends is not None:
            self.call_ends.close(timeout=0.0)
        self.live_firsts.close()
        if self._counter is not None:
            self._counter.close()
        if self._shutdown is not None:
            try:
                self._shutdown(self.config.exit_timeout if timeout is None else timeout)
            except Exception as exc:  # noqa: BLE001
                self.log.warning("shutdown", f"cw_middleware: shutdown failed ({type(exc).__name__})")

    def close(self, timeout: Optional[float] = None) -> bool:
        """Flush and shut down within ``timeout`` (``config.exit_timeout``) in all; once. True when all went out."""
        with self._lock:
            if self._closed:
                return True
            self._closed = True
            if self._forked:
                return True  # a forked child that recorded nothing: no pipeline of its own to build, nothing to send
        budget = self.config.exit_timeout if timeout is None else timeout
        deadline = time.monotonic() + budget
        flushed = self.flush(budget * 0.8)  # the rest stops the pipeline: it interrupts exporters' retries
        self.shutdown(max(0.05, deadline - time.monotonic()))
        return flushed

    # ------------------------------------------------------------ fork

    def after_fork_in_child(self) -> None:
        """The child's copy of this Runtime, made whole again (see the module docstring).

        Runs inside ``os.fork()``: only fresh locks, caches and workers here. Other modules' at-fork
        hooks may not have run yet (concurrent.futures' lock, which building a telemetry
        pipeline takes), so the pipeline is rebuilt on its first use (`_own_pipeline`).
        """
        self._lock = threading.Lock()
        self.log = RateLimitedLog()
        self.estimator = Estimator()  # its lock and caches may have been mid-update in another thread
        self.ledgers.after_fork_in_child()
        self.background_estimates.reset_after_fork()  # the parent's queued estimates are the parent's calls
        if self.call_ends is not None:
            self.call_ends.reset_after_fork()
        self.live_firsts = LiveFirsts()  # the parent's calls are the parent's; its thread stayed there
        self._counter = None  # its worker stayed in the parent, its HTTP connections are the parent's
        self._forked = self._for_child is not None and not self._closed

    def _own_pipeline(self) -> None:
        """In a forked child: the embedded telemetry pipeline of its own, in place of the parent's copy."""
        with self._lock:
            if not self._forked:
                return
            self._forked = False
            try:
                assert self._for_child is not None
                chosen = self._for_child()
            except Exception as exc:  # noqa: BLE001 - a child without telemetry still runs its calls
                logger.warning("cw_middleware: no telemetry in this forked process (%s)", type(exc).__name__)
                self._telemetry = Telemetry(self.config, trace.NoOpTracerProvider(), metrics.NoOpMeterProvider())
                self._flush = self._shutdown = self._for_child = None
                return
            self._telemetry = Telemetry(
                self.config, chosen.tracer_provider, chosen.meter_provider, chosen.logger_provider, chosen.own_events
            )
            self._flush, self._shutdown, self._for_child = chosen.flush, chosen.shutdown, chosen.for_child


def _default_counter(config: Config) -> ProviderCounter:
    from .._counting.provider_count import ProviderCounter  # imports httpx: only processes that count pay for it

    return ProviderCounter(timeout=config.provider_count_timeout)  # its own HTTP client, made on first count


# ---------------------------------------------------------------- the process's runtime


class _Installed:
    """The process's current Runtime and the lock that installs one (a part of the process state)."""

    def __init__(self) -> None:
        self.runtime: Optional[Runtime] = None
        self.lock = threading.Lock()  # configure() and first-use configuration take it: one at a time
        self.sigterm: Optional[sigterm.Handler] = None  # a forked child's, where SIGTERM's handler was the default

    def after_fork_in_child(self) -> None:
        self.lock = threading.Lock()
        if self.runtime is not None:
            self.runtime.after_fork_in_child()
        mp_util = sys.modules.get("multiprocessing.util")
        if mp_util is not None:
            # A multiprocessing child runs its finalizers, then os._exit (no atexit). Its registry is
            # cleared after this hook, but its after-fork callbacks run next: one adds the finalizer.
            mp_util.register_after_fork(_close_at_exit, _add_mp_finalizer)
        # SIGTERM (multiprocessing.Pool.terminate()) skips both: where nobody handles it, export first.
        self.sigterm = sigterm.install_in_child(_close_runtime, _exit_budget)


def _installed() -> _Installed:
    return PROCESS.part(_Installed)


_installed()  # made at import, not on first use: a child forked before any call still closes its runtime at exit


def _join_a_multiprocessing_child() -> None:
    """In a process that multiprocessing started by spawn or forkserver (or by fork, cw not yet imported then): what
    the at-fork hook gives a forked child, since none ran here. Such a worker imports cw after it started (its
    main module, or the task it unpickles) and ends through ``os._exit`` after multiprocessing's finalizers, not
    atexit: without one of them its last batch was never written (issue 37: 0 to 37 of 40 tasks kept)."""
    process = sys.modules.get("multiprocessing.process")
    if process is None:
        return
    import multiprocessing.util

    if getattr(process.current_process(), "_inheriting", False):
        # Imported while the child prepares (its main module, its first task): its bootstrap clears the
        # finalizers registered so far, then runs the after-fork callbacks; one adds ours.
        multiprocessing.util.register_after_fork(_close_at_exit, _add_mp_finalizer)
    elif process.parent_process() is not None:
        _add_mp_finalizer(None)  # a running worker (a Pool's, unpickling a task): its finalizers run at its end
    else:
        return
    # Pool.terminate() SIGTERMs its workers: where nobody handles it, export first (the main thread only).
    _installed().sigterm = sigterm.install_in_child(_close_runtime, _exit_budget)


def configure(
    *,
    tracer_provider: Optional[trace.TracerProvider] = None,
    meter_provider: Optional[metrics.MeterProvider] = None,
    logger_provider: Any = None,
    **settings: Any,
) -> Runtime:
    """(Re)configure cw_middleware; see `config.resolve` for the settings and their env vars.

    Raises ConfigError for a bad setting. Returns the new Runtime. Concurrent calls take turns;
    each closes the runtime it replaced.
    """
    installed = _installed()
    with installed.lock:
        runtime = _build(tracer_provider, meter_provider, logger_provider, settings)
        previous, installed.runtime = installed.runtime, runtime
    if previous is not None:
        previous.close()
    return runtime


def _build(
    tracer_provider: Optional[trace.TracerProvider],
    meter_provider: Optional[metrics.MeterProvider],
    logger_provider: Any,
    settings: dict[str, Any],
) -> Runtime:
    cfg = resolve(**settings)
    chosen = choose_providers(cfg, tracer_provider, meter_provider, logger_provider)
    return Runtime(
        cfg,
        chosen.tracer_provider,
        chosen.meter_provider,
        shutdown=chosen.shutdown,
        flush=chosen.flush,
        logger_provider=chosen.logger_provider,
        for_child=chosen.for_child,
        ends_off_thread=chosen.ours,
        own_events=chosen.own_events,
    )


def flush(timeout: float = 10.0) -> bool:
    """Export everything recorded so far (CLI, tests, short scripts). True when all went out."""
    current = _installed().runtime
    return True if current is None else current.flush(timeout)


def _close_at_exit() -> None:
    """Export what is left, within CW_EXIT_TIMEOUT: a dead or hung backend never holds the process."""
    handler = _installed().sigterm
    with handler.exiting() if handler is not None else contextlib.nullcontext():
        _close_runtime()  # a SIGTERM meanwhile (Pool.terminate()) lets this finish, then ends the process


def _close_runtime() -> None:
    current = _installed().runtime
    if current is not None:
        current.close()


atexit.register(_close_at_exit)


def _exit_budget() -> float:
    current = _installed().runtime
    return 0.0 if current is None else current.config.exit_timeout


def _add_mp_finalizer(_: object) -> None:
    import multiprocessing.util

    multiprocessing.util.Finalize(None, _close_at_exit, exitpriority=0)


_join_a_multiprocessing_child()


def set_runtime(runtime: Optional[Runtime]) -> Optional[Runtime]:
    """Install a runtime (tests, configure()); returns the previous one."""
    installed = _installed()
    with installed.lock:
        previous, installed.runtime = installed.runtime, runtime
    return previous


def get_runtime() -> Runtime:
    """The configured runtime, or one built from the environment on first use.

    Threads making their first call at once build one runtime between them: a second one would
    close the first under the other threads' calls, losing their telemetry. Never raises: the
    call path must not fail on a bad environment variable. Then the settings' defaults apply
    with telemetry off, and one warning says why.
    """
    installed = _installed()
    runtime = installed.runtime
    if runtime is not None:  # every call after the first: no lock
        return runtime
    with installed.lock:
        if installed.runtime is None:
            installed.runtime = _from_environment()
        return installed.runtime


def _from_environment() -> Runtime:
    try:
        return _build(None, None, None, {})
    except Exception as exc:  # noqa: BLE001 - ConfigError from the environment, or anything else
        logger.warning(
            "cw_middleware: configuration failed (%s: %s); telemetry is off until configure() succeeds", type(exc).__name__, exc
        )
        # No export and no provider counts: a half-read configuration must not send anything anywhere.
        return Runtime(
            Config(export="none", provider_count=ProviderCountPolicy.NEVER),
            trace.NoOpTracerProvider(),
            metrics.NoOpMeterProvider(),
        )
