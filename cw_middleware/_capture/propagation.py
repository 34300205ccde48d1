"""Carrying the open stage into thread pools: `cw.bind(fn)`.

`cw.stage()` keeps the current stage in a context variable, next to the
OpenTelemetry context that makes each call span a child of the stage span.
asyncio tasks copy the context when they are created and ``asyncio.to_thread``
copies it too, so calls made there are attributed without help. A thread pool
does not: ``loop.run_in_executor`` and ``ThreadPoolExecutor.submit`` run the
function in the worker thread's own (empty) context. `bind` captures the
caller's context once and runs each call of the returned function in a fresh
copy of it, so one bound function may run in several threads at once.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def bind(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` bound to the current context (stage, span): ``pool.submit(cw.bind(agent.run), task)``."""
    captured = contextvars.copy_context()

    @functools.wraps(fn)
    def bound(*args: P.args, **kwargs: P.kwargs) -> R:
        # A Context can be entered by one thread at a time: each call gets its own copy.
        return captured.copy().run(fn, *args, **kwargs)

    return bound
