"""The LiteLLM drop-in: completion / acompletion and responses / aresponses (streams included), and estimate().

Thin shells over one call lifecycle (`call.Call`): each entry point starts a call, forwards
its clean request to LiteLLM (the real function, `_litellm.original`), and hands back the
response, the stream or the exception; a stream is the same object, re-classed so that
iterating it also observes its chunks. What differs between Chat Completions and the
Responses API is the adapter's (``apis/``). Only a caller mistake (a bad tag) raises; any
other failure inside the middleware is logged, and the LLM call proceeds as LiteLLM would
run it.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Optional

from .._counting.estimator import Estimate
from .._counting.model_facts import OPTION_CONTEXT_WINDOW
from .._counting.rules import _tiktoken
from .._counting.tool_rows import NO_TOOLS
from .._kernel.contract import CountMethod, Snapshot, WarningCode
from .._kernel.errors import TagError
from .._kernel.process import PROCESS
from .._snapshots.build import build_snapshot
from .apis import API_OF, Api, Parsed, Route, adapter, for_estimate
from .call import OPTIONS, Call
from .litellm_originals import forwarding, forwarding_scope, mark_observed, original
from .runtime import Runtime, get_runtime
from .stages import current_stage

# ---------------------------------------------------------------- entry points


@mark_observed
def completion(*args: Any, **kwargs: Any) -> Any:
    """`litellm.completion`, observed. Same arguments, same return value."""
    return _forward("completion", args, kwargs)


@mark_observed
async def acompletion(*args: Any, **kwargs: Any) -> Any:
    """`litellm.acompletion`, observed. Same arguments, same return value."""
    return await _aforward("acompletion", args, kwargs)


@mark_observed
def responses(*args: Any, **kwargs: Any) -> Any:
    """`litellm.responses`, observed. Same arguments, same return value (streams: the same iterator)."""
    return _forward("responses", args, kwargs)


@mark_observed
async def aresponses(*args: Any, **kwargs: Any) -> Any:
    """`litellm.aresponses`, observed. Same arguments, same return value (streams: the same iterator)."""
    return await _aforward("aresponses", args, kwargs)


def _forward(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if forwarding():
        return original(name)(*args, **_without_options(kwargs))
    return run_call(adapter(API_OF[name]), args, kwargs, original(name), _observe)


async def _aforward(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if forwarding():
        return await original(name)(*args, **_without_options(kwargs))
    return await arun_call(adapter(API_OF[name]), args, kwargs, original(name), _observe)


def run_call(
    api: Api,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    send: Callable[..., Any],
    observe: Callable[[Call, Any], Any],
    route: Optional[Route] = None,
) -> Any:
    """One observed call, whoever sends it: start it, ``send`` its clean request, ``observe`` what came back.

    The LiteLLM entry points send through LiteLLM, the official clients' shells (clients/) through the
    client's own method; either way the send runs inside `forwarding_scope`, so that anything it
    reaches that we also observe (LiteLLM's own use of the ``openai`` client) is not a second call.
    """
    with _tiktoken.calls_in_flight():
        call = Call.start(api, args, kwargs, route)
        while True:
            try:
                with forwarding_scope():
                    response = send(*call.args, **call.kwargs)
                break
            except BaseException as exc:
                if call.drop_stream_usage(exc):
                    continue  # the endpoint refused the stream_options we added: once more, as the caller wrote it
                call.fail(exc)  # its send is over too
                raise
        call.sent = True  # the call's first snapshot may be recorded now (call.py, `_in_order`)
    return observe(call, response)


async def arun_call(
    api: Api,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    send: Callable[..., Awaitable[Any]],
    observe: Callable[[Call, Any], Any],
    route: Optional[Route] = None,
) -> Any:
    """`run_call` for a coroutine ``send``."""
    with _tiktoken.calls_in_flight():
        call = Call.start(api, args, kwargs, route)
        while True:
            try:
                with forwarding_scope():
                    response = await send(*call.args, **call.kwargs)
                break
            except BaseException as exc:
                if call.drop_stream_usage(exc):
                    continue
                call.fail(exc)  # its send is over too
                raise
        call.sent = True  # the call's first snapshot may be recorded now (call.py, `_in_order`)
    return observe(call, response)


def _without_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    for key in OPTIONS:
        kwargs.pop(key, None)
    return kwargs


def estimate(*args: Any, **kwargs: Any) -> Snapshot:
    """The local snapshot of a request, without calling anything.

    Takes `completion`'s arguments, or `responses`' (``input=`` without ``messages=``).
    Raises only `TagError`, for a malformed tag: any other failure is a snapshot with the warning
    ``estimate_failed`` (and a log line), as a call would publish it.
    """
    runtime = get_runtime()
    try:
        parsed, est = _local_estimate(runtime, for_estimate(args, kwargs), args, kwargs)
        by_source, model, codes = est.by_source, parsed.model, set(est.warnings) | parsed.warnings
        tools, repeated = est.tools, est.repeated
    except TagError:
        raise
    except Exception as exc:  # noqa: BLE001
        runtime.log.warning("estimate", f"cw_middleware: local estimate failed ({type(exc).__name__})")
        by_source, codes, tools, repeated = {}, {WarningCode.ESTIMATE_FAILED}, NO_TOOLS, ()
        model = kwargs.get("model", args[0] if args else "")
        model = model if isinstance(model, str) else ""
    meta, window_codes = runtime.model_facts.request_meta(
        model,
        kwargs.get("custom_llm_provider"),
        kwargs.get(OPTION_CONTEXT_WINDOW),
        current_stage(),
        context_windows=runtime.config.context_windows,
        log=runtime.log,
    )
    return build_snapshot(
        by_source,
        meta,
        CountMethod.LOCAL_ESTIMATE,
        codes | window_codes,
        max_details=runtime.config.max_details,
        parts=runtime.parts,
        tools=tools,
        max_tools=runtime.config.max_tools,
        repeated=repeated,
    )


def _local_estimate(runtime: Runtime, api: Api, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Parsed, Estimate]:
    """The step `estimate()` and every call share: the request as the estimator reads it, and its count."""
    parsed = api.parse(args, kwargs)
    return parsed, runtime.estimator.estimate(parsed.model, parsed.messages, api=parsed.api, **parsed.options)


def snapshots() -> list[Snapshot]:
    """Recent snapshots of this process (bounded by snapshot_history), newest last."""
    return get_runtime().snapshots()


def _is_stream(response: Any) -> bool:
    kind = type(response)  # the type's, not the instance's: a pydantic response's __getattr__ is slow
    return hasattr(kind, "__next__") or hasattr(kind, "__anext__")


def _observe(call: Call, response: Any) -> Any:
    """Reconcile a response (or re-class a stream so that its end reconciles); returns what LiteLLM returned."""
    try:
        if _is_stream(response):
            return _observe_stream(response, call)
        call.finish_response(response)
    except Exception as exc:  # noqa: BLE001
        call.runtime.log.warning("observe", f"cw_middleware: could not read the response ({type(exc).__name__})")
        if call.hide_usage_chunk:  # we asked for a usage chunk the caller did not: it must still not see it
            return _UsageChunkFilter(response, call.api)
    return response


class _ObservedClasses:
    """Stream class -> its observed subclass, made once each (a part of the process state, see _kernel/process.py)."""

    def __init__(self) -> None:
        self.by_base: dict[type, type] = {}

    def after_fork_in_child(self) -> None:
        pass  # classes, no lock: the child's streams use the same ones


def _observe_stream(stream: Any, call: Call) -> Any:
    """The same stream object, re-classed so that iterating it also observes its chunks.

    Re-classing (rather than wrapping) keeps every attribute and isinstance check
    of LiteLLM's CustomStreamWrapper intact for the caller.
    """
    base = type(stream)
    classes = PROCESS.part(_ObservedClasses).by_base
    cls = classes.get(base)
    if cls is None:
        cls = classes.setdefault(
            base, type(f"Observed{base.__name__}", (base,), {"__next__": _observed_next, "__anext__": _observed_anext})
        )
    stream.__class__ = cls
    stream._cw_call = call
    # A caller may stop reading early and drop the stream: end the call when it is collected.
    weakref.finalize(stream, call.finish_stream).atexit = False  # at exit, flush() has had its say
    return stream


class _UsageChunkFilter:
    """Fallback when a stream cannot be observed: the caller's chunks stay as LiteLLM would give them."""

    def __init__(self, stream: Any, api: Api) -> None:
        self._stream = stream
        self._api = api

    def __iter__(self) -> _UsageChunkFilter:
        return self

    def __aiter__(self) -> _UsageChunkFilter:
        return self

    def __next__(self) -> Any:
        while True:
            chunk = next(self._stream)
            if not _usage_only(self._api, chunk):
                return chunk

    async def __anext__(self) -> Any:
        while True:
            chunk = await self._stream.__anext__()
            if not _usage_only(self._api, chunk):
                return chunk


def _usage_only(api: Api, chunk: Any) -> bool:
    try:
        return api.read(chunk).usage_only
    except Exception:  # noqa: BLE001
        return False


def _observed_next(self: Any) -> Any:
    call: Call = self._cw_call
    while True:
        try:
            chunk = super(type(self), self).__next__()
        except StopIteration:
            call.finish_stream()
            raise
        except BaseException as exc:
            call.fail(exc)
            raise
        if call.see_chunk(chunk):
            return chunk


async def _observed_anext(self: Any) -> Any:
    call: Call = self._cw_call
    while True:
        try:
            chunk = await super(type(self), self).__anext__()
        except StopAsyncIteration:
            call.finish_stream()
            raise
        except BaseException as exc:
            call.fail(exc)
            raise
        if call.see_chunk(chunk):
            return chunk
