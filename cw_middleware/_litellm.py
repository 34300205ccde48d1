"""The LiteLLM functions the middleware forwards to: always the real ones.

`cw.instrument()` replaces ``litellm.completion`` and its siblings with observed
versions, and a user may have patched them before us. The wrapper's own inner
call must never go through a patched module attribute (that recursed), so it
asks `original(name)` for the function to call.

While an observed call forwards to its original, `forwarding()` is true (a
context variable, so threads and tasks started inside the call see it too): an
observed shell entered again from there (a user's patch under ours that looks
``litellm.completion`` up at call time, a LiteLLM callback calling LiteLLM) goes
straight to LiteLLM's own function, unobserved, instead of observing the same
request twice or recursing.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any

# The entry points the wrapper forwards to, by their name on the litellm module.
ENTRY_POINTS = ("completion", "acompletion", "responses", "aresponses")

# Where LiteLLM defines each entry point, newest layout first: since 1.10x the module
# attribute is a dispatcher (``litellm.chat_completions.dispatch``) in front of ``litellm.main``.
_HOMES: dict[str, tuple[str, ...]] = {
    "completion": ("litellm.chat_completions.dispatch", "litellm.main"),
    "acompletion": ("litellm.chat_completions.dispatch", "litellm.main"),
    "responses": ("litellm.responses.dispatch", "litellm.responses.main"),
    "aresponses": ("litellm.responses.dispatch", "litellm.responses.main"),
}

# Marks an observed shell (instrument.py) and holds what it replaced: never forwarded to.
SAVED_ATTR = "_cw_saved"

_originals: dict[str, Callable[..., Any]] = {}
_forwarding: contextvars.ContextVar[bool] = contextvars.ContextVar("cw_forwarding", default=False)


def remember(name: str, function: Callable[..., Any]) -> None:
    """Record the function to forward to for ``name`` (instrument() calls this before patching)."""
    _originals[name] = _guarded(name, unwrap(function))


def forget(name: str) -> None:
    _originals.pop(name, None)


def original(name: str) -> Callable[..., Any]:
    """The function to forward ``litellm.<name>`` calls to: the saved original, else the module's own."""
    function = _originals.get(name)
    if function is not None:
        return function
    from ._offline import litellm

    return unwrap(getattr(litellm(), name))


def forwarding() -> bool:
    """True inside an observed call's forward to its original (the re-entrancy guard)."""
    return _forwarding.get()


def own(name: str) -> Callable[..., Any]:
    """LiteLLM's own definition of ``name``, whatever the module attribute holds now."""
    for home in _HOMES.get(name, ()):
        try:
            function = getattr(importlib.import_module(home), name, None)
        except ImportError:
            continue
        if callable(function):
            return unwrap(function)
    from ._offline import litellm

    return unwrap(getattr(litellm(), name))


def unwrap(function: Callable[..., Any]) -> Callable[..., Any]:
    """Skip our own observed shells: forwarding to one of them would observe a call twice or recurse."""
    while True:
        saved = getattr(function, SAVED_ATTR, None)
        if saved is None:
            return function
        function = saved


def _guarded(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` with the re-entrancy guard set while it runs (for async entry points: while awaited)."""
    if name.startswith("a"):  # acompletion, aresponses: a user's patch may be a plain function returning an awaitable

        @functools.wraps(function)
        async def guarded_async(*args: Any, **kwargs: Any) -> Any:
            token = _forwarding.set(True)
            try:
                result = function(*args, **kwargs)
                return await result if inspect.isawaitable(result) else result
            finally:
                _forwarding.reset(token)

        return guarded_async

    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        token = _forwarding.set(True)
        try:
            return function(*args, **kwargs)
        finally:
            _forwarding.reset(token)

    return guarded
