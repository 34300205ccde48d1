"""The LiteLLM functions the middleware forwards to: always the real ones.

`cw.instrument()` replaces ``litellm.completion`` and its siblings with observed
versions, and a user may have patched them before us. The wrapper's own inner
call must never go through a patched module attribute (that recursed), so it
asks `original(name)` for the function to call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# The entry points the wrapper forwards to, by their name on the litellm module.
ENTRY_POINTS = ("completion", "acompletion", "responses", "aresponses")

_originals: dict[str, Callable[..., Any]] = {}


def remember(name: str, function: Callable[..., Any]) -> None:
    """Record the function to forward to for ``name`` (instrument() calls this before patching)."""
    _originals[name] = function


def forget(name: str) -> None:
    _originals.pop(name, None)


def original(name: str) -> Callable[..., Any]:
    """The function to forward ``litellm.<name>`` calls to: the saved original, else the module's own."""
    function = _originals.get(name)
    if function is not None:
        return function
    from ._offline import litellm

    return getattr(litellm(), name)  # type: ignore[no-any-return]
