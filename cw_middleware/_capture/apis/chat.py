"""Chat Completions (``litellm.completion`` / ``acompletion``): messages, tools, stream_options, usage chunks.

Streams: OpenAI-family providers report a stream's usage only when asked with
``stream_options.include_usage``. Where the caller did not ask (absent, or
``None`` as the OpenAI Agents SDK passes it), we ask, and the usage chunk that
answers is ours to swallow: the caller's stream stays chunk for chunk what it
would have been. LiteLLM ends such a stream with a usage chunk that carries no
choices, or (1.83) one empty choice without a finish reason; both are usage-only.

Asking must never turn a call LiteLLM would complete into a failure. Azure api-versions
before 2024-08-01 (and some OpenAI-compatible servers) reject the field, so it is added
only where the endpoint is not known to refuse it (`asks_stream_usage`), and a call refused
with a 400/422 naming ``stream_options`` before any chunk arrived is sent again without it
(`refused_stream_usage`, one retry), its endpoint remembered so later streams go out as
written. ``stream_usage="never"`` (``CW_STREAM_USAGE``, or ``cw_stream_usage`` per call)
never adds it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from ..._counting.tags import strip_messages, strip_tools
from ..._kernel.config import provider_variable
from ..._kernel.process import PROCESS
from ..._snapshots.reconcile import usage_cache_prefix_tokens, usage_input_tokens
from .base import NOTHING, Forward, Parsed, Reading, Usage

# completion() arguments the estimator reads besides the messages.
ESTIMATE_KEYS = (
    "tools",
    "tool_choice",
    "response_format",
    "functions",
    "custom_llm_provider",
    "thinking",
    "reasoning_effort",
)
# Providers whose streams report usage when asked with stream_options.include_usage.
STREAM_USAGE_PROVIDERS = frozenset({"openai", "azure", "text-completion-openai", "openai_compatible", "hosted_vllm"})
# Azure api-versions that accept stream_options: 2024-08-01-preview and later (the GA 2024-10-21 too).
AZURE_STREAM_OPTIONS_SINCE = "2024-08-01"
# Endpoints that refused stream_options are remembered (for the process); bounded, oldest forgotten first.
MAX_REFUSING_ENDPOINTS = 256
# Delta fields that make a choice carry something for the caller.
_DELTA_FIELDS = ("content", "role", "tool_calls", "function_call", "refusal", "audio", "reasoning_content")


class ChatCompletions:
    operation = "chat"

    def parse(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Parsed:
        model = kwargs.get("model", args[0] if args else None)
        messages = kwargs.get("messages", args[1] if len(args) > 1 else None)
        return Parsed(str(model or ""), messages, {k: kwargs.get(k) for k in ESTIMATE_KEYS}, "chat")

    def forward(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        parsed: Parsed,
        tagged: Optional[Sequence[int]],
        provider: Optional[str],
        stream_usage: bool = True,
        endpoint: Optional[Mapping[str, Any]] = None,
    ) -> Forward:
        out = Forward(args, kwargs)
        _strip(out, parsed, tagged)
        where = kwargs if endpoint is None else endpoint
        if stream_usage and kwargs.get("stream") and kwargs.get("stream_options") is None and asks_stream_usage(provider, where):
            kwargs["stream_options"] = {"include_usage": True}
            out.hide_usage = True  # the caller did not ask for it: keep their stream as it was
        return out

    def count_request(self, forward: Forward, model: str) -> dict[str, Any]:
        args, kwargs = forward.args, forward.kwargs
        request: dict[str, Any] = {"model": model, "messages": kwargs.get("messages", args[1] if len(args) > 1 else None)}
        for key in ("tools", "tool_choice", "response_format"):
            if kwargs.get(key) is not None:
                request[key] = kwargs[key]
        return request

    def read(self, obj: Any) -> Reading:
        """A ModelResponse or a stream chunk: its usage block (when set), response model and tool calls."""
        usage = getattr(obj, "usage", None)
        model = getattr(obj, "model", None)
        model = model if isinstance(model, str) else None
        choices = getattr(obj, "choices", None)
        calls = _tool_calls(choices) if choices else ()
        reasons = _finish_reasons(choices) if choices else ()
        if usage is None:
            return Reading(None, model, tool_calls=calls, finish_reasons=reasons) if model or calls or reasons else NOTHING
        usage_only = _carries_nothing_else(choices)
        try:
            details = getattr(usage, "prompt_tokens_details", None)
            numbers = Usage(
                usage_input_tokens(usage),
                getattr(usage, "completion_tokens", None),
                getattr(details, "cached_tokens", None),
                usage_cache_prefix_tokens(usage),
            )
        except Exception:  # noqa: BLE001 - an odd usage block: the chunk is still recognised as usage-only
            return Reading(None, model, usage_only, unreadable=True, tool_calls=calls, finish_reasons=reasons)
        return Reading(numbers, model, usage_only, tool_calls=calls, finish_reasons=reasons)


def _finish_reasons(choices: Any) -> tuple[str, ...]:
    try:
        return tuple(r for c in choices if isinstance(r := getattr(c, "finish_reason", None), str))
    except TypeError:
        return ()


Endpoint = tuple[str, str, str]  # (provider, api_base, api_version)


def _endpoint(provider: Optional[str], kwargs: Mapping[str, Any]) -> Endpoint:
    base = kwargs.get("api_base") or kwargs.get("base_url") or ""
    version = kwargs.get("api_version") or ""
    return str(provider or ""), str(base), str(version)


class RefusingEndpoints:
    """Endpoints that refused ``stream_options`` (a part of the process state: a configure() keeps them)."""

    def __init__(self) -> None:
        self._endpoints: OrderedDict[Endpoint, None] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, endpoint: Endpoint) -> bool:
        if not self._endpoints:  # the common case, on every stream: no lock
            return False
        with self._lock:
            return endpoint in self._endpoints

    def __len__(self) -> int:
        return len(self._endpoints)

    def add(self, endpoint: Endpoint) -> None:
        with self._lock:
            self._endpoints[endpoint] = None
            while len(self._endpoints) > MAX_REFUSING_ENDPOINTS:
                self._endpoints.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._endpoints.clear()

    def after_fork_in_child(self) -> None:
        self._lock = threading.Lock()


def refusing_endpoints() -> RefusingEndpoints:
    return PROCESS.part(RefusingEndpoints)


def asks_stream_usage(provider: Optional[str], kwargs: Mapping[str, Any]) -> bool:
    """Whether a stream to this endpoint may carry ``stream_options``: an OpenAI-family provider that has
    not refused it, and for Azure an api-version that knows the field (LiteLLM's default one does)."""
    if provider not in STREAM_USAGE_PROVIDERS:
        return False
    if provider == "azure":
        version = kwargs.get("api_version") or provider_variable(("AZURE_API_VERSION",)) or ""
        if isinstance(version, str) and version[:10] < AZURE_STREAM_OPTIONS_SINCE and version[:4].isdigit():
            return False
    return _endpoint(provider, kwargs) not in refusing_endpoints()


def refused_stream_usage(exc: BaseException) -> bool:
    """A provider's 400/422 that names ``stream_options``: the field we added, refused before any chunk."""
    status = getattr(exc, "status_code", None)
    if status not in (400, 422) or not isinstance(exc, Exception):
        return False
    try:
        return "stream_options" in str(exc)  # read, never logged: an error body is content
    except Exception:  # noqa: BLE001
        return False


def remember_refusal(provider: Optional[str], kwargs: Mapping[str, Any]) -> None:
    refusing_endpoints().add(_endpoint(provider, kwargs))


def _tool_calls(choices: Any) -> tuple[str, ...]:
    """The tool names a response's (or a chunk's) choices call; a stream names a call in its first delta only."""
    names: list[str] = []
    try:
        for choice in choices:
            message = getattr(choice, "message", None) or getattr(choice, "delta", None)
            calls = getattr(message, "tool_calls", None)
            for call in calls or ():
                # A function call names its function; a custom (free-form) tool's call its ``custom`` payload.
                name = getattr(getattr(call, "function", None) or getattr(call, "custom", None), "name", None)
                if isinstance(name, str) and name:
                    names.append(name)
            legacy = getattr(message, "function_call", None)
            name = getattr(legacy, "name", None)
            if isinstance(name, str) and name:
                names.append(name)
    except Exception:  # noqa: BLE001 - an odd response shape: no calls seen, the call goes on
        return tuple(names)
    return tuple(names)


def _carries_nothing_else(choices: Any) -> bool:
    if not choices:
        return True
    for choice in choices:
        if getattr(choice, "finish_reason", None) is not None:
            return False
        delta = getattr(choice, "delta", None)
        if delta is not None and any(getattr(delta, name, None) for name in _DELTA_FIELDS):
            return False
    return True


def _strip(out: Forward, parsed: Parsed, tagged: Optional[Sequence[int]]) -> None:
    """Tags never reach the provider: only the messages known to be tagged are copied (``tagged=None``: all are checked)."""
    messages, kwargs = parsed.messages, out.kwargs
    tools = kwargs.get("tools")
    try:
        clean_messages = strip_messages(messages, tagged)
    except Exception:  # noqa: BLE001 - an odd request shape: fall back to checking every message
        try:
            clean_messages = strip_messages(messages, None)
        except Exception:  # noqa: BLE001 - not a list of messages at all: LiteLLM's to reject, untouched
            clean_messages = messages
    if clean_messages is not messages:
        if len(out.args) >= 2 and "messages" not in kwargs:
            out.args = (out.args[0], clean_messages, *out.args[2:])
        else:
            kwargs["messages"] = clean_messages
    for key in ("tools", "functions"):
        value = tools if key == "tools" else kwargs.get(key)
        clean = strip_tools(value)
        if clean is not value:
            kwargs[key] = clean


CHAT = ChatCompletions()
