"""The observed methods of the official clients, and what they do with what the client returns.

One shell per kind of method, each a thin layer over the one call lifecycle (`wrapper.run_call`):

* `method_shell`: ``create`` (sync or async): the clean request goes to the client's own method,
  and what it returns comes back as it is: a response object, a stream, or a raw response
  (``with_raw_response`` / ``with_streaming_response`` call ``create`` with a header asking for one);
* `manager_shell`: Anthropic's ``messages.stream``, which returns a manager that sends the request
  when entered (``with ... as stream``).

What the client returns is never replaced: a stream (the clients' ``Stream`` / ``AsyncStream``,
one generator under ``_iterator`` read by both ``__next__`` and ``__iter__``) gets an observing
generator in place of that one (on the instance), so the caller iterates the same object; a raw response's ``parse``
is observed on that one object. A call inside an observed call (LiteLLM's own use of the ``openai``
client: `_litellm.forwarding`) or under OpenTelemetry's suppress-instrumentation key goes straight
to the client's method.
"""

from __future__ import annotations

import functools
import inspect
import sys
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from types import FrameType
from typing import Any, Optional

from ..apis import Api, Route
from ..call import OPTION_STREAM_USAGE, Call
from ..litellm_originals import SAVED_ATTR, forwarding, forwarding_scope, mark_observed
from ..suppress import suppressed
from ..wrapper import arun_call, run_call

RAW_RESPONSE_HEADER = "X-Stainless-Raw-Response"  # both clients' with_raw_response / with_streaming_response
_SENTINELS = frozenset({"NotGiven", "Omit"})  # the clients' "not given" values: the same as leaving the argument out
_MATERIALISED = ("messages", "tools", "input", "system")  # may be any iterable: read once, by us and then the client

RouteOf = Callable[[Any], Route]


def skipped() -> bool:
    """True where a client call is not observed: inside an observed call, under OpenTelemetry's
    suppress key, or made by LiteLLM itself (a LiteLLM call is observed at LiteLLM's entry point or
    not at all: one its shells let through, suppressed or bound before `instrument()`, stays so)."""
    return forwarding() or suppressed() or _called_by_litellm()


_CLIENT_MODULES = ("openai", "anthropic", "cw_middleware", "functools", "contextlib")


def _called_by_litellm() -> bool:
    """Whether the first caller outside the clients' own (and our) code is LiteLLM's."""
    frame: Optional[FrameType] = sys._getframe(2)
    for _ in range(16):  # the clients' wrappers (with_raw_response, retries) are a few frames deep at most
        if frame is None:
            return False
        module = frame.f_globals.get("__name__", "")
        top = module.partition(".")[0]
        if top == "litellm":
            return True
        if top not in _CLIENT_MODULES:
            return False
        frame = frame.f_back
    return False


def method_shell(original: Callable[..., Any], api: Api, route_of: RouteOf) -> Callable[..., Any]:
    """An observed ``create``: ``original`` is the client's method (a function taking the resource first)."""
    if inspect.iscoroutinefunction(inspect.unwrap(original)):  # the clients' argument check is a plain function

        @functools.wraps(original)
        async def observed_async(self: Any, *args: Any, **kwargs: Any) -> Any:
            if skipped():
                return await original(self, *args, **kwargs)
            request = _request(kwargs)
            route = route_of(self)
            return await arun_call(api, args, request, functools.partial(original, self), observe, route)

        shell: Callable[..., Any] = observed_async
    else:

        @functools.wraps(original)
        def observed(self: Any, *args: Any, **kwargs: Any) -> Any:
            if skipped():
                return original(self, *args, **kwargs)
            request = _request(kwargs)
            route = route_of(self)
            return run_call(api, args, request, functools.partial(original, self), observe, route)

        shell = observed
    setattr(shell, SAVED_ATTR, original)  # as on instrument()'s LiteLLM shells: _litellm.unwrap goes past it
    return mark_observed(shell)


def manager_shell(original: Callable[..., Any], api: Api, route_of: RouteOf) -> Callable[..., Any]:
    """An observed ``messages.stream``: the call starts now, its request is sent when the manager is entered."""

    @functools.wraps(original)
    def observed_stream(self: Any, *args: Any, **kwargs: Any) -> Any:
        if skipped():
            return original(self, *args, **kwargs)
        request = _request(kwargs)
        route = route_of(self)
        return run_call(api, args, request, functools.partial(original, self), observe_manager, route)

    setattr(observed_stream, SAVED_ATTR, original)
    return mark_observed(observed_stream)


def _request(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The request as we read it and the client gets it: its "not given" values left out, iterables made lists.

    Leaving a ``NOT_GIVEN`` / ``omit`` argument out is what passing it means (every optional argument of
    the clients defaults to one); a generator of messages is read once here, and the client gets the list.
    """
    out = {k: v for k, v in kwargs.items() if type(v).__name__ not in _SENTINELS}
    for key in _MATERIALISED:
        value = out.get(key)
        if value is not None and not isinstance(value, (list, tuple, str, dict)) and hasattr(value, "__iter__"):
            out[key] = list(value)
    headers = out.get("extra_headers")
    if isinstance(headers, dict) and RAW_RESPONSE_HEADER in headers:
        # A raw response is read by the caller, line by line perhaps: a usage chunk we asked for would show.
        out.setdefault(OPTION_STREAM_USAGE, "never")
    return out


# ---------------------------------------------------------------- what came back


def observe(call: Call, response: Any) -> Any:
    """Reconcile a response, or observe a stream or a raw response as it is read; returns ``response`` itself."""
    try:
        if _is_raw(response):
            _observe_raw(call, response)
        elif _is_stream(response):
            _observe_stream(call, response)
        elif inspect.isgenerator(response) or inspect.isasyncgen(response):
            return _observed_generator(call, response)
        else:
            call.finish_response(response)
    except Exception as exc:  # noqa: BLE001
        call.runtime.log.warning("observe", f"cw_middleware: could not read the response ({type(exc).__name__})")
    return response


def observe_manager(call: Call, manager: Any) -> Any:
    """Anthropic's stream manager: its request, sent on entering it, is observed; returns ``manager`` itself."""
    try:
        name = next((n for n in vars(manager) if n.endswith("__api_request")), None)
        if name is None:
            raise AttributeError("api_request")
        request = getattr(manager, name)
        sent = [False]
        if inspect.isawaitable(request):

            async def send_async() -> Any:
                sent[0] = True
                try:
                    with forwarding_scope():
                        raw = await request
                except BaseException as exc:
                    call.fail(exc)
                    raise
                return observe(call, raw)

            setattr(manager, name, send_async())
        else:

            def send() -> Any:
                sent[0] = True
                try:
                    with forwarding_scope():
                        raw = request()
                except BaseException as exc:
                    call.fail(exc)
                    raise
                return observe(call, raw)

            setattr(manager, name, send)
        # A manager dropped unentered sent nothing: the call ends without usage.
        weakref.finalize(manager, _end_unless, call, sent).atexit = False
    except Exception as exc:  # noqa: BLE001
        call.runtime.log.warning("observe", f"cw_middleware: could not observe a stream ({type(exc).__name__})")
        call.finish_stream()
    return manager


def _end_unless(call: Call, done: list[bool]) -> None:
    """A finalizer: the call ends without usage unless what it waited for happened (then that ends it)."""
    if not done[0]:
        call.finish_stream()


def _is_raw(response: Any) -> bool:
    kind = type(response)
    return hasattr(kind, "parse") and hasattr(kind, "http_request") and "http_response" in _fields(response)


def _is_stream(response: Any) -> bool:
    # ``_iterator``: an attribute set in __init__, or made on first use (a cached_property: anthropic 2.x).
    return hasattr(type(response), "__stream__") and hasattr(response, "_iterator")


def _fields(obj: Any) -> Any:
    fields = getattr(obj, "__dict__", None)
    return fields if isinstance(fields, dict) else {}


def _observe_stream(call: Call, stream: Any) -> None:
    inner = stream._iterator
    stream._iterator = _observed_aiter(inner, call) if hasattr(inner, "__anext__") else _observed_iter(inner, call)
    # A caller may stop reading early and drop the stream: end the call when it is collected.
    weakref.finalize(stream, call.finish_stream).atexit = False


def _observed_generator(call: Call, inner: Any) -> Any:
    """google-genai's streams are plain generators: the caller iterates ours, which yields theirs item for item.

    A generator dropped unfinished, or never started, ends the call without usage when it is collected."""
    outer = _observed_aiter(inner, call) if inspect.isasyncgen(inner) else _observed_iter(inner, call)
    weakref.finalize(outer, call.finish_stream).atexit = False
    return outer


def _observed_iter(inner: Iterator[Any], call: Call) -> Iterator[Any]:
    try:
        for item in inner:
            if call.see_chunk(item):
                yield item
    except GeneratorExit:
        raise
    except BaseException as exc:
        call.fail(exc)
        raise
    call.finish_stream()


async def _observed_aiter(inner: AsyncIterator[Any], call: Call) -> AsyncIterator[Any]:
    try:
        async for item in inner:
            if call.see_chunk(item):
                yield item
    except GeneratorExit:
        raise
    except BaseException as exc:
        call.fail(exc)
        raise
    call.finish_stream()


def _observe_raw(call: Call, raw: Any) -> None:
    """``with_raw_response`` / ``with_streaming_response``: the body is observed when the caller parses it.

    A caller who reads the bytes instead (``.text``, ``iter_lines()``) gets them as the provider sent
    them; the call then ends without usage (``usage_missing``) when the response is collected.
    """
    parse = type(raw).parse  # the class's: a bound method kept on the instance would keep it alive
    of = weakref.ref(raw)
    cast_to = getattr(raw, "_cast_to", None)
    seen = [False]

    def parsed(result: Any, to: Any) -> None:
        if seen[0] or (to is not None and to is not cast_to):
            return
        seen[0] = True
        try:
            if _is_stream(result):
                _observe_stream(call, result)
            else:
                call.finish_response(result)
        except Exception as exc:  # noqa: BLE001
            call.runtime.log.warning("observe", f"cw_middleware: could not read the response ({type(exc).__name__})")

    if inspect.iscoroutinefunction(parse):

        @functools.wraps(parse)
        async def observed_aparse(*args: Any, **kwargs: Any) -> Any:
            result = await parse(of(), *args, **kwargs)
            parsed(result, kwargs.get("to"))
            return result

        raw.parse = observed_aparse
    else:

        @functools.wraps(parse)
        def observed_parse(*args: Any, **kwargs: Any) -> Any:
            result = parse(of(), *args, **kwargs)
            parsed(result, kwargs.get("to"))
            return result

        raw.parse = observed_parse
    # Never parsed: ends without usage when collected (a parsed stream ends when it is read or collected).
    weakref.finalize(raw, _end_unless, call, seen).atexit = False
