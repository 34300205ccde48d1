"""One LLM call, from request to usage, whatever the API: the lifecycle every entry point runs.

`Call.start` reads the request (the API's adapter, ``apis/``), asks for its local estimate,
strips the tags, opens the call's span and takes the stage's late warnings; the entry points
(wrapper.py) forward the clean request to LiteLLM and hand back what came of it:
`finish_response`, `see_chunk` then `finish_stream` for a stream, or `fail`. Two values carry
the call from step to step:

* its local estimate, a `PendingEstimate` (pending_estimate.py): there at once, or, while a
  tokenizer loads, coming from the runtime's background-estimate worker. What needs it is
  chained onto it: the ``local_estimate`` snapshot and the provider count (`_estimate_ready`), then
  the call's end;
* its end, an `_Ending` (the usage, or the exception LiteLLM raised, and when), which takes one
  path whatever ended the call (`_end`, then `_close` once the estimate is there).

A request that begins with the whole of its stage's previous request (same model), once that call's
response reported its input tokens, publishes a local estimate anchored on them: that provider total
plus the local count of what this request adds, with the warning ``anchored_estimate`` (`_anchored`).

Only a caller mistake (a bad tag) raises; any other failure inside the middleware is logged and
the LLM call proceeds as LiteLLM would run it. A call whose own preparation failed publishes
nothing: a snapshot of a request we could not read would be a wrong number, and a fault on
every call a flood.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Optional

from .._counting.estimator import Estimate, Later
from .._counting.model_facts import OPTION_CONTEXT_WINDOW, RequestMeta, min_cacheable_tokens
from .._counting.rules import rules_for
from .._kernel.contract import Category, CountMethod, WarningCode
from .._kernel.errors import ConfigError, TagError
from .._kernel.values import ProviderCountPolicy, StreamUsagePolicy, parse_policy, parse_stream_usage
from .._snapshots.build import ResponseSide, build_snapshot
from .._snapshots.ledger import PrefixFacts
from .._snapshots.telemetry import CallTelemetry
from .apis import Api, Forward, Parsed, Route, Usage
from .apis.chat import refused_stream_usage, remember_refusal
from .pending_estimate import PendingEstimate, estimate_in_background
from .runtime import Runtime, get_runtime
from .stages import current_stage, default_stage

if TYPE_CHECKING:
    from .._counting.provider_count import CountTarget  # imported when a count is due: it brings httpx

logger = logging.getLogger("cw_middleware")

# Per-call options of ours; removed before LiteLLM sees the request.
OPTION_PROVIDER_COUNT = "cw_provider_count"
OPTION_STREAM_USAGE = "cw_stream_usage"
OPTIONS = (OPTION_CONTEXT_WINDOW, OPTION_PROVIDER_COUNT, OPTION_STREAM_USAGE)
# Seconds a call's first snapshot waits for the call's end: a quick call's goes out with its end, a slow
# one's then, on a carrier span while it still waits for its provider (with the next batch: export_interval_ms,
# 1 s by default).
LIVE_AFTER = 0.25


@dataclass(frozen=True, slots=True)
class _Ending:
    """How a call ended: its usage (a response, a stream's end) or the exception LiteLLM raised, and when."""

    at: int  # ns since the epoch: the span ends then, even when its estimate comes later
    usage: Optional[Usage] = None
    response_model: Optional[str] = None
    error: Optional[BaseException] = None
    tool_calls: tuple[str, ...] = ()  # the tool names the response called
    finish_reasons: tuple[str, ...] = ()
    streamed: Optional[bool] = None  # ended as a stream (True) or a whole response (False); None: failed


class Call:
    """Everything the middleware knows about one LLM call, from request to usage."""

    # Slots: hundreds queue while a tokenizer loads, and what they weigh stays behind as fragmented memory (issue 35).
    __slots__ = (
        "runtime", "api", "args", "kwargs", "options", "route", "endpoint", "stage", "call_seq", "parsed",
        "estimated", "estimate", "forward", "meta", "warnings", "telemetry", "mock", "stream_usage", "broken",
        "ended", "_stream_usage", "_response_model", "_stream_calls", "_stream_reasons", "_response",
        "_local_conversation", "_estimated_at", "_anchor", "_anchor_decided", "_lock", "sent", "_first_steps",
    )  # fmt: skip

    def __init__(
        self,
        runtime: Runtime,
        api: Api,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        options: dict[str, Any],
        route: Optional[Route] = None,
    ):
        self.runtime = runtime
        self.api = api
        self.args = args
        self.kwargs = kwargs
        self.options = options
        # Where the request goes: a LiteLLM request says it in its arguments, an official client's is its route.
        self.route = route
        self.endpoint: Mapping[str, Any] = kwargs if route is None else route.endpoint()
        # Outside any stage a call still exports: into the service's default run (stages.py).
        self.stage = current_stage() or default_stage(runtime.config.service_name)
        self.call_seq = runtime.register_call(self.stage)
        self.parsed: Optional[Parsed] = None
        self.estimated = PendingEstimate.ready(None)  # the local estimate, once `_estimate` asked for it
        self.estimate: Optional[Estimate] = None  # set once it is there (`_estimate_ready`)
        self.forward: Optional[Forward] = None
        self.meta = RequestMeta(self.stage.run_id, self.stage.stage_id, None, None, None)
        self.warnings: set[WarningCode] = set()
        self.telemetry: Optional[CallTelemetry] = None
        self.mock = kwargs.get("mock_response") is not None
        self.stream_usage = runtime.config.stream_usage is StreamUsagePolicy.AUTO
        self.broken = False  # its preparation failed inside the middleware: it publishes nothing
        self.ended = False
        self._stream_usage: Optional[Usage] = None
        self._response_model: Optional[str] = None
        self._stream_calls: list[str] = []
        self._stream_reasons: list[str] = []
        self._response: Optional[ResponseSide] = None  # set at the end: the response's tool calls and cache
        self._local_conversation: Optional[int] = None  # the request's conversation, counted locally (compaction)
        self._estimated_at = 0  # ns since the epoch: when the estimate was there (the local snapshot's time)
        # The local estimate's total anchored on the stage's previous call (`_anchored`): decided once, at the first
        # local snapshot, so that a local estimate published again at the end (no usage) says the same.
        self._anchor: Optional[int] = None
        self._anchor_decided = False
        self._lock = threading.Lock()
        # True once the request's send is over (a response, a stream to read, an error): a first snapshot recorded
        # before that, of a slow call (`_in_order`), is carried out at once on a span of its own. Never waited for.
        self.sent = False
        # The call's first snapshot and the steps behind it, while they wait for the call's end (`_in_order`).
        self._first_steps: Optional[list[Callable[[], None]]] = None

    @classmethod
    def start(cls, api: Api, args: tuple[Any, ...], kwargs: dict[str, Any], route: Optional[Route] = None) -> Call:
        """A call begins: ``route`` is an official client's (None: a LiteLLM request, whose arguments name its route)."""
        options = {k: kwargs.pop(k) for k in OPTIONS if k in kwargs}
        runtime = get_runtime()  # never raises: a broken environment gets a no-op runtime and a log line
        call = cls(runtime, api, args, kwargs, options, route)
        call.estimated = call._estimate()  # raises TagError for a malformed hand-made tag: the caller's mistake
        try:
            call._prepare()
        except TagError:
            raise
        except Exception as exc:  # noqa: BLE001
            runtime.log.warning("prepare", f"cw_middleware: could not prepare a snapshot ({type(exc).__name__})")
            call.broken = True
        if call.forward is None:  # preparation failed before the request was rewritten: tags still go
            call._rewrite(provider=None)
        return call

    @property
    def model(self) -> str:
        return self.parsed.model if self.parsed is not None else ""

    @property
    def hide_usage_chunk(self) -> bool:
        return self.forward is not None and self.forward.hide_usage

    def _wire_provider(self) -> Optional[str]:
        """The LiteLLM provider that speaks this request's wire format to its endpoint (stream usage, refusals)."""
        return self.route.wire_provider if self.route is not None else self.meta.provider

    def _parse(self) -> Parsed:
        parsed = self.api.parse(self.args, self.kwargs)
        if self.route is not None:  # the client's route picks the counting rules, as custom_llm_provider does
            parsed = replace(parsed, options={**parsed.options, "custom_llm_provider": self.route.facts_provider})
        return parsed

    # ------------------------------------------------------------ request

    def _estimate(self) -> PendingEstimate:
        try:
            self.parsed = parsed = self._parse()
            try:
                # Never waits: for a tokenizer to load, a background estimate, or a count past the caller's budget.
                estimate = self.runtime.estimator.estimate(
                    parsed.model, parsed.messages, api=parsed.api, now=True, **parsed.options
                )
            except Later:
                return estimate_in_background(self.runtime, parsed)  # a bad tag raises here too
            return PendingEstimate.ready(estimate)
        except TagError:
            raise
        except Exception as exc:  # noqa: BLE001 - the call still gets its span and snapshots, saying estimate_failed
            self.runtime.log.warning("estimate", f"cw_middleware: local estimate failed ({type(exc).__name__})")
            return PendingEstimate.ready(None)

    def _failed_estimate(self) -> Estimate:
        """What a call whose local estimate failed (a schema nested past Python's recursion limit, a circular one)
        publishes: no parts and ``estimate_failed``; its response's usage still gives its total."""
        return Estimate({}, frozenset({WarningCode.ESTIMATE_FAILED}), rules_for(self.model))

    def _prepare(self) -> None:
        runtime, options = self.runtime, self.options
        if options.get(OPTION_STREAM_USAGE) is not None:
            try:
                self.stream_usage = parse_stream_usage(options[OPTION_STREAM_USAGE]) is StreamUsagePolicy.AUTO
            except ConfigError:  # the configured policy applies, and a log line says why
                runtime.log.warning("stream_usage", f"cw_middleware: ignoring {OPTION_STREAM_USAGE}: use 'auto' or 'never'")
        self.meta, window_codes = runtime.model_facts.request_meta(
            self.model,
            self.endpoint.get("custom_llm_provider"),
            options.get(OPTION_CONTEXT_WINDOW),
            self.stage,
            context_windows=runtime.config.context_windows,
            log=runtime.log,
            client_provider=self.route.provider if self.route is not None else None,
        )
        self._rewrite(self._wire_provider())
        if self.broken:
            return
        self.warnings |= window_codes
        self.telemetry = runtime.telemetry.start_call(self.api.operation, self.meta.provider, self.meta.model, self.stage)
        self.warnings |= runtime.take_late_warnings(self.stage)
        self.estimated.then(self._estimate_ready)

    def _rewrite(self, provider: Optional[str]) -> None:
        """The request as LiteLLM must get it; never fails (an unreadable one goes out as given)."""
        try:
            parsed = self.parsed or self._parse()
            # A mock_response's usage is never reconciled (it is LiteLLM's own count), so a mocked stream is not asked
            # for it: asked, LiteLLM's stream wrapper assembles the response twice at the end (once for the usage
            # chunk, once more when the stream stops), counting the whole prompt each time (issue 22 gap 2).
            stream_usage = self.stream_usage and not self.mock
            # The estimate, or the tag check of one made later, names the tagged messages: the others pass without a look.
            tagged = self.estimated.tagged
            self.forward = self.api.forward(self.args, self.kwargs, parsed, tagged, provider, stream_usage, self.endpoint)
        except Exception as exc:  # noqa: BLE001 - not a request we can read: LiteLLM's to judge, untouched
            self.runtime.log.warning("rewrite", f"cw_middleware: could not read the request ({type(exc).__name__})")
            self.forward = Forward(self.args, self.kwargs)
            self.broken = True
        self.args, self.kwargs = self.forward.args, self.forward.kwargs

    def _estimate_ready(self, estimate: Optional[Estimate]) -> None:
        """The estimate is there: the ``local_estimate`` snapshot is queued, and a provider count starts where one is due.

        The count starts at once, so that it may answer while a long call runs; the local snapshot is
        queued before it starts, so the count's snapshot (`_on_provider_count`) always lands behind it,
        even where the local one is recorded later (`_in_order`).
        """
        at = self._estimated_at = time.time_ns()  # the snapshot stands for now, even if recorded later
        if self.parsed is None:  # not a request we can read at all: it went out untouched, unobserved
            self.broken = True
            return
        if estimate is None:
            estimate = self._failed_estimate()
        self.estimate = estimate
        self._local_conversation = sum(n for (c, _), n in estimate.by_source.items() if c is Category.CONVERSATION)
        self.warnings |= estimate.warnings | self.parsed.warnings
        if self.broken:
            return
        count = self._provider_count_due()  # before the local snapshot: its warnings ride on that snapshot
        self._in_order(lambda: self._publish(CountMethod.LOCAL_ESTIMATE, at=at, live=True), first=True)
        if count is not None:
            self.runtime.counter().submit(*count, self._on_provider_count)

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
        remember_refusal(self._wire_provider(), self.endpoint)
        self.runtime.log.warning(
            "stream_options", "cw_middleware: an endpoint refused stream_options; its streams now go out without it"
        )
        return True

    # ------------------------------------------------------------ provider count

    def _provider_count_due(self) -> Optional[tuple[CountTarget, dict[str, Any]]]:
        """(target, clean request) of the background count the policy asks for; None where none is due."""
        policy = self.runtime.config.provider_count
        per_call_policy = self.options.get(OPTION_PROVIDER_COUNT)
        if per_call_policy is not None:
            try:
                policy = parse_policy(per_call_policy)
            except ConfigError:  # the call still goes out, with the configured policy and a log line saying why
                message = f"cw_middleware: ignoring {OPTION_PROVIDER_COUNT}: use 'auto', 'always' or 'never'"
                self.runtime.log.warning("policy", message)
        assert self.estimate is not None and self.forward is not None
        if policy is ProviderCountPolicy.NEVER or (policy is ProviderCountPolicy.AUTO and self.estimate.rules.exact):
            return None
        if WarningCode.ESTIMATE_FAILED in self.estimate.warnings:
            return None  # what could not be read locally is not sent upstream to be read
        if self.mock and policy is not ProviderCountPolicy.ALWAYS:
            return None  # a mocked call sends nothing upstream unless a count was asked for explicitly
        from .._counting import provider_count  # imports httpx: only calls that may count pay for it, not the read side

        # An official client's count uses its own key and base URL, never one from the environment.
        environ: Optional[Mapping[str, str]] = {} if self.route is not None else None
        target = provider_count.target_for(self.meta.provider, self.model, self.endpoint, environ)
        if target is None:
            self.warnings.add(WarningCode.PROVIDER_UNCONFIGURED)
            return None
        return target, self.api.count_request(self.forward, self.model)  # the clean (untagged) request, as the provider sees it

    def _on_provider_count(self, tokens: Optional[int], failure: Optional[WarningCode]) -> None:
        """Runs on the counter's worker thread (or, for a full queue, inside submit)."""
        if tokens is not None:
            # A count that lands after a newer call of the stage began is kept but never "latest".
            superseded = not self.runtime.is_newest_call(self.stage, self.call_seq)
            self._in_order(lambda: self._publish(CountMethod.PROVIDER_API_SCALED_BREAKDOWN, total=tokens, superseded=superseded))
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
            if not self.ended:
                self.warnings.add(failure)  # rides on this call's next snapshot
                return
        self.runtime.hold_late_warning(self.stage, failure)

    # ------------------------------------------------------------ response

    def finish_response(self, response: Any) -> None:
        """A whole response: its usage and model end the call."""
        reading = self.api.read(response)
        if reading.unreadable:
            self.runtime.log.warning("usage", "cw_middleware: could not read a response's usage")
        self._end(_Ending(time.time_ns(), reading.usage, reading.model, None, reading.tool_calls, reading.finish_reasons, False))

    def see_chunk(self, chunk: Any) -> bool:
        """Note a chunk's (or event's) usage and model; False when the chunk is ours to swallow."""
        try:
            reading = self.api.read(chunk)
            if reading.unreadable:
                self.runtime.log.warning("usage", "cw_middleware: could not read a stream's usage")
            if reading.usage is not None:  # a later event may report only some fields (Anthropic's message_delta)
                self._stream_usage = reading.usage.over(self._stream_usage)
            if reading.model is not None:
                self._response_model = reading.model
            if reading.tool_calls:
                self._stream_calls.extend(reading.tool_calls)
            if reading.finish_reasons:
                self._stream_reasons.extend(reading.finish_reasons)
            return not (self.hide_usage_chunk and reading.usage_only)
        except Exception:  # noqa: BLE001
            return True

    def finish_stream(self) -> None:
        calls, reasons = tuple(self._stream_calls), tuple(self._stream_reasons)
        self._end(_Ending(time.time_ns(), self._stream_usage, self._response_model, None, calls, reasons, True))

    def fail(self, exc: BaseException) -> None:
        self.sent = True  # a send that failed is over
        self._end(_Ending(time.time_ns(), error=exc))

    def _end(self, ending: _Ending) -> None:
        """The first end counts (a stream may end, then be collected); it waits for the estimate when it is pending."""
        with self._lock:
            if self.ended:
                return
            self.ended = True
        self.estimated.then(lambda _: self._in_order(lambda: self._close(ending), end=True))

    def _in_order(self, step: Callable[[], None], end: bool = False, first: bool = False) -> None:
        """Run a step that publishes: a call's snapshots and end on the runtime's call-end worker, where it has one.

        Where the telemetry pipeline is cw's own (or none), none of it is the caller's to wait for. The
        call's first snapshot (``first``) waits for the call's end and goes to the worker in one job with
        it (the worker wakes once a call, after the caller is done with it: live_firsts.py says why), unless
        the call still runs `LIVE_AFTER` seconds after its estimate: then it goes out at once, so that a live
        page shows a long call while it runs. A step that comes while the first waits (a provider count's
        snapshot) waits behind it; any other step goes to the worker too while steps wait there, so a
        stage's snapshots keep their order. A full queue, or a pipeline of the application's, runs it here.
        """
        ends = self.runtime.call_ends
        if ends is None:
            step()
            return
        if first:
            with self._lock:
                self._first_steps = [step]
            self.runtime.live_firsts.watch(self, LIVE_AFTER)
            return
        with self._lock:  # queued under the lock: a first snapshot released meanwhile is queued before this
            held = self._first_steps
            if held is not None and not end:
                held.append(step)
                return
            self._first_steps = None
            if held is not None:
                steps = [*held, step]
                step = lambda: _run_steps(steps)  # noqa: E731
            queued = (end or held is not None or not ends.idle) and ends.submit(step)
        if held is not None:
            self.runtime.live_firsts.forget(self)
        if not queued:
            step()

    def release_first(self) -> None:
        """The call's first snapshot, and the steps waiting behind it, to the call-end worker now (a slow call, a flush)."""
        with self._lock:
            held, self._first_steps = self._first_steps, None
            if not held:
                return
            ends = self.runtime.call_ends
            queued = ends is not None and ends.submit(lambda: _run_steps(held))
        if not queued:
            _run_steps(held)

    def _close(self, ending: _Ending) -> None:
        """The call's end: the response-usage snapshot (or the local estimate once more, saying why), then the span's."""
        try:
            # The end's snapshot stands at the call's end, or at its estimate if that came later (a tokenizer
            # still loading): never before the call's first snapshot, which readers would then take for the latest.
            at = max(ending.at, self._estimated_at)
            usage = ending.usage
            total = None if self.mock or usage is None else usage.input_tokens
            self._response = _response_side(ending, None if self.mock else usage)
            if ending.error is not None:
                pass  # a failed call has no usage: its last snapshot stays the local estimate
            elif total is None:  # a mock's usage is LiteLLM's own count: never reconciled
                self.warnings.add(WarningCode.MOCK_USAGE_NOT_RECONCILED if self.mock else WarningCode.USAGE_MISSING)
                self._publish(CountMethod.LOCAL_ESTIMATE, at=at)
            else:
                prefix_total = usage.cache_prefix_tokens if usage is not None else None
                self._publish(CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN, total=total, cache_prefix_total=prefix_total, at=at)
            if self.telemetry is not None:
                self.telemetry.end(
                    response_model=ending.response_model,
                    input_tokens=total,
                    output_tokens=None if self.mock or usage is None else usage.output_tokens,
                    cache_read_tokens=None if usage is None else usage.cache_read_tokens,
                    error=ending.error,
                    end_time=ending.at,
                    cache_write_tokens=_cache_written(None if self.mock else usage),
                    finish_reasons=ending.finish_reasons,
                    streamed=ending.streamed,
                )
        except Exception as exc:  # noqa: BLE001
            self.runtime.log.warning("end", f"cw_middleware: could not end the call ({type(exc).__name__})")

    def _publish(
        self,
        method: CountMethod,
        total: Optional[int] = None,
        superseded: bool = False,
        cache_prefix_total: Optional[int] = None,
        at: Optional[int] = None,  # ns since the epoch: when the snapshot stands (a call's end); None: now
        live: bool = False,  # the call's first snapshot: carried out at once if the call still waits (see _in_order)
    ) -> None:
        if self.broken or self.estimate is None:
            return
        try:
            runtime = self.runtime
            stage_key = (self.stage.run_id, self.stage.stage_id)
            prefix = self._prefix_facts()
            codes = set(self.warnings)
            if method is CountMethod.LOCAL_ESTIMATE:
                total = self._anchored(stage_key, prefix)
                if total is not None:
                    codes.add(WarningCode.ANCHORED_ESTIMATE)
            snap = build_snapshot(
                self.estimate.by_source,
                self.meta,
                method,
                codes,
                total=total,
                max_details=self.runtime.config.max_details,
                unestimated=self.estimate.unestimated,
                parts=self.runtime.parts,
                cache_prefix=self.estimate.cache_prefix,
                cache_prefix_total=cache_prefix_total,
                tools=self.estimate.tools,
                max_tools=self.runtime.config.max_tools,
                order=self.estimate.order,
                response=self._response,
                repeated=self.estimate.repeated,
                generated_at=None if at is None else datetime.fromtimestamp(at / 1e9, UTC),
                unused_rows=False,  # the stage's ledger makes them, with the stage's numbers
            )
            newest = not superseded and runtime.is_newest_call(self.stage, self.call_seq)
            snap = runtime.ledgers.add(stage_key, self.call_seq, snap, self._local_conversation, newest, runtime.parts, prefix)
            still_waiting = live and self.runtime.call_ends is not None and not self.sent
            # The stage's forecast is made when the gauges show this snapshot (a first one recorded at the end: never).
            forecast = partial(runtime.ledgers.forecast, stage_key, snap.context_window_tokens, runtime.config.threshold_percent)
            runtime.publish(snap, self.telemetry, self.stage, superseded=superseded, at=at, live=still_waiting, forecast=forecast)
        except Exception as exc:  # noqa: BLE001
            self.runtime.log.warning("publish", f"cw_middleware: could not build a snapshot ({type(exc).__name__})")

    def _anchored(self, stage_key: tuple[str, str], prefix: Optional[PrefixFacts]) -> Optional[int]:
        """The local estimate's total anchored on what the provider said of the stage's previous call (issue 36 item 9).

        Where that call (same model) has reconciled with its response's usage and this request begins with its whole
        request, its provider total plus the local count of what this request adds (`ledger.anchored_total`): the
        local breakdown is then scaled to it as to any authoritative total, and the snapshot says ``anchored_estimate``.
        None (the plain local estimate) otherwise. A few dictionary lookups, decided at the call's first snapshot.
        """
        if not self._anchor_decided:
            self._anchor_decided = True
            self._anchor = self.runtime.ledgers.anchored(stage_key, self.call_seq, prefix)
        return self._anchor

    def _prefix_facts(self) -> Optional[PrefixFacts]:
        """What the stage's ledger reads a cache miss and an anchor from: the request's prefix, its local count, the
        model's cache prices and which model it is."""
        estimate = self.estimate
        if estimate is None or estimate.prefix is None:
            return None
        meta = self.meta
        model = f"{meta.provider}/{meta.model}"
        return PrefixFacts(estimate.prefix, estimate.total, min_cacheable_tokens(meta.model), meta.prices, model)


def _run_steps(steps: list[Callable[[], None]]) -> None:
    """A call's steps in their order; one that fails does not keep the next from running."""
    for step in steps:
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - a step's failure is the middleware's, never the caller's
            logger.warning("cw_middleware: a step of a call's end failed (%s)", type(exc).__name__)


def _cache_written(usage: Optional[Usage]) -> Optional[int]:
    """Tokens the response says were written to the prompt cache (read + write, less what was read)."""
    if usage is None or usage.cache_prefix_tokens is None:
        return None
    return max(0, usage.cache_prefix_tokens - (usage.cache_read_tokens or 0))


def _response_side(ending: _Ending, usage: Optional[Usage]) -> Optional[ResponseSide]:
    """The tools a response called and, from its usage (None for a mock: synthetic), the cached tokens."""
    calls = dict(Counter(ending.tool_calls)) if ending.tool_calls else {}
    if usage is None or usage.cache_read_tokens is None:
        return ResponseSide(calls) if calls else None
    written = None
    if usage.cache_prefix_tokens is not None:
        written = max(0, usage.cache_prefix_tokens - usage.cache_read_tokens)
    return ResponseSide(calls, usage.cache_read_tokens, written)
