"""cw.instrument(): observe every call that looks LiteLLM's entry points up on the ``litellm`` module,
and every call of the official ``openai`` and ``anthropic`` clients where they are installed (clients/).

Frameworks (LangChain's ChatLiteLLM, the OpenAI Agents SDK's LitellmModel,
smolagents, DSPy) and LiteLLM's own Router call ``litellm.completion`` and its
siblings themselves. `instrument()` puts an observed shell in place of each
module attribute; the shell runs the same lifecycle as ``cw.completion`` (tags
stripped, snapshots, usage reconciled) and forwards to the function it replaced,
kept by `_litellm.remember`. Nothing else changes: no environment variable, no
LiteLLM setting, no callback list.

`uninstrument()` puts back exactly what was there, unless someone patched on top
of our shell since: their patch is left in place (it may forward to ours) and a
warning says so.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import bound, clients, import_hooks, wrapper
from . import litellm_originals as _litellm
from .suppress import suppressed

logger = logging.getLogger("cw_middleware")


def _shells() -> dict[str, Callable[..., Any]]:
    """The observed entry points, by their litellm attribute name (the wrapper's drop-ins)."""
    return {name: getattr(wrapper, name) for name in _litellm.ENTRY_POINTS}


@dataclass(frozen=True)
class Instrumentation:
    """What `instrument()` observes: the entry points patched, and the packages it waits for.

    ``observed`` names each patched function or method as it is spelled where it lives
    (``litellm.completion``, ``openai.resources.chat.completions.Completions.create``); ``waiting``
    the installed packages the application has not imported yet (``anthropic``): they are observed
    from the moment it does. Nothing else is changed, and nothing is imported for them.
    """

    observed: tuple[str, ...]
    waiting: tuple[str, ...]


# The packages instrument() observes, each by its patch: LiteLLM's module functions, the official clients.
def _hooks() -> dict[str, Callable[[Any], None]]:
    hooks: dict[str, Callable[[Any], None]] = {"litellm": _instrument_litellm}
    for sdk in clients.SDKS:
        hooks[sdk] = functools.partial(_instrument_sdk, sdk)
    return hooks


def instrument() -> Instrumentation:
    """Observe ``litellm.completion``, ``acompletion``, ``responses`` and ``aresponses`` for every caller,
    and every method of the official clients that sends a model request (``chat.completions.create`` and
    ``parse``, ``responses.create`` and ``parse``, ``messages.create``, ``parse`` and ``stream``, their
    ``beta`` forms: `clients.patches.TARGETS`), sync and async. Returns what it observes.

    Idempotent and thread-safe. A package the application has not imported yet is not imported here:
    it is observed as soon as the application imports it (`import_hooks`). Calls that look the
    function up on the module at call time are observed (frameworks, the Router), and so are
    references bound before this call in a module's globals (``from litellm import completion`` at
    import time): those are swapped too (`bound`); one that cannot be swapped is named in a warning.
    After ``importlib.reload(litellm)`` put LiteLLM's functions back, the next call installs the shells
    again. This is the process's set-up moment, so the first observed call pays for neither: the
    runtime (and with it the telemetry pipeline and its OpenTelemetry SDK import) is built here, and
    the o200k_base tokenizer starts loading in the background.
    """
    from .._counting.rules import _tiktoken
    from .runtime import get_runtime

    get_runtime()  # never raises: a bad environment leaves telemetry off, with one warning
    _tiktoken.prefetch("o200k_base")
    for package, hook in _hooks().items():
        if importlib.util.find_spec(package) is not None:
            import_hooks.when_imported(package, hook)
    return Instrumentation(tuple(_observed_names()), tuple(p for p in import_hooks.waiting() if p in _hooks()))


def _instrument_litellm(litellm: Any) -> None:
    patches = _litellm.patches()
    with patches.lock:
        _drop_reloaded(litellm, patches)
        replacing: dict[int, Callable[..., Any]] = {}
        for name, shell in _shells().items():
            if name in patches.installed:
                continue
            current = getattr(litellm, name)
            saved = _litellm.unwrap(current)  # a stale shell of ours put back by hand: forward past it
            observed = _observed(name, shell, saved)
            _litellm.remember(name, saved)
            setattr(litellm, name, observed)
            patches.installed[name] = (current, observed)
            for function in (saved, _own_or_none(name)):  # LiteLLM's own only: a user's function keeps its names
                if _is_litellms(function):
                    replacing[id(function)] = observed
        if replacing:
            patches.swaps.extend(bound.swap(replacing))


def _instrument_sdk(sdk: str, module: Any) -> None:
    clients.instrument_clients(sdk)


def _observed_names() -> list[str]:
    names = [f"litellm.{name}" for name in _litellm.patches().installed]
    return names + clients.clients_observed()


def uninstrument() -> None:
    """Put back what `instrument()` replaced. Idempotent and thread-safe.

    A function someone set on top of our shell since is left alone (with a
    warning): restoring under it would silently drop their patch. A shell that
    stays bound somewhere (a framework took it while instrumented) passes every
    call straight through to what it replaced from now on.
    """
    for package in _hooks():
        import_hooks.cancel(package)
    litellm = sys.modules.get("litellm")
    if litellm is not None:
        _uninstrument_litellm(litellm)
    clients.uninstrument_clients()


def _uninstrument_litellm(litellm: Any) -> None:
    patches = _litellm.patches()
    with patches.lock:
        _drop_reloaded(litellm, patches)
        for name, (before, observed) in list(patches.installed.items()):
            if getattr(litellm, name, None) is not observed:
                logger.warning(
                    "cw_middleware: litellm.%s was patched again after instrument(); leaving that patch in place", name
                )
                continue
            setattr(litellm, name, before)
            _litellm.forget(name)
            del patches.installed[name]
        live = {id(observed) for _, observed in patches.installed.values()}
        bound.restore([s for s in patches.swaps if id(s.shell) not in live])
        patches.swaps = [s for s in patches.swaps if id(s.shell) in live]


def instrumented() -> bool:
    """True while at least one LiteLLM entry point or official-client method is observed through instrument().

    False for LiteLLM once ``importlib.reload(litellm)`` (or anyone) put LiteLLM's own functions
    back: nothing observes there then, whatever `instrument()` installed before.
    """
    return litellm_instrumented() or clients.clients_instrumented()


def litellm_instrumented() -> bool:
    """True while at least one LiteLLM entry point is observed through the module (not after a reload put LiteLLM's back)."""
    litellm = sys.modules.get("litellm")
    if litellm is None:
        return False
    patches = _litellm.patches()
    with patches.lock:
        return any(not _reloaded(litellm, name, entry) for name, entry in patches.installed.items())


def _reloaded(litellm: Any, name: str, entry: tuple[Callable[..., Any], Callable[..., Any]]) -> bool:
    """Whether ``litellm.<name>`` holds LiteLLM's own function again instead of our shell (a reload, a reset).

    What sits there now is what was there before `instrument()`, or LiteLLM's own definition;
    anything else is a patch on top of ours, which may call ours.
    """
    before, observed = entry
    current = getattr(litellm, name, None)
    if current is observed:
        return False
    return current is before or current is _litellm.patches().originals.get(name) or current is _own_or_none(name)


def _drop_reloaded(litellm: Any, patches: _litellm.Patches) -> None:
    """Forget the names whose originals came back: nothing to restore, and `instrument()` installs them anew."""
    for name, entry in list(patches.installed.items()):
        if _reloaded(litellm, name, entry):
            logger.info("cw_middleware: litellm.%s is LiteLLM's own again (a reload?): no longer observed there", name)
            _litellm.forget(name)
            del patches.installed[name]


def _is_litellms(function: Any) -> bool:
    module = getattr(function, "__module__", None) or ""
    return callable(function) and not _litellm.is_observed(function) and module.partition(".")[0] == "litellm"


def _own_or_none(name: str) -> Any:
    try:
        return _litellm.own(name)
    except RuntimeError:
        return None


def _observed(name: str, shell: Callable[..., Any], saved: Callable[..., Any]) -> Callable[..., Any]:
    """The module attribute we install: the wrapper's drop-in, unless we are already inside an observed call.

    Calls go straight to what the shell replaced, unobserved and unchanged, once `uninstrument()`
    took the name back (a framework may still hold the shell) and inside OpenTelemetry's
    ``suppress_instrumentation()``.
    """
    # What "straight through" means: the function replaced, unless that was one of ours (a shim).
    through = saved if not _litellm.is_observed(saved) else None

    def passes_through() -> bool:
        return name not in _litellm.patches().installed or suppressed()

    if name.startswith("a"):

        @functools.wraps(saved)
        async def observed_async(*args: Any, **kwargs: Any) -> Any:
            if _inside_a_call():
                return await _litellm.own(name)(*args, **kwargs)
            if passes_through():
                return await (through or _litellm.own(name))(*args, **kwargs)
            return await shell(*args, **kwargs)

        observed: Callable[..., Any] = observed_async
    else:

        @functools.wraps(saved)
        def observed_sync(*args: Any, **kwargs: Any) -> Any:
            if _inside_a_call():
                return _litellm.own(name)(*args, **kwargs)
            if passes_through():
                return (through or _litellm.own(name))(*args, **kwargs)
            return shell(*args, **kwargs)

        observed = observed_sync
    setattr(observed, _litellm.SAVED_ATTR, saved)
    return _litellm.mark_observed(observed)


def _inside_a_call() -> bool:
    """True while one of our calls is inside its original (`_litellm.forwarding`).

    Such an inner call (a patch under ours that looks ``litellm.completion`` up at call
    time, LiteLLM calling its own entry points, a callback) belongs to the outer one: it
    goes straight to LiteLLM's own function, not through the patch again, so a patch that
    always looks the module up cannot recurse.
    """
    return _litellm.forwarding()
