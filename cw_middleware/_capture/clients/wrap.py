"""cw.wrap(client): an observed copy of one ``openai`` or ``anthropic`` client, the original untouched.

For code that prefers no patching. The copy is a shallow one (`copy.copy`: the same HTTP client,
key, base URL, headers and retries), so ``isinstance`` checks and frameworks that take a client object
accept it. Its resources are made anew on it, and each method of `TARGETS` gets an observing shell on
that resource object alone; nothing of the client's classes changes. ``with_options()`` / ``copy()``
on the copy return observed copies too.

A resource the client makes on first use (a ``cached_property``: ``client.beta``, whose module alone
takes a second to import) is observed when the caller first reaches it, not at wrap(): the copy's
class is a subclass of the client's (`_observed_class`, one per client class) whose properties of
that kind observe what they make. A client that makes its resources in ``__init__`` (older
releases) has them observed at once.
"""

from __future__ import annotations

import copy
import functools
import inspect
import types
from typing import Any, TypeVar

from .patches import SDKS, TARGETS, Target

C = TypeVar("C")


def wrap(client: C) -> C:
    """An observed copy of an ``openai`` / ``anthropic`` client (sync or async, Azure, Bedrock and Vertex too).

    Raises TypeError for anything else: a mistake to hear about at set-up, not a call silently unobserved.
    """
    sdk = _sdk_of(client)
    observed = _shallow_copy(client) if sdk == "botocore" else copy.copy(client)
    _forget_resources(observed)
    if sdk == "google.genai":
        _own_genai_models(observed)
    lazy = _observed_class(type(client), sdk)
    if lazy is not type(client):
        observed.__class__ = lazy
    for target in TARGETS:
        if target.sdk == sdk and not (
            target.path and isinstance(inspect.getattr_static(type(client), target.path[0], None), _LAZY)
        ):
            _observe(observed, target)
    copier = getattr(type(client), "copy", None)
    if callable(copier):
        observed_copy = functools.partial(_observed_copy, copier, observed)
        observed.copy = observed_copy  # type: ignore[attr-defined]
        observed.with_options = observed_copy  # type: ignore[attr-defined]
    return observed


_LAZY = functools.cached_property


def _made_on_first_use(kind: type, target: Target) -> bool:
    """Whether the client makes the target's top resource when first reached (observed then, by `_observed_class`)."""
    return bool(target.path) and isinstance(inspect.getattr_static(kind, target.path[0], None), _LAZY)


def _observe(observed: Any, target: Target) -> None:
    """An observing shell on ``target``'s method of the copy's own resource object."""
    cls = target.owner_class()
    resource = _resource(observed, target.path)
    if cls is None or resource is None or not isinstance(resource, cls):
        return
    method = getattr(cls, target.method)
    setattr(resource, target.method, types.MethodType(target.shell(method), resource))


_CLASSES: dict[type, type] = {}  # client class -> its observed subclass (a handful of classes a process)


def _observed_class(kind: type, sdk: str) -> type:
    """``kind``, with each top-level resource it makes on first use observing the targets under it when made."""
    if getattr(kind, "_cw_observed_class", False):
        return kind
    made = _CLASSES.get(kind)
    if made is not None:
        return made
    overrides: dict[str, Any] = {"_cw_observed_class": True, "__module__": kind.__module__}
    for top in {t.path[0] for t in TARGETS if t.sdk == sdk and t.path}:
        prop = inspect.getattr_static(kind, top, None)
        if isinstance(prop, _LAZY):
            overrides[top] = _observing_property(prop, top, sdk)
    if len(overrides) == 2:
        return kind
    made = _CLASSES[kind] = type(kind.__name__, (kind,), overrides)
    return made


def _observing_property(prop: Any, top: str, sdk: str) -> functools.cached_property[Any]:
    def make(self: Any) -> Any:
        resource = prop.func(self)
        self.__dict__[top] = resource  # the targets below are reached through it
        for target in TARGETS:
            if target.sdk == sdk and target.path[:1] == (top,):
                _observe(self, target)
        return resource

    return functools.cached_property(make)  # type() names it, as a class body would


def _observed_copy(copier: Any, observed: Any, *args: Any, **kwargs: Any) -> Any:
    return wrap(copier(observed, *args, **kwargs))


def _sdk_of(client: Any) -> str:
    for kind in type(client).__mro__:
        package = kind.__module__.split(".", 1)[0]
        if package in SDKS and kind.__name__ in ("SyncAPIClient", "AsyncAPIClient"):
            return package
        if kind.__module__ == "google.genai.client" and kind.__name__ == "Client":
            return "google.genai"
        if kind.__module__ == "botocore.client" and kind.__name__ == "BaseClient":
            return "botocore"
    raise TypeError(f"cw.wrap() takes an openai, anthropic, google-genai or boto3 client, got {type(client).__name__}")


def _shallow_copy(client: C) -> C:
    """A botocore client's copy: its ``__getattr__`` (events it looks up by name) recurses under `copy.copy`,
    which reads attributes of the new object before its ``__dict__`` is filled."""
    twin = object.__new__(type(client))
    twin.__dict__.update(client.__dict__)
    return twin


def _own_genai_models(observed: Any) -> None:
    """A google-genai client makes its ``models`` (and ``aio.models``) in ``__init__``: the copy gets its own."""
    models = type(observed._models)
    observed._models = models(observed._api_client)
    aio = copy.copy(observed._aio)
    aio._models = type(aio._models)(observed._api_client)
    observed._aio = aio


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
