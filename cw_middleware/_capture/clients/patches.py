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

from ..._kernel.process import PROCESS
from ..apis import adapter
from ..litellm_originals import unwrap
from .bedrock import api_call_shell
from .routes import resource_route
from .shells import manager_shell, method_shell

logger = logging.getLogger("cw_middleware")

SDKS = ("openai", "anthropic", "google.genai", "botocore")


@dataclass(frozen=True)
class Target:
    """One observed client method."""

    sdk: str  # the package: "openai" | "anthropic" | "google.genai" | "botocore"
    module: str
    owner: str  # the resource class
    method: str
    api: str  # the adapter's name in apis/ ("CHAT", "MESSAGES"...): imported once a shell is made for it
    path: tuple[str, ...]  # where the resource sits on a client object
    # method: the client method sends (create, parse, generate_content); manager: it returns a stream manager
    # that sends on entering (Anthropic's messages.stream); api_call: botocore's one entry of every call.
    kind: str = "method"

    def owner_class(self) -> Optional[type]:
        """The resource class, or None where the installed client has no such class or method."""
        try:
            found = getattr(importlib.import_module(self.module), self.owner, None)
        except ImportError:
            return None
        return found if isinstance(found, type) and callable(getattr(found, self.method, None)) else None

    def shell(self, original: Callable[..., Any]) -> Callable[..., Any]:
        make = {"method": method_shell, "manager": manager_shell, "api_call": api_call_shell}[self.kind]
        return make(unwrap(original), adapter(self.api), functools.partial(resource_route, wire=self.sdk))


def _rows(
    sdk: str, module: str, classes: tuple[str, ...], methods: tuple[str, ...], api: str, path: tuple[str, ...]
) -> tuple[Target, ...]:
    """One row a method of both the sync and the async resource class (``Messages`` and ``AsyncMessages``)."""
    return tuple(
        Target(sdk, module, owner, method, api, path, "manager" if method == "stream" else "method")
        for method in methods
        for owner in classes
    )


_OPENAI_CHAT = ("Completions", "AsyncCompletions")
_OPENAI_RESPONSES = ("Responses", "AsyncResponses")
_ANTHROPIC = ("Messages", "AsyncMessages")
_GENAI_METHODS = ("generate_content", "generate_content_stream")

# Every method that sends a model request itself. Those that send through one of these are observed
# through it: openai's ``chat.completions.stream`` and ``responses.stream`` call ``create``, anthropic's
# ``tool_runner`` calls ``create`` or ``stream``. tests/test_client_coverage.py reads the installed
# clients and fails on a method that posts to a model endpoint and is neither here nor named there as
# left out on purpose. A module or method the installed version lacks is skipped (`Target.owner_class`).
TARGETS: tuple[Target, ...] = (
    *_rows("openai", "openai.resources.chat.completions", _OPENAI_CHAT, ("create", "parse"), "CHAT", ("chat", "completions")),
    # openai 1.x: the structured-output helpers under beta (``client.beta.chat.completions.parse``)
    *_rows("openai", "openai.resources.beta.chat.completions", _OPENAI_CHAT, ("parse",), "CHAT", ("beta", "chat", "completions")),
    *_rows("openai", "openai.resources.responses", _OPENAI_RESPONSES, ("create", "parse"), "RESPONSES", ("responses",)),
    *_rows("openai", "openai.resources.beta.responses", _OPENAI_RESPONSES, ("create",), "RESPONSES", ("beta", "responses")),
    *_rows("anthropic", "anthropic.resources.messages", _ANTHROPIC, ("create", "parse", "stream"), "MESSAGES", ("messages",)),
    *_rows(
        "anthropic",
        "anthropic.resources.beta.messages",
        _ANTHROPIC,
        ("create", "parse", "stream"),
        "MESSAGES",
        ("beta", "messages"),
    ),
    # google-genai: a stream is a generator of responses; chats send through these. Async models live at client.aio.
    *_rows("google.genai", "google.genai.models", ("Models",), _GENAI_METHODS, "GENERATE_CONTENT", ("models",)),
    *_rows("google.genai", "google.genai.models", ("AsyncModels",), _GENAI_METHODS, "GENERATE_CONTENT", ("aio", "models")),
    # boto3: every call of every client ends here; the shell observes bedrock-runtime's Converse calls (bedrock.py).
    Target("botocore", "botocore.client", "BaseClient", "_make_api_call", "CONVERSE", (), "api_call"),
)

# Methods of the clients that post to a model endpoint and are not observed, on purpose (the docs list them):
# (the endpoint, without ``?beta=true``; the method) -> why.
LEFT_OUT: dict[tuple[str, str], str] = {
    ("/v1/messages/count_tokens", "count_tokens"): "a token count, not a model call: it passes through unobserved",
    ("/responses/input_tokens", "count"): "a token count, not a model call: it passes through unobserved",
    ("/v1/messages/batches", "create"): "a batch: its requests run later on the provider's side, with no caller waiting",
    ("/v1/messages/batches/{message_batch_id}/cancel", "cancel"): "cancels a batch: no request of its own",
    ("/responses/{response_id}/cancel", "cancel"): "cancels a stored response: no request of its own",
    ("/chat/completions/{completion_id}", "update"): "updates a stored completion's metadata: no model call",
    ("/responses/compact", "compact"): (
        "compaction is summarised on the provider's side; what it returns fills the next request, which is counted"
    ),
    ("/completions", "create"): (
        "the legacy Completions API: one prompt string, none of the roles, tools or segments cw attributes"
    ),
    ("/v1/complete", "create"): "Anthropic's legacy Text Completions API, as above",
}

_MISSING = object()


class ClientPatches:
    """What instrument() installed on the clients' classes (a part of the process state, see _kernel/process.py)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # (class, method) -> (what its class dict held before, or _MISSING; our shell)
        self.installed: dict[tuple[type, str], tuple[Any, Callable[..., Any]]] = {}

    def after_fork_in_child(self) -> None:
        self.lock = threading.Lock()


def patches() -> ClientPatches:
    return PROCESS.part(ClientPatches)


def installed_sdks() -> list[str]:
    """The official clients installed here (found, not imported)."""
    return [sdk for sdk in SDKS if importlib.util.find_spec(sdk) is not None]


def instrument_clients(sdk: str) -> None:
    """Observe every `TARGETS` method of one client package, on its class. Idempotent.

    instrument() calls it once the application has imported ``sdk`` (never before): the resource
    modules it imports then are the client's own, which its first call imports anyway.
    """
    state = patches()
    with state.lock:
        for target in TARGETS:
            if target.sdk != sdk:
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


def clients_observed() -> list[str]:
    """The methods instrument() observes now, as ``module.Class.method``."""
    state = patches()
    with state.lock:
        return [f"{cls.__module__}.{cls.__qualname__}.{method}" for cls, method in state.installed]
