"""The LiteLLM functions the middleware forwards to: always the real ones.

`cw.instrument()` replaces ``litellm.completion`` and its siblings with observed
versions, and a user may have patched them before us. The wrapper's own inner
call must never go through a patched module attribute (that recursed), so it
asks `original(name)` for the function to call.

What is patched is one object, `Patches` (a part of the process state, see _kernel/process.py:
a configure() keeps it, a fork renews its lock): the functions to forward to, and what
instrument() installed over what. The marks below are set once, when a function is made,
and never change.

The wrapper's own functions and instrument()'s shells carry a mark
(`mark_observed`); a shell also holds the function it replaced (`SAVED_ATTR`).
Neither is ever forwarded to: where the module attribute is one of them and no
original was saved -- a user's shim such as ``litellm.completion = cw.completion``,
or a shell of ours put back by hand after `uninstrument()` -- the original is
found where LiteLLM defines it (`own`), so the call works instead of recursing.
"""

from __future__ import annotations

import contextvars
import importlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from .._kernel.process import PROCESS

# The entry points the wrapper forwards to, by their name on the litellm module.
ENTRY_POINTS = ("completion", "acompletion", "responses", "aresponses")

# Where LiteLLM defines each entry point, newest layout first (1.110: dispatch modules; 1.83: main).
_HOMES = {
    "completion": ("litellm.chat_completions.dispatch", "litellm.main"),
    "acompletion": ("litellm.chat_completions.dispatch", "litellm.main"),
    "responses": ("litellm.responses.dispatch", "litellm.responses.main"),
    "aresponses": ("litellm.responses.dispatch", "litellm.responses.main"),
}
_MARK = "__cw_observed__"
# On an instrument() shell: the function it replaced.
SAVED_ATTR = "_cw_saved"


class Patches:
    """LiteLLM's patch state: what to forward to, and what instrument() installed (a part of the process state)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # instrument() and uninstrument() take it
        self.originals: dict[str, Callable[..., Any]] = {}  # name -> the function to forward to
        # name -> (what was there before, our shell); an entry stays while a patch on top of ours keeps it in use.
        self.installed: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {}
        self.swaps: list[Any] = []  # module globals bound before instrument(), now our shells (`bound.Swap`)

    def after_fork_in_child(self) -> None:
        self.lock = threading.Lock()


def patches() -> Patches:
    return PROCESS.part(Patches)


# Set while an observed call is inside LiteLLM: a LiteLLM entry point reached meanwhile (the
# Responses API bridged to completion(), the Router's fallbacks, a user's patch under ours that
# looks the module up at call time) belongs to the outer call and is forwarded unobserved.
_forwarding: contextvars.ContextVar[bool] = contextvars.ContextVar("cw_forwarding", default=False)


def forwarding() -> bool:
    """True inside an observed call's forward to LiteLLM (the re-entrancy guard)."""
    return _forwarding.get()


@contextmanager
def forwarding_scope() -> Iterator[None]:
    """Marks the code inside as an observed call's forward to LiteLLM (sync and async alike)."""
    token = _forwarding.set(True)
    try:
        yield
    finally:
        _forwarding.reset(token)


F = TypeVar("F", bound=Callable[..., Any])


def mark_observed(function: F) -> F:
    """Mark one of the wrapper's functions (or instrument()'s replacements): never forwarded to."""
    setattr(function, _MARK, True)
    return function


def is_observed(function: object) -> bool:
    return getattr(function, _MARK, False) is True


def unwrap(function: Callable[..., Any]) -> Callable[..., Any]:
    """Past our own instrument() shells to the function the first of them replaced."""
    while True:
        saved = getattr(function, SAVED_ATTR, None)
        if saved is None:
            return function
        function = saved


def remember(name: str, function: Callable[..., Any]) -> None:
    """Record the function to forward to for ``name`` (instrument() calls this before patching).

    One of our own functions is never recorded (a shim installed before instrument()):
    `original` then finds LiteLLM's where it is defined.
    """
    function = unwrap(function)
    if not is_observed(function):
        patches().originals[name] = function


def forget(name: str) -> None:
    patches().originals.pop(name, None)


def original(name: str) -> Callable[..., Any]:
    """The function to forward ``litellm.<name>`` calls to: the saved original, else the module's own."""
    saved = patches().originals
    function = saved.get(name)
    if function is not None:
        return function
    from .._kernel.offline import litellm

    function = unwrap(getattr(litellm(), name))
    if not is_observed(function):
        return function
    home = own(name)  # the module attribute is ours (a shim): forwarding to it would recurse
    saved.setdefault(name, home)
    return home


def own(name: str) -> Callable[..., Any]:
    """LiteLLM's own definition of ``name``, whatever the module attribute holds now."""
    for module_name in _HOMES.get(name, ()):
        try:
            function = getattr(importlib.import_module(module_name), name, None)
        except ImportError:
            continue
        if callable(function) and not is_observed(function):
            return function  # type: ignore[no-any-return]
    raise RuntimeError(
        f"cw_middleware: litellm.{name} was replaced by cw_middleware's own function and LiteLLM's original "
        "cannot be found; use cw.instrument() instead of assigning it"
    )
