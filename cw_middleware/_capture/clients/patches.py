"""Which methods of the official clients are observed, and instrument()'s patches of them.

`TARGETS` is the one table: each row a client method (its module, class and name), the wire
format it speaks (the adapter, ``apis/``) and where it sits on a client (``client.chat.completions``).
`instrument_clients` puts a shell (shells.py) in place of each method on its class, for every
client object of the process, made before or after; `uninstrument_clients` puts back what was there,
unless someone patched on top of our shell since (their patch stays, with a warning), as the
LiteLLM patch does. A client that is not installed, or a method its version does not have, is
skipped. `wrap` (wrap.py) reads the same table to observe one client object instead.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from ..._process import PROCESS
from ..apis import CHAT, MESSAGES, RESPONSES, Api
from ..litellm_originals import unwrap
from .routes import route_of
from .shells import manager_shell, method_shell

logger = logging.getLogger("cw_middleware")

SDKS = ("openai", "anthropic")


@dataclass(frozen=True)
class Target:
    """One observed client method."""

    sdk: str  # the package: "openai" | "anthropic"
    module: str
    owner: str  # the resource class
    method: str
    api: Api
    path: tuple[str, ...]  # where the resource sits on a client object
    manager: bool = False  # returns a stream manager that sends on entering (Anthropic's messages.stream)

    def owner_class(self) -> Optional[type]:
        """The resource class, or None where the installed client has no such class or method."""
        try:
            found = getattr(importlib.import_module(self.module), self.owner, None)
        except ImportError:
            return None
        return found if isinstance(found, type) and callable(getattr(found, self.method, None)) else None

    def shell(self, original: Callable[..., Any]) -> Callable[..., Any]:
        make = manager_shell if self.manager else method_shell
        return make(unwrap(original), self.api, functools.partial(route_of, wire=self.sdk))


TARGETS: tuple[Target, ...] = (
    Target("openai", "openai.resources.chat.completions", "Completions", "create", CHAT, ("chat", "completions")),
    Target("openai", "openai.resources.chat.completions", "AsyncCompletions", "create", CHAT, ("chat", "completions")),
    Target("openai", "openai.resources.responses", "Responses", "create", RESPONSES, ("responses",)),
    Target("openai", "openai.resources.responses", "AsyncResponses", "create", RESPONSES, ("responses",)),
    Target("anthropic", "anthropic.resources.messages", "Messages", "create", MESSAGES, ("messages",)),
    Target("anthropic", "anthropic.resources.messages", "AsyncMessages", "create", MESSAGES, ("messages",)),
    Target("anthropic", "anthropic.resources.messages", "Messages", "stream", MESSAGES, ("messages",), manager=True),
    Target("anthropic", "anthropic.resources.messages", "AsyncMessages", "stream", MESSAGES, ("messages",), manager=True),
)

_MISSING = object()


class ClientPatches:
    """What instrument() installed on the clients' classes (a part of the process state, see _process.py)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # (class, method) -> (what its class dict held before, or _MISSING; our shell)
        self.installed: dict[tuple[type, str], tuple[Any, Callable[..., Any]]] = {}

    def after_fork_in_child(self) -> None:
        self.lock = threading.Lock()


def patches() -> ClientPatches:
    return PROCESS.part(ClientPatches)


def installed_sdks() -> list[str]:
    """The official clients importable here (imported by instrument(), not before)."""
    return [sdk for sdk in SDKS if importlib.util.find_spec(sdk) is not None]


def instrument_clients() -> None:
    """Observe every `TARGETS` method of the installed clients, on its class. Idempotent."""
    sdks = installed_sdks()
    state = patches()
    with state.lock:
        for target in TARGETS:
            if target.sdk not in sdks:
                continue
            cls = target.owner_class()
            if cls is None or (cls, target.method) in state.installed:
                continue
            before = cls.__dict__.get(target.method, _MISSING)
            shell = target.shell(getattr(cls, target.method))
            setattr(cls, target.method, shell)
            state.installed[(cls, target.method)] = (before, shell)


def uninstrument_clients() -> None:
    """Put back what `instrument_clients` replaced, except under a patch made on top of ours since."""
    state = patches()
    with state.lock:
        for (cls, method), (before, shell) in list(state.installed.items()):
            if cls.__dict__.get(method) is not shell:
                logger.warning(
                    "cw_middleware: %s.%s was patched again after instrument(); leaving that patch in place",
                    cls.__qualname__,
                    method,
                )
                continue
            if before is _MISSING:
                delattr(cls, method)
            else:
                setattr(cls, method, before)
            del state.installed[(cls, method)]


def clients_instrumented() -> bool:
    state = patches()
    with state.lock:
        return bool(state.installed)
