"""The LiteLLM drop-in: completion / acompletion and responses / aresponses (streams included), and estimate().

Each call runs one `_Call`, whatever the API: read the request and estimate it
locally, strip the tags, publish the ``local_estimate`` snapshot, start a
background provider count where the policy asks for one, forward the clean
request to LiteLLM, and reconcile with the response's usage (for streams: the
terminal usage chunk or event). What differs between Chat Completions and the
Responses API is the adapter's (``apis/``). Only a caller mistake (a bad tag)
raises; any other failure inside the middleware is logged, and the LLM call
proceeds as LiteLLM would run it.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Optional

from ._litellm import forwarding, forwarding_scope, mark_observed, original
from .apis import API_OF, Api, Forward, Parsed, Usage, for_estimate
from .apis.chat import refused_stream_usage, remember_refusal
from .config import MAX_CONTEXT_WINDOW, ProviderCountPolicy, StreamUsagePolicy, parse_policy, parse_stream_usage
from .contract import CountMethod, Snapshot, WarningCode
from .errors import ConfigError, TagError
from .estimator import Estimate
from .rules import _tiktoken, split_provider
from .runtime import Runtime, get_runtime
from .snapshot import RequestMeta, build_snapshot
from .stages import current_stage, default_stage
from .tags import check_tags
from .telemetry import CallTelemetry, StageInfo

# Per-call options of ours; removed before LiteLLM sees the request.
OPTION_CONTEXT_WINDOW = "cw_context_window"
OPTION_PROVIDER_COUNT = "cw_provider_count"
OPTION_STREAM_USAGE = "cw_stream_usage"
_OPTIONS = (OPTION_CONTEXT_WINDOW, OPTION_PROVIDER_COUNT, OPTION_STREAM_USAGE)

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
    with _tiktoken.CALLS_IN_FLIGHT:
        call = _Call.start(API_OF[name], args, kwargs)
        while True:
            try:
                with forwarding_scope():
                    response = original(name)(*call.args, **call.kwargs)
                break
            except BaseException as exc:
                if call.drop_stream_usage(exc):
                    continue  # the endpoint refused the stream_options we added: once more, as the caller wrote it
                call.fail(exc)
                raise
    return call.observe(response)


async def _aforward(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if forwarding():
        return await original(name)(*args, **_without_options(kwargs))
    with _tiktoken.CALLS_IN_FLIGHT:
        call = _Call.start(API_OF[name], args, kwargs)
        while True:
            try:
                with forwarding_scope():
                    response = await original(name)(*call.args, **call.kwargs)
                break
            except BaseException as exc:
                if call.drop_stream_usage(exc):
                    continue
                call.fail(exc)
                raise
    return call.observe(response)


def _without_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    for key in _OPTIONS:
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
    except TagError:
        raise
    except Exception as exc:  # noqa: BLE001
        runtime.log.warning("estimate", f"cw_middleware: local estimate failed ({type(exc).__name__})")
        by_source, codes = {}, {WarningCode.ESTIMATE_FAILED}
        model = kwargs.get("model", args[0] if args else "")
        model = model if isinstance(model, str) else ""
    meta, window_codes = _meta(
        runtime, model, kwargs.get("custom_llm_provider"), kwargs.get(OPTION_CONTEXT_WINDOW), current_stage()
    )
    return build_snapshot(
        by_source,
        meta,
        CountMethod.LOCAL_ESTIMATE,
        codes | window_codes,
        max_details=runtime.config.max_details,
        parts=runtime.parts,
    )


def _local_estimate(runtime: Runtime, api: Api, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Parsed, Estimate]:
    """The step `estimate()` and every call share: the request as the estimator reads it, and its count."""
    parsed = api.parse(args, kwargs)
    return parsed, runtime.estimator.estimate(parsed.model, parsed.messages, api=parsed.api, **parsed.options)


def snapshots() -> list[Snapshot]:
    """Recent snapshots of this process (bounded by snapshot_history), newest last."""
    return get_runtime().snapshots()


# ---------------------------------------------------------------- one call


class _Call:
    """Everything the middleware knows about one LLM call, from request to usage."""

    def __init__(self, runtime: Runtime, api: Api, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.runtime = runtime
        self.api = api
        self.args = args
        self.kwargs = kwargs
        # Outside any stage a call still exports: into the service's default run (stages.py).
        self.stage = current_stage() or default_stage(runtime.config.service_name)
        self.call_seq = runtime.register_call(self.stage)
        self.parsed: Optional[Parsed] = None
        self.estimate: Optional[Estimate] = None
        self.forward: Optional[Forward] = None
        self.meta = RequestMeta(self.stage.run_id, self.stage.stage_id, None, None, None)
        self.warnings: set[WarningCode] = set()
        self.telemetry: Optional[CallTelemetry] = None
        self.mock = kwargs.get("mock_response") is not None
        # A call whose own preparation failed inside the middleware publishes nothing: a snapshot
        # of a request we could not read would be a wrong number, and a fault on every call a flood.
        self.broken = False
        self.finished = False
        self._stream_usage: Optional[Usage] = None
        self._response_model: Optional[str] = None
        self._lock = threading.Lock()
        self.stream_usage = runtime.config.stream_usage is StreamUsagePolicy.AUTO
        # A tokenizer still loading: the request (value copies) whose estimate runs on the runtime's
        # deferred worker, and what the call did meanwhile (its end), replayed after the estimate.
        self._later: Optional[tuple[Any, dict[str, Any]]] = None
        self._after_estimate: Optional[Any] = None
        self._options: dict[str, Any] = {}

    @property
    def hide_usage_chunk(self) -> bool:
        return self.forward is not None and self.forward.hide_usage

    @classmethod
    def start(cls, api: Api, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Call:
        options = {k: kwargs.pop(k) for k in _OPTIONS if k in kwargs}
        runtime = get_runtime()  # never raises: a broken environment gets a no-op runtime and a log line
        call = cls(runtime, api, args, kwargs)
        call._estimate()  # raises TagError for a malformed hand-made tag: the caller's mistake
        try:
            call._prepare(options)
        except TagError:
            raise
        except Exception as exc:  # noqa: BLE001
            runtime.log.warning("prepare", f"cw_middleware: could not prepare a snapshot ({type(exc).__name__})")
            call.broken = True
        if call.forward is None:  # preparation failed before the request was rewritten: tags still go
            call._rewrite(provider=None)
        return call

    def _estimate(self) -> None:
        try:
            self.parsed = parsed = self.api.parse(self.args, self.kwargs)
            with _tiktoken.without_waiting():  # the first calls of a process never wait for a tokenizer to load
                self.estimate = self.runtime.estimator.estimate(parsed.model, parsed.messages, api=parsed.api, **parsed.options)
            self.warnings |= self.estimate.warnings | parsed.warnings
        except _tiktoken.NotReady:
            self._estimate_later()
        except TagError:
            raise
        except Exception as exc:  # noqa: BLE001
            self.runtime.log.warning("estimate", f"cw_middleware: local estimate failed ({type(exc).__name__})")
            self.broken = True

    def _estimate_later(self) -> None:
        """Keep value copies of what the estimate reads: the caller may change its lists once the call returns."""
        parsed = self.parsed
        assert parsed is not None
        options = dict(parsed.options)
        check_tags(parsed.messages, [*(options.get("tools") or ()), *(options.get("functions") or ())])
        for key in ("tools", "functions"):
            if options.get(key):
                options[key] = self.runtime.estimator.frozen(options[key])
        self._later = (self.runtime.estimator.frozen(parsed.messages or []), options)

    def _run_later(self) -> None:
        """On the deferred worker: the estimate (waiting for the tokenizer), its snapshot, then the call's end."""
        assert self._later is not None and self.parsed is not None
        messages, options = self._later
        try:
            self.estimate = self.runtime.estimator.estimate(self.parsed.model, messages, api=self.parsed.api, **options)
            self.warnings |= self.estimate.warnings | self.parsed.warnings
        except Exception as exc:  # noqa: BLE001
            self.runtime.log.warning("estimate", f"cw_middleware: local estimate failed ({type(exc).__name__})")
            self.broken = True
        if not self.broken:
            self._start_provider_count(self._options.get(OPTION_PROVIDER_COUNT))
            self._publish(CountMethod.LOCAL_ESTIMATE)
        with self._lock:
            self._later = None
            after, self._after_estimate = self._after_estimate, None
        if after is not None:
            after()

    def _rewrite(self, provider: Optional[str]) -> None:
        """The request as LiteLLM must get it; never fails (an unreadable one goes out as given)."""
        try:
            parsed = self.parsed or self.api.parse(self.args, self.kwargs)
            self.forward = self.api.forward(self.args, self.kwargs, parsed, self.estimate, provider, self.stream_usage)
        except Exception as exc:  # noqa: BLE001 - not a request we can read: LiteLLM's to judge, untouched
            self.runtime.log.warning("rewrite", f"cw_middleware: could not read the request ({type(exc).__name__})")
            self.forward = Forward(self.args, self.kwargs)
            self.broken = True
        self.args, self.kwargs = self.forward.args, self.forward.kwargs

    @property
    def model(self) -> str:
        return self.parsed.model if self.parsed is not None else ""

    def _prepare(self, options: dict[str, Any]) -> None:
        runtime, kwargs = self.runtime, self.kwargs
        if options.get(OPTION_STREAM_USAGE) is not None:
            try:
                self.stream_usage = parse_stream_usage(options[OPTION_STREAM_USAGE]) is StreamUsagePolicy.AUTO
            except ConfigError:  # the configured policy applies, and a log line says why
                runtime.log.warning("stream_usage", f"cw_middleware: ignoring {OPTION_STREAM_USAGE}: use 'auto' or 'never'")
        self.meta, window_codes = _meta(
            runtime, self.model, kwargs.get("custom_llm_provider"), options.get(OPTION_CONTEXT_WINDOW), self.stage
        )
        self._rewrite(self.meta.provider)
        if self.broken:
            return
        self.warnings |= window_codes
        self.telemetry = runtime.telemetry.start_call(self.api.operation, self.meta.provider, self.meta.model, self.stage)
        self.warnings |= runtime.take_deferred(self.stage)
        if self._later is not None:
            self._options = options
            if not runtime.estimator.deferred.submit(self._run_later):
                runtime.log.warning("deferred", "cw_middleware: too many calls wait for a tokenizer; this one is not estimated")
                self._later = None
                self.broken = True
            return
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
        assert self.estimate is not None and self.forward is not None
        if policy is ProviderCountPolicy.NEVER or (policy is ProviderCountPolicy.AUTO and self.estimate.rules.exact):
            return
        if self.mock and policy is not ProviderCountPolicy.ALWAYS:
            return  # a mocked call sends nothing upstream unless a count was asked for explicitly
        from . import counting  # imports httpx: only calls that may count pay for it, not the read side

        target = counting.target_for(self.meta.provider, self.model, self.kwargs)
        if target is None:
            self.warnings.add(WarningCode.PROVIDER_UNCONFIGURED)
            return
        # The clean (untagged) request, as the provider will see it.
        request = self.api.count_request(self.forward, self.model)
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
                attributes = self.runtime.telemetry.metric_attributes(self.meta.provider, self.meta.model, self.stage)
                self.runtime.telemetry.count_failures.add(1, attributes)
            except Exception:  # noqa: BLE001
                pass
        with self._lock:
            if not self.finished:
                self.warnings.add(failure)  # rides on this call's next snapshot
                return
        self.runtime.defer_warning(self.stage, failure)

    def drop_stream_usage(self, exc: BaseException) -> bool:
        """The provider refused the ``stream_options`` we added (a 400/422 naming it, before any chunk).

        Then the request goes out once more exactly as the caller wrote it, and its endpoint is
        remembered: bare LiteLLM would have streamed, so must we. True when the caller should retry.
        """
        forward = self.forward
        if forward is None or not forward.hide_usage or not refused_stream_usage(exc):
            return False
        self.kwargs.pop("stream_options", None)
        forward.hide_usage = False
        remember_refusal(self.meta.provider, self.kwargs)
        self.runtime.log.warning(
            "stream_options", "cw_middleware: an endpoint refused stream_options; its streams now go out without it"
        )
        return True

    # ------------------------------------------------------------ response

    def observe(self, response: Any) -> Any:
        """Reconcile a response (or wrap a stream so its end reconciles); returns what LiteLLM returned."""
        try:
            if _is_stream(response):
                return _observe_stream(response, self)
            reading = self.api.read(response)
            if reading.unreadable:
                self.runtime.log.warning("usage", "cw_middleware: could not read a response's usage")
            self.finish(reading.usage, reading.model)
        except Exception as exc:  # noqa: BLE001
            self.runtime.log.warning("observe", f"cw_middleware: could not read the response ({type(exc).__name__})")
            if self.hide_usage_chunk:  # we asked for a usage chunk the caller did not: it must still not see it
                return _UsageChunkFilter(response, self.api)
        return response

    def see_chunk(self, chunk: Any) -> bool:
        """Note a chunk's (or event's) usage and model; False when the chunk is ours to swallow."""
        try:
            reading = self.api.read(chunk)
            if reading.unreadable:
                self.runtime.log.warning("usage", "cw_middleware: could not read a stream's usage")
            if reading.usage is not None:
                self._stream_usage = reading.usage
            if reading.model is not None:
                self._response_model = reading.model
            return not (self.hide_usage_chunk and reading.usage_only)
        except Exception:  # noqa: BLE001
            return True

    def finish_stream(self) -> None:
        self.finish(self._stream_usage, self._response_model)

    def finish(self, usage: Optional[Usage], response_model: Optional[str]) -> None:
        with self._lock:
            if self.finished:
                return
            self.finished = True
            if self._later is not None:  # the estimate is still coming: end the call after it, at this time
                end_time = time.time_ns()
                self._after_estimate = lambda: self._finish(usage, response_model, end_time)
                return
        self._finish(usage, response_model)

    def _finish(self, usage: Optional[Usage], response_model: Optional[str], end_time: Optional[int] = None) -> None:
        try:
            total = None if self.mock or usage is None else usage.input_tokens
            if self.mock:
                self.warnings.add(WarningCode.MOCK_USAGE_NOT_RECONCILED)
                self._publish(CountMethod.LOCAL_ESTIMATE)
            elif total is None:
                self.warnings.add(WarningCode.USAGE_MISSING)
                self._publish(CountMethod.LOCAL_ESTIMATE)
            else:
                prefix_total = usage.cache_prefix_tokens if usage is not None else None
                self._publish(CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN, total=total, cache_prefix_total=prefix_total)
            if self.telemetry is not None:
                self.telemetry.end(
                    response_model=response_model,
                    input_tokens=total,
                    output_tokens=None if self.mock or usage is None else usage.output_tokens,
                    cache_read_tokens=None if usage is None else usage.cache_read_tokens,
                    end_time=end_time,
                )
        except Exception as exc:  # noqa: BLE001
            self.runtime.log.warning("finish", f"cw_middleware: could not reconcile usage ({type(exc).__name__})")

    def fail(self, exc: BaseException) -> None:
        with self._lock:
            if self.finished:
                return
            self.finished = True
            if self._later is not None:
                end_time = time.time_ns()
                self._after_estimate = lambda: self._fail(exc, end_time)
                return
        self._fail(exc)

    def _fail(self, exc: BaseException, end_time: Optional[int] = None) -> None:
        try:
            if self.telemetry is not None:
                self.telemetry.end(error=exc, end_time=end_time)
        except Exception as inner:  # noqa: BLE001
            self.runtime.log.warning("fail", f"cw_middleware: could not end the call span ({type(inner).__name__})")

    def _publish(
        self, method: CountMethod, total: Optional[int] = None, superseded: bool = False, cache_prefix_total: Optional[int] = None
    ) -> None:
        if self.broken or self.estimate is None:
            return
        try:
            snap = build_snapshot(
                self.estimate.by_source,
                self.meta,
                method,
                set(self.warnings),
                total=total,
                max_details=self.runtime.config.max_details,
                unestimated=self.estimate.unestimated,
                parts=self.runtime.parts,
                cache_prefix=self.estimate.cache_prefix,
                cache_prefix_total=cache_prefix_total,
            )
            self.runtime.publish(snap, self.telemetry, self.stage, superseded=superseded)
        except Exception as exc:  # noqa: BLE001
            self.runtime.log.warning("publish", f"cw_middleware: could not build a snapshot ({type(exc).__name__})")


# ---------------------------------------------------------------- helpers


def _meta(
    runtime: Runtime, model: str, custom_llm_provider: Optional[str], window_override: Any, st: Optional[StageInfo]
) -> tuple[RequestMeta, set[WarningCode]]:
    """What the snapshots say about the request, and the warnings that go with it (the window's)."""
    provider, name, window = _model_facts(model, custom_llm_provider)
    codes: set[WarningCode] = set()
    configured = _configured_window(runtime.config.context_windows, model, name, provider)
    override = _window_override(window_override)
    if override is not None:
        window = override
    else:
        if window_override is not None:  # given, but not a window: the caller hears why, the call goes on
            codes.add(WarningCode.INVALID_CONTEXT_WINDOW)
            message = (
                f"cw_middleware: ignoring {OPTION_CONTEXT_WINDOW}: use a whole number of tokens from 1 to {MAX_CONTEXT_WINDOW}"
            )
            runtime.log.warning("window", message)
        if configured is not None:
            window = configured
    if window is None:
        codes.add(WarningCode.UNKNOWN_CONTEXT_WINDOW)
    return RequestMeta(st.run_id if st else None, st.stage_id if st else None, provider, name or None, window), codes


def _window_override(value: Any) -> Optional[int]:
    """``cw_context_window``: an int or a string of digits ("2000"), 1 to MAX_CONTEXT_WINDOW; anything else is not a window."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        value = int(text) if text.isascii() and text.isdigit() and len(text) <= 10 else None  # "²" is a digit to isdigit
    return value if isinstance(value, int) and 0 < value <= MAX_CONTEXT_WINDOW else None


def _configured_window(configured: Mapping[str, int], model: str, name: str, provider: Optional[str]) -> Optional[int]:
    """``context_windows`` by the model as written first, then with or without its provider prefix."""
    if not configured:
        return None
    candidates = [model, name]
    if "/" in model:
        candidates.append(model.split("/", 1)[1])
    if provider:
        candidates.append(f"{provider}/{name}")
    return next((configured[key] for key in candidates if key in configured), None)


@lru_cache(maxsize=512)
def _model_facts(model: str, custom_llm_provider: Optional[str]) -> tuple[Optional[str], str, Optional[int]]:
    """(provider, model name, max input tokens) from LiteLLM's model map; unknown models get (family guess, model, None).

    The one place model names are normalised, for spans, snapshots and metric labels alike:
    the provider goes to gen_ai.provider.name and the model is named as the provider names
    it, without LiteLLM's routing prefix, so ``openai/gpt-4o`` and ``gpt-4o`` are one series
    (``gpt-4o``, provider ``openai``). A model LiteLLM does not know keeps its name as written.
    """
    from ._offline import litellm as _import_litellm

    litellm = _import_litellm()  # offline on first import, without leaving a variable behind

    provider: Optional[str]
    name = model
    try:
        name, provider = litellm.get_llm_provider(model, custom_llm_provider=custom_llm_provider)[:2]
    except Exception:  # noqa: BLE001 - unknown to LiteLLM: fall back to our family guess
        provider = split_provider(model, custom_llm_provider)[0]
        provider = None if provider == "unknown" else provider
    try:
        info = litellm.get_model_info(model, custom_llm_provider=custom_llm_provider)
        window = info.get("max_input_tokens") or info.get("max_tokens")
    except Exception:  # noqa: BLE001
        window = None
    return provider, str(name or model), int(window) if window else None


def _is_stream(response: Any) -> bool:
    kind = type(response)  # the type's, not the instance's: a pydantic response's __getattr__ is slow
    return hasattr(kind, "__next__") or hasattr(kind, "__anext__")


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
