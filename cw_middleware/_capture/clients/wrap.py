"""cw.wrap(client): an observed copy of one ``openai`` or ``anthropic`` client, the original untouched.

For code that prefers no patching. The copy is a shallow one (`copy.copy`: the same HTTP client,
key, base URL, headers and retries), of the same class, so ``isinstance`` checks and frameworks that
take a client object accept it. Its resources are made anew on it, and each method of `TARGETS`
gets an observing shell on that resource object alone; nothing of the client's classes changes.
``with_options()`` / ``copy()`` on the copy return observed copies too.
"""

from __future__ import annotations

import copy
import functools
import inspect
import types
from typing import Any, TypeVar

from .patches import SDKS, TARGETS

C = TypeVar("C")


def wrap(client: C) -> C:
    """An observed copy of an ``openai`` / ``anthropic`` client (sync or async, Azure, Bedrock and Vertex too).

    Raises TypeError for anything else: a mistake to hear about at set-up, not a call silently unobserved.
    """
    sdk = _sdk_of(client)
    observed = copy.copy(client)
    _forget_resources(observed)
    for target in TARGETS:
        if target.sdk != sdk:
            continue
        cls = target.owner_class()
        resource = _resource(observed, target.path)
        if cls is None or resource is None or not isinstance(resource, cls):
            continue
        method = getattr(cls, target.method)
        setattr(resource, target.method, types.MethodType(target.shell(method), resource))
    copier = getattr(type(client), "copy", None)
    if callable(copier):
        observed_copy = functools.partial(_observed_copy, copier, observed)
        observed.copy = observed_copy  # type: ignore[attr-defined]
        observed.with_options = observed_copy  # type: ignore[attr-defined]
    return observed


def _observed_copy(copier: Any, observed: Any, *args: Any, **kwargs: Any) -> Any:
    return wrap(copier(observed, *args, **kwargs))


def _sdk_of(client: Any) -> str:
    for kind in type(client).__mro__:
        package = kind.__module__.split(".", 1)[0]
        if package in SDKS and kind.__name__ in ("SyncAPIClient", "AsyncAPIClient"):
            return package
    raise TypeError(f"cw.wrap() takes an openai or anthropic client, got {type(client).__name__}")


def _forget_resources(observed: Any) -> None:
    """The copy's cached resources are the original's (bound to it): made anew on the copy when first used."""
    kind = type(observed)
    for name in list(vars(observed)):
        if isinstance(inspect.getattr_static(kind, name, None), functools.cached_property):
            del observed.__dict__[name]


def _resource(observed: Any, path: tuple[str, ...]) -> Any:
    """The resource at ``path`` on the copy (``chat`` then ``completions``), bound to the copy."""
    owner = observed
    for name in path:
        current = getattr(owner, name, None)
        if current is None:
            return None
        if getattr(current, "_client", observed) is not observed:  # set in __init__ (older clients): the original's
            current = type(current)(observed)
            setattr(owner, name, current)
        owner = current
    return owner
