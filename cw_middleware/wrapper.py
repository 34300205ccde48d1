"""The LiteLLM drop-in: completion / acompletion (streams included), stage() and estimate().

Each call runs one `_Call`: split the tags from the request, estimate locally,
publish the ``local_estimate`` snapshot, start a background provider count
where the policy asks for one, forward the clean request to LiteLLM, and
reconcile with the response's usage (for streams: the terminal usage chunk).
Only a caller mistake (a bad tag) raises; any other failure inside the
middleware becomes a warning, and the LLM call proceeds as LiteLLM would run it.
"""

from __future__ import annotations

import contextvars
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Optional

from ._litellm import original
from .config import ProviderCountPolicy, parse_policy
from .contract import CountMethod, Snapshot, WarningCode, validate_id
from .errors import ConfigError, TagError
from .estimator import Estimate, strip_request, strip_tools
from .reconcile import usage_input_tokens
from .rules import split_provider
from .runtime import Runtime, get_runtime
from .snapshot import RequestMeta, build_snapshot
from .telemetry import CallTelemetry, StageInfo

# Per-call options of ours; removed before LiteLLM sees the request.
OPTION_CONTEXT_WINDOW = "cw_context_window"
OPTION_PROVIDER_COUNT = "cw_provider_count"
_OPTIONS = (OPTION_CONTEXT_WINDOW, OPTION_PROVIDER_COUNT)
_ESTIMATE_KEYS = ("tools", "tool_choice", "response_format", "functions", "custom_llm_provider")
# Providers whose streams report usage when asked with stream_options.include_usage.
_STREAM_USAGE_PROVIDERS = frozenset({"openai", "azure", "text-completion-openai", "openai_compatible", "hosted_vllm"})

_current_stage: contextvars.ContextVar[Optional[StageInfo]] = contextvars.ContextVar("cw_stage", default=None)


# ---------------------------------------------------------------- stages


@contextmanager
def stage(run_id: str, stage_id: str, kind: str = "agent") -> Iterator[StageInfo]:
    """Attribute the calls inside to (run_id, stage_id); opens the stage span. Sync and async safe."""
    for name, value in (("run_id", run_id), ("stage_id", stage_id), ("kind", kind)):
        validate_id(name, value)  # the same rule the readers apply: what is written can be read
    outer = _current_stage.get()
    if outer is not None and (outer.run_id, outer.stage_id) == (run_id, stage_id):
        # Its inner end would make the still-running outer stage read as ended.
        raise ConfigError(f"stage {stage_id!r} of run {run_id!r} is already open here; give the inner stage its own id")
    info = StageInfo(run_id, stage_id, kind)
    token = _current_stage.set(info)
    try:
        with get_runtime().telemetry.stage_span(info):
            yield info
    finally:
        _current_stage.reset(token)


def current_stage() -> Optional[StageInfo]:
    return _current_stage.get()


# ---------------------------------------------------------------- entry points


def completion(*args: Any, **kwargs: Any) -> Any:
    """`litellm.completion`, observed. Same arguments, same return value."""
    call = _Call.start(args, kwargs)
    try:
        response = original("completion")(*call.args, **call.kwargs)
    except BaseException as exc:
        call.fail(exc)
        raise
    return call.observe(response)


async def acompletion(*args: Any, **kwargs: Any) -> Any:
    """`litellm.acompletion`, observed. Same arguments, same return value."""
    call = _Call.start(args, kwargs)
    try:
        response = await original("acompletion")(*call.args, **call.kwargs)
    except BaseException as exc:
        call.fail(exc)
        raise
    return call.observe(response)


def estimate(*args: Any, **kwargs: Any) -> Snapshot:
    """The local snapshot of a request, without calling anything. Takes `completion`'s arguments."""
    runtime = get_runtime()
    model, messages = _model_and_messages(args, kwargs)
    window_override = kwargs.get(OPTION_CONTEXT_WINDOW)
    est = runtime.estimator.estimate(model, messages, **{k: kwargs.get(k) for k in _ESTIMATE_KEYS})
    meta = _meta(runtime, model, kwargs.get("custom_llm_provider"), window_override, current_stage())
    codes = set(est.warnings)
    if meta.context_window_tokens is None:
        codes.add(WarningCode.UNKNOWN_CONTEXT_WINDOW)
    return build_snapshot(est.by_source, meta, CountMethod.LOCAL_ESTIMATE, codes, max_details=runtime.config.max_details)


def snapshots() -> list[Snapshot]:
    """Recent snapshots of this process (bounded by snapshot_history), newest last."""
    return get_runtime().snapshots()


# ---------------------------------------------------------------- one call


class _Call:
    """Everything the middleware knows about one LLM call, from request to usage."""

    def __init__(self, runtime: Runtime, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.runtime = runtime
        self.args = args
        self.kwargs = kwargs
        self.stage = current_stage()
        self.call_seq = runtime.register_call(self.stage)
        self.estimate: Optional[Estimate] = None
        st = self.stage
        self.meta = RequestMeta(st.run_id if st else None, st.stage_id if st else None, None, None, None)
        self.warnings: set[WarningCode] = set()
        self.telemetry: Optional[CallTelemetry] = None
        self.mock = kwargs.get("mock_response") is not None
        self.finished = False
        self._stream_usage: Any = None
        self.hide_usage_chunk = False
        self._response_model: Optional[str] = None
        self._lock = threading.Lock()

    @classmethod
    def start(cls, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Call:
        options = {k: kwargs.pop(k) for k in _OPTIONS if k in kwargs}
        runtime = get_runtime()  # never raises: a broken environment gets a no-op runtime and a log line
        call = cls(runtime, args, kwargs)
        call._estimate()  # raises TagError for a malformed hand-made tag: the caller's mistake
        call._strip_tags()
        try:
            call._prepare(options)
        except TagError:
            raise
        except Exception as exc:  # noqa: BLE001
            runtime.log.warning("prepare", f"cw_middleware: could not prepare a snapshot ({type(exc).__name__})")
            call.warnings.add(WarningCode.ESTIMATE_FAILED)
        return call

    def _estimate(self) -> None:
        self._model, self._messages = _model_and_messages(self.args, self.kwargs)
        self._tools = self.kwargs.get("tools")
        try:
            request = {k: self.kwargs.get(k) for k in _ESTIMATE_KEYS}
            self.estimate = self.runtime.estimator.estimate(self._model, self._messages, **request)
            self.warnings |= self.estimate.warnings
        except TagError:
            raise
        except Exception as exc:  # noqa: BLE001
            self.runtime.log.warning("estimate", f"cw_middleware: local estimate failed ({type(exc).__name__})")
            self.warnings.add(WarningCode.ESTIMATE_FAILED)

    def _strip_tags(self) -> None:
        """Tags never reach the provider: with an estimate only its tagged messages are copied, else all are checked."""
        messages, tools = self._messages, self._tools
        try:
            clean_messages, clean_tools = strip_request(messages, tools, known=self.estimate)
        except Exception:  # noqa: BLE001 - an odd request shape: fall back to checking every message
            try:
                clean_messages, clean_tools = strip_request(messages, tools)
            except Exception:  # noqa: BLE001 - not a list of messages at all: LiteLLM's to reject, untouched
                return
        if clean_messages is not messages:
            if len(self.args) >= 2:
                self.args = (self.args[0], clean_messages, *self.args[2:])
            else:
                self.kwargs["messages"] = clean_messages
        if clean_tools is not tools:
            self.kwargs["tools"] = clean_tools
        functions = self.kwargs.get("functions")
        clean_functions = strip_tools(functions)
        if clean_functions is not functions:
            self.kwargs["functions"] = clean_functions

    def _prepare(self, options: dict[str, Any]) -> None:
        runtime, kwargs = self.runtime, self.kwargs
        self.meta = _meta(runtime, self._model, kwargs.get("custom_llm_provider"), options.get(OPTION_CONTEXT_WINDOW), self.stage)
        if self.meta.context_window_tokens is None:
            self.warnings.add(WarningCode.UNKNOWN_CONTEXT_WINDOW)
        if kwargs.get("stream") and "stream_options" not in kwargs and self.meta.provider in _STREAM_USAGE_PROVIDERS:
            kwargs["stream_options"] = {"include_usage": True}
            self.hide_usage_chunk = True  # the caller did not ask for it: keep their stream as it was
        self.telemetry = runtime.telemetry.start_call("chat", self.meta.provider, self._model, self.stage)
        self.warnings |= runtime.take_deferred(self.stage)
        if self.estimate is not None:
            self._start_provider_count(options.get(OPTION_PROVIDER_COUNT))
        self._publish(CountMethod.LOCAL_ESTIMATE)

    # ------------------------------------------------------------ provider count

    def _start_provider_count(self, per_call_policy: Any) -> None:
        """Queue a background count where the policy asks for one; never waits for it."""
        policy = self.runtime.config.provider_count
        if per_call_policy is not None:
            try:
                policy = parse_policy(per_call_policy)
            except ConfigError:  # the call still goes out, with the configured policy and a log line saying why
                message = f"cw_middleware: ignoring {OPTION_PROVIDER_COUNT}: use 'auto', 'always' or 'never'"
                self.runtime.log.warning("policy", message)
        assert self.estimate is not None
        if policy is ProviderCountPolicy.NEVER or (policy is ProviderCountPolicy.AUTO and self.estimate.rules.exact):
            return
        if self.mock and policy is not ProviderCountPolicy.ALWAYS:
            return  # a mocked call sends nothing upstream unless a count was asked for explicitly
        from . import counting  # imports httpx: only calls that may count pay for it, not the read side

        target = counting.target_for(self.meta.provider, self._model, self.kwargs)
        if target is None:
            self.warnings.add(WarningCode.PROVIDER_UNCONFIGURED)
            return
        # The clean (untagged) request, as the provider will see it.
        messages = self.kwargs.get("messages", self.args[1] if len(self.args) > 1 else None)
        request: dict[str, Any] = {"model": self._model, "messages": messages}
        for key in ("tools", "tool_choice", "response_format"):
            if self.kwargs.get(key) is not None:
                request[key] = self.kwargs[key]
        self.runtime.counter().submit(target, request, self._on_provider_count)

    def _on_provider_count(self, tokens: Optional[int], failure: Optional[WarningCode]) -> None:
        """Runs on the counter's worker thread (or, for a full queue, inside submit)."""
        if tokens is not None:
            # A count that lands after a newer call of the stage began is kept but never "latest".
            superseded = not self.runtime.is_newest_call(self.stage, self.call_seq)
            self._publish(CountMethod.PROVIDER_API_SCALED_BREAKDOWN, total=tokens, superseded=superseded)
            return
        if failure is None:
            return
        if self.telemetry is not None:
            try:
                attributes = self.runtime.telemetry.metric_attributes(self.meta.provider, self._model, self.stage)
                self.runtime.telemetry.count_failures.add(1, attributes)
            except Exception:  # noqa: BLE001
                pass
        with self._lock:
            if not self.finished:
                self.warnings.add(failure)  # rides on this call's next snapshot
                return
        self.runtime.defer_warning(self.stage, failure)

    # ------------------------------------------------------------ response

    def observe(self, response: Any) -> Any:
        """Reconcile a response (or wrap a stream so its end reconciles); returns what LiteLLM returned."""
        try:
            if _is_stream(response):
                return _observe_stream(response, self)
            self.finish(getattr(response, "usage", None), getattr(response, "model", None))
        except Exception as exc:  # noqa: BLE001
            self.runtime.log.warning("observe", f"cw_middleware: could not read the response ({type(exc).__name__})")
            if self.hide_usage_chunk:  # we asked for a usage chunk the caller did not: it must still not see it
                return _UsageChunkFilter(response)
        return response

    def see_chunk(self, chunk: Any) -> bool:
        """Note a chunk's usage and model; False when the chunk is ours to swallow."""
        try:
            usage = getattr(chunk, "usage", None)
            if usage is not None:
                self._stream_usage = usage
            model = getattr(chunk, "model", None)
            if isinstance(model, str):
                self._response_model = model
            return not (self.hide_usage_chunk and usage is not None and not getattr(chunk, "choices", None))
        except Exception:  # noqa: BLE001
            return True

    def finish_stream(self) -> None:
        self.finish(self._stream_usage, self._response_model)

    def finish(self, usage: Any, response_model: Optional[str]) -> None:
        with self._lock:
            if self.finished:
                return
            self.finished = True
        try:
            total = None if self.mock else usage_input_tokens(usage)
            if self.mock:
                self.warnings.add(WarningCode.MOCK_USAGE_NOT_RECONCILED)
                self._publish(CountMethod.LOCAL_ESTIMATE)
            elif total is None:
                self.warnings.add(WarningCode.USAGE_MISSING)
                self._publish(CountMethod.LOCAL_ESTIMATE)
            else:
                self._publish(CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN, total=total)
            if self.telemetry is not None:
                details = getattr(usage, "prompt_tokens_details", None)
                self.telemetry.end(
                    response_model=response_model,
                    input_tokens=total,
                    output_tokens=None if self.mock else getattr(usage, "completion_tokens", None),
                    cache_read_tokens=getattr(details, "cached_tokens", None),
                )
        except Exception as exc:  # noqa: BLE001
            self.runtime.log.warning("finish", f"cw_middleware: could not reconcile usage ({type(exc).__name__})")

    def fail(self, exc: BaseException) -> None:
        with self._lock:
            if self.finished:
                return
            self.finished = True
        try:
            if self.telemetry is not None:
                self.telemetry.end(error=exc)
        except Exception as inner:  # noqa: BLE001
            self.runtime.log.warning("fail", f"cw_middleware: could not end the call span ({type(inner).__name__})")

    def _publish(self, method: CountMethod, total: Optional[int] = None, superseded: bool = False) -> None:
        try:
            est = self.estimate
            snap = build_snapshot(
                est.by_source if est is not None else {},
                self.meta,
                method,
                set(self.warnings),
                total=total,
                max_details=self.runtime.config.max_details,
                unestimated=est.unestimated if est is not None else None,
            )
            self.runtime.publish(snap, self.telemetry, self.stage, superseded=superseded)
        except Exception as exc:  # noqa: BLE001
            self.runtime.log.warning("publish", f"cw_middleware: could not build a snapshot ({type(exc).__name__})")


# ---------------------------------------------------------------- helpers


def _model_and_messages(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, Any]:
    model = kwargs.get("model", args[0] if args else None)
    messages = kwargs.get("messages", args[1] if len(args) > 1 else None)
    return str(model or ""), messages


def _meta(
    runtime: Runtime, model: str, custom_llm_provider: Optional[str], window_override: Any, st: Optional[StageInfo]
) -> RequestMeta:
    provider, window = _model_facts(model, custom_llm_provider)
    configured = runtime.config.context_windows
    if isinstance(window_override, int) and window_override > 0:
        window = window_override
    elif model in configured:
        window = configured[model]
    return RequestMeta(st.run_id if st else None, st.stage_id if st else None, provider, model or None, window)


@lru_cache(maxsize=512)
def _model_facts(model: str, custom_llm_provider: Optional[str]) -> tuple[Optional[str], Optional[int]]:
    """(provider, max input tokens) from LiteLLM's model map; unknown models get (family guess, None)."""
    from ._offline import litellm as _import_litellm

    litellm = _import_litellm()  # offline on first import, without leaving a variable behind

    provider: Optional[str]
    try:
        provider = litellm.get_llm_provider(model, custom_llm_provider=custom_llm_provider)[1]
    except Exception:  # noqa: BLE001 - unknown to LiteLLM: fall back to our family guess
        provider = split_provider(model, custom_llm_provider)[0]
        provider = None if provider == "unknown" else provider
    try:
        info = litellm.get_model_info(model, custom_llm_provider=custom_llm_provider)
        window = info.get("max_input_tokens") or info.get("max_tokens")
    except Exception:  # noqa: BLE001
        window = None
    return provider, int(window) if window else None


def _is_stream(response: Any) -> bool:
    return hasattr(response, "__next__") or hasattr(response, "__anext__")


_stream_classes: dict[type, type] = {}


def _observe_stream(stream: Any, call: _Call) -> Any:
    """The same stream object, re-classed so that iterating it also observes its chunks.

    Re-classing (rather than wrapping) keeps every attribute and isinstance check
    of LiteLLM's CustomStreamWrapper intact for the caller.
    """
    base = type(stream)
    cls = _stream_classes.get(base)
    if cls is None:
        cls = type(f"Observed{base.__name__}", (base,), {"__next__": _observed_next, "__anext__": _observed_anext})
        _stream_classes[base] = cls
    stream.__class__ = cls
    stream._cw_call = call
    # A caller may stop reading early and drop the stream: end the call when it is collected.
    weakref.finalize(stream, call.finish_stream).atexit = False  # at exit, flush() has had its say
    return stream


class _UsageChunkFilter:
    """Fallback when a stream cannot be observed: the caller's chunks stay as LiteLLM would give them."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __iter__(self) -> _UsageChunkFilter:
        return self

    def __aiter__(self) -> _UsageChunkFilter:
        return self

    def __next__(self) -> Any:
        while True:
            chunk = next(self._stream)
            if not _usage_only(chunk):
                return chunk

    async def __anext__(self) -> Any:
        while True:
            chunk = await self._stream.__anext__()
            if not _usage_only(chunk):
                return chunk


def _usage_only(chunk: Any) -> bool:
    try:
        return getattr(chunk, "usage", None) is not None and not getattr(chunk, "choices", None)
    except Exception:  # noqa: BLE001
        return False


def _observed_next(self: Any) -> Any:
    call: _Call = self._cw_call
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
    call: _Call = self._cw_call
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
