"""A call's local estimate as a value: there at once, or made in the background while a tokenizer loads.

The first calls of a process must not wait for a tokenizer to load (_counting/rules/_tiktoken.py), nor any
call for another call's estimate or for a count past its budget (estimator.py, `Later`): such a
call's estimate runs on its Runtime's background-estimate worker, over value copies of what it
reads (the caller may change its lists once the call returns). Whatever needs the estimate --
the ``local_estimate`` snapshot, the provider count, then the call's end -- is chained onto the
`PendingEstimate` with `then`, and runs once it is there, in the order it was chained: at once
on the caller's thread when the estimate is already made (the common case), else on the worker
right after it. So a call has one end-of-call path whether its estimate came at once or later.
The worker's estimate waits while calls are in flight (at most a second): a count of megabytes
beside the caller's LiteLLM call would slow that call by as much as it takes.
"""

from __future__ import annotations

import logging
import marshal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Optional

from .._counting.estimator import Estimate
from .._counting.rules import _tiktoken
from .._counting.tags import TAG_KEY, check_tags
from .apis import Parsed
from .runtime import Runtime

logger = logging.getLogger("cw_middleware")

Step = Callable[[Optional[Estimate]], None]  # gets the estimate; None: the call has none (it publishes nothing)


class PendingEstimate:
    """The local estimate of one call, and the steps waiting for it.

    ``tagged`` are the indexes of the request's messages that carry a tag, known at once either
    way (None: not known, every message is checked when the tags are stripped).
    """

    __slots__ = ("_lock", "_done", "_estimate", "_steps", "tagged")  # one a call (see Call's slots)

    def __init__(self, tagged: Optional[Sequence[int]] = None) -> None:
        self._lock = threading.Lock()
        self._done = False
        self._estimate: Optional[Estimate] = None
        self._steps: list[Step] = []
        self.tagged = tagged

    @classmethod
    def ready(cls, estimate: Optional[Estimate]) -> PendingEstimate:
        pending = cls(estimate.tagged_messages if estimate is not None else None)
        pending._estimate, pending._done = estimate, True
        return pending

    def now(self) -> Optional[Estimate]:
        """The estimate if it is already there (the common case), else None."""
        return self._estimate if self._done else None

    def then(self, step: Step) -> None:
        """Run ``step(estimate)`` once the estimate is there: now, on this thread, if it already is."""
        with self._lock:
            if not self._done:
                self._steps.append(step)
                return
        _run(step, self._estimate)

    def resolve(self, estimate: Optional[Estimate]) -> None:
        """The estimate is there: the waiting steps run here, in order, then later ones run where they are chained."""
        self._estimate = estimate
        while True:
            with self._lock:
                steps, self._steps = self._steps, []
                if not steps:
                    self._done = True  # only now: a step chained meanwhile still runs after the earlier ones
                    return
            for step in steps:
                _run(step, estimate)


def _run(step: Step, estimate: Optional[Estimate]) -> None:
    try:
        step(estimate)
    except Exception as exc:  # noqa: BLE001 - one step's failure must not skip the call's end
        logger.warning("cw_middleware: a step after a call's estimate failed (%s)", type(exc).__name__)


class _LaterCopy:
    """A value copy of a request's messages, made on the caller's thread and read on the worker.

    `freeze` walks every message in Python (~1 µs each: 100,000 messages cost the caller ~80 ms);
    past `MANY_MESSAGES` plain JSON-like messages are serialised by marshal instead, in C (~10 ms
    for the same), and rebuilt on the worker. Anything marshal refuses (a response object, a str
    Enum) is frozen as before. Few messages are frozen: freezing shares their strings, where
    marshal would copy a megabyte text.
    """

    MANY_MESSAGES = 256

    def __init__(self, messages: Any, freeze: Callable[[Any], Any]) -> None:
        self._blob: Optional[bytes] = None
        self._frozen: Any = None
        if len(messages) > self.MANY_MESSAGES:
            try:
                self._blob = marshal.dumps(messages)
                return
            except ValueError:  # not plain data all through: frozen below
                pass
        self._frozen = freeze(messages)

    def names_none_of(self, text: str) -> bool:
        """True when the messages were serialised and ``text`` appears nowhere in them (keys, values, any string)."""
        return self._blob is not None and text.encode() not in self._blob

    def value(self) -> Any:
        return marshal.loads(self._blob) if self._blob is not None else self._frozen


def estimate_in_background(runtime: Runtime, parsed: Parsed) -> PendingEstimate:
    """The estimate of ``parsed`` on the runtime's background-estimate worker, over value copies of the request.

    Raises `TagError` for a malformed tag now, on the caller's call, as an estimate made at once would.
    """
    options = dict(parsed.options)
    estimator = runtime.estimator
    copy = _LaterCopy(parsed.messages or [], estimator.frozen)
    # Serialised messages that do not name the tag key carry no tag: a C-level search instead of a walk.
    messages = () if copy.names_none_of(TAG_KEY) else parsed.messages
    tagged = check_tags(messages, [*(options.get("tools") or ()), *(options.get("functions") or ())])
    for key in ("tools", "functions"):
        if options.get(key):
            options[key] = estimator.frozen(options[key])
    pending = PendingEstimate(tagged)
    submitted = time.monotonic()

    def estimate() -> None:
        # The call this estimate is for is still in LiteLLM, reading the same big request on the caller's
        # thread: an estimate beside it would take half its GIL turns. Defer to the calls in flight (at most
        # MAX_HOLD_BACK seconds from the submit, as the tokenizer loader does, so estimates queued behind this one
        # have waited their turn already and the queue drains at the worker's pace); a call waiting on the
        # network holds no GIL.
        _tiktoken.calls_in_flight().wait_idle(_tiktoken.MAX_HOLD_BACK - (time.monotonic() - submitted))
        try:
            made: Optional[Estimate] = estimator.estimate(parsed.model, copy.value(), api=parsed.api, **options)
        except Exception as exc:  # noqa: BLE001
            runtime.log.warning("estimate", f"cw_middleware: local estimate failed ({type(exc).__name__})")
            made = None
        pending.resolve(made)

    if not runtime.background_estimates.submit(estimate):
        runtime.log.warning(
            "background-estimate", "cw_middleware: too many calls wait for a tokenizer; this one is not estimated"
        )
        pending.resolve(None)
    return pending
