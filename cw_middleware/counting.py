"""Provider token counts, in the background, at most once per request fingerprint.

Split as OpenTelemetry splits `BatchProcessor` from an exporter: `ProviderCounter`
owns the hard parts (a bounded queue, one daemon worker, the time box, drop on
full, the once-per-fingerprint cache), while `count_tokens` is a plain function
that asks one provider endpoint and either returns an int or raises `CountError`.

Endpoints (request bodies are converted from the OpenAI-style chat request; a
Responses-API request, under ``"responses"``, goes to OpenAI's endpoint as it is):

* Anthropic ``POST {base}/v1/messages/count_tokens`` -> ``{"input_tokens": N}``
* Gemini ``POST {base}/v1beta/models/{model}:countTokens`` with a
  ``generateContentRequest`` -> ``{"totalTokens": N}``
* OpenAI ``POST {base}/v1/responses/input_tokens`` -> ``{"input_tokens": N}``

A count sends the whole prompt upstream a second time, so the policy that asks
for one lives in the wrapper (`provider_count`); here, nothing is ever logged
or reported but status codes and exception type names: response bodies and
prompts are content.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import httpx

from ._log import RateLimitedLog
from .contract import WarningCode
from .rules import split_provider

logger = logging.getLogger("cw_middleware")

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_BASES = {
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com",
    "openai": "https://api.openai.com",
}
# Environment variables, in order of preference, as LiteLLM and the providers' SDKs read them.
_KEY_ENV = {
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "openai": ("OPENAI_API_KEY",),
}
_BASE_ENV = {
    "anthropic": ("ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"),
    "gemini": ("GEMINI_API_BASE",),
    "openai": ("OPENAI_BASE_URL", "OPENAI_API_BASE"),
}
# LiteLLM provider names -> the count endpoint family that serves them with the same credentials.
_FAMILY = {"anthropic": "anthropic", "gemini": "gemini", "openai": "openai", "text-completion-openai": "openai"}

MAX_QUEUE = 64
MAX_CACHE = 4096

OnResult = Callable[[Optional[int], Optional[WarningCode]], None]


@dataclass(frozen=True)
class CountTarget:
    """Where and how to ask a provider for a count (credentials never leave this object)."""

    provider: str  # "anthropic" | "gemini" | "openai"
    model: str  # the provider's bare model name
    api_base: Optional[str]
    api_key: str

    def __repr__(self) -> str:  # keep the key out of tracebacks and logs
        return f"CountTarget(provider={self.provider!r}, model={self.model!r}, api_base={self.api_base!r})"


def target_for(
    provider: Optional[str], model: str, kwargs: Mapping[str, Any], environ: Optional[Mapping[str, str]] = None
) -> Optional[CountTarget]:
    """The count endpoint for this request, or None when no credentials are configured."""
    env = os.environ if environ is None else environ
    family_guess, bare = split_provider(model, kwargs.get("custom_llm_provider"))
    family = _FAMILY.get(provider or "") or (_FAMILY.get(family_guess) if provider is None else None)
    if family is None:
        return None
    key = kwargs.get("api_key") or next((env[k] for k in _KEY_ENV[family] if env.get(k)), None)
    if not isinstance(key, str) or not key:
        return None
    base = kwargs.get("api_base") or kwargs.get("base_url") or next((env[k] for k in _BASE_ENV[family] if env.get(k)), None)
    return CountTarget(family, bare, base if isinstance(base, str) and base else None, key)


# ---------------------------------------------------------------- the count itself


class CountError(Exception):
    """A count that did not produce a number; `code` says which warning it becomes."""

    def __init__(self, code: WarningCode, reason: str) -> None:
        super().__init__(reason)  # reason: a status code or an exception type, never a body
        self.code = code


# A count answer is a few bytes; anything longer is not one.
MAX_COUNT_BODY = 64 * 1024


def count_tokens(target: CountTarget, request: Mapping[str, Any], client: httpx.Client, timeout: Optional[float] = None) -> int:
    """Ask the provider how many input tokens ``request`` (OpenAI chat shape, plain JSON) has.

    ``timeout`` bounds the whole count, not each socket read: a server trickling
    its headers or body must not hold the single worker. httpx's timeouts are per
    read, so a watchdog shuts the connection's socket down at the deadline (each
    count uses a connection of its own, so the watchdog sees its socket).
    """
    url, headers, body, field = _endpoint(target, request)
    deadline = None if timeout is None else time.monotonic() + timeout
    watchdog = _Watchdog(timeout)
    try:
        kwargs: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        with client.stream(
            "POST", url, headers={**headers, "Connection": "close"}, json=body, extensions={"trace": watchdog.trace}, **kwargs
        ) as response:
            if response.status_code != 200:
                raise CountError(WarningCode.PROVIDER_COUNT_FAILED, f"HTTP {response.status_code}")
            raw = bytearray()
            for chunk in response.iter_bytes():
                raw += chunk
                if deadline is not None and time.monotonic() > deadline:
                    raise CountError(WarningCode.PROVIDER_COUNT_TIMEOUT, "deadline")
                if len(raw) > MAX_COUNT_BODY:
                    raise CountError(WarningCode.PROVIDER_COUNT_FAILED, "response too large")
    except httpx.TimeoutException as exc:
        raise CountError(WarningCode.PROVIDER_COUNT_TIMEOUT, type(exc).__name__) from None
    except httpx.HTTPError as exc:
        code = WarningCode.PROVIDER_COUNT_TIMEOUT if watchdog.fired else WarningCode.PROVIDER_COUNT_FAILED
        raise CountError(code, type(exc).__name__) from None
    finally:
        watchdog.cancel()
    if watchdog.fired:  # the socket was shut at the deadline: what arrived is cut short
        raise CountError(WarningCode.PROVIDER_COUNT_TIMEOUT, "deadline")
    try:
        tokens = json.loads(bytes(raw))[field]
    except (ValueError, KeyError, TypeError):
        raise CountError(WarningCode.PROVIDER_COUNT_FAILED, "unexpected response body") from None
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise CountError(WarningCode.PROVIDER_COUNT_FAILED, "unexpected response body")
    return tokens


class _Watchdog:
    """Shuts a count's socket down when its time box ends (best effort; never raises)."""

    def __init__(self, timeout: Optional[float]) -> None:
        self.fired = False
        self._socket: Any = None
        self._timer = threading.Timer(timeout, self._fire) if timeout is not None else None
        if self._timer is not None:
            self._timer.daemon = True
            self._timer.start()

    def trace(self, event: str, info: dict[str, Any]) -> None:
        if event == "connection.connect_tcp.complete":
            stream = info.get("return_value")
            try:
                self._socket = stream.get_extra_info("socket") if stream is not None else None
            except Exception:  # noqa: BLE001
                self._socket = None

    def _fire(self) -> None:
        self.fired = True
        sock = self._socket
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def _endpoint(target: CountTarget, request: Mapping[str, Any]) -> tuple[str, dict[str, str], dict[str, Any], str]:
    base = (target.api_base or DEFAULT_BASES[target.provider]).rstrip("/")
    messages = list(request.get("messages") or ())
    tools = list(request.get("tools") or ())
    tool_choice = request.get("tool_choice")
    if target.provider == "anthropic":
        base = _strip_suffix(base, "/v1/messages", "/v1")
        headers = {"x-api-key": target.api_key, "anthropic-version": ANTHROPIC_VERSION}
        return (
            f"{base}/v1/messages/count_tokens",
            headers,
            to_anthropic(target.model, messages, tools, tool_choice),
            "input_tokens",
        )
    if target.provider == "gemini":
        base = _strip_suffix(base, "/v1beta")
        url = f"{base}/v1beta/models/{target.model}:countTokens"
        return url, {"x-goog-api-key": target.api_key}, to_gemini(target.model, messages, tools, tool_choice), "totalTokens"
    base = _strip_suffix(base, "/v1")
    native = request.get("responses")
    if isinstance(native, Mapping):  # a Responses-API request: counted as it will be sent
        body = {"model": target.model, **native}
    else:
        body = to_openai_responses(target.model, messages, tools, tool_choice, request.get("response_format"))
    return f"{base}/v1/responses/input_tokens", {"Authorization": f"Bearer {target.api_key}"}, body, "input_tokens"


def _strip_suffix(base: str, *suffixes: str) -> str:
    for suffix in suffixes:
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base


# ---------------------------------------------------------------- converters (OpenAI chat -> provider)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") if isinstance(p, dict) else str(p) for p in content if not isinstance(p, dict) or "text" in p
        )
    return ""


def _parts(content: Any) -> list[dict[str, Any]]:
    """Content as a list of OpenAI parts (a string becomes one text part)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list):
        return [p if isinstance(p, dict) else {"type": "text", "text": str(p)} for p in content]
    return []


def _image_url(part: Mapping[str, Any]) -> Optional[str]:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    return url if isinstance(url, str) else None


def _data_url(url: str) -> Optional[tuple[str, str]]:
    """(media type, base64 data) of a ``data:`` URL."""
    if not url.startswith("data:") or ";base64," not in url:
        return None
    head, data = url[5:].split(";base64,", 1)
    return head or "application/octet-stream", data


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            return {"arguments": raw}
    return raw if raw is not None else {}


def _merge_roles(turns: list[tuple[str, list[Any]]]) -> list[tuple[str, list[Any]]]:
    """Consecutive turns of one role become one (both Anthropic and Gemini expect alternation)."""
    merged: list[tuple[str, list[Any]]] = []
    for role, blocks in turns:
        if not blocks:
            continue
        if merged and merged[-1][0] == role:
            merged[-1][1].extend(blocks)
        else:
            merged.append((role, list(blocks)))
    return merged


def _function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    fn = tool.get("function")
    return fn if isinstance(fn, dict) else tool


def _choice_name(tool_choice: Any) -> Optional[str]:
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function")
        return (fn or {}).get("name") if isinstance(fn, dict) else tool_choice.get("name")
    return None


def to_anthropic(
    model: str, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], tool_choice: Any
) -> dict[str, Any]:
    system: list[dict[str, Any]] = []
    turns: list[tuple[str, list[Any]]] = []
    for msg in messages:
        role = msg.get("role")
        if role in ("system", "developer"):
            system += [{"type": "text", "text": t} for t in [_text(msg.get("content"))] if t]
        elif role in ("tool", "function"):
            block = {
                "type": "tool_result",
                "tool_use_id": msg.get("tool_call_id") or msg.get("name") or "",
                "content": _text(msg.get("content")),
            }
            turns.append(("user", [block]))
        else:
            blocks: list[dict[str, Any]] = []
            for part in _parts(msg.get("content")):
                if part.get("type", "text") == "text" and part.get("text"):
                    blocks.append({"type": "text", "text": part["text"]})
                elif part.get("type") == "image_url" and (url := _image_url(part)):
                    data = _data_url(url)
                    source = {"type": "base64", "media_type": data[0], "data": data[1]} if data else {"type": "url", "url": url}
                    blocks.append({"type": "image", "source": source})
            for call in msg.get("tool_calls") or ():
                fn = call.get("function") or {}
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call.get("id") or "",
                        "name": fn.get("name", ""),
                        "input": _arguments(fn.get("arguments")),
                    }
                )
            turns.append(("assistant" if role == "assistant" else "user", blocks))
    body: dict[str, Any] = {"model": model, "messages": [{"role": r, "content": b} for r, b in _merge_roles(turns)]}
    if system:
        body["system"] = system
    if tools:
        body["tools"] = [
            {
                "name": fn.get("name", ""),
                **({"description": fn["description"]} if fn.get("description") else {}),
                "input_schema": fn.get("parameters") or {"type": "object", "properties": {}},
            }
            for fn in map(_function, tools)
        ]
        name = _choice_name(tool_choice)
        choice = (
            {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}.get(tool_choice)
            if isinstance(tool_choice, str)
            else None
        )
        if name:
            choice = {"type": "tool", "name": name}
        if choice:
            body["tool_choice"] = choice
    return body


# Keys of JSON Schema that Gemini's OpenAPI-subset schemas reject.
_GEMINI_DROP = frozenset({"additionalProperties", "$schema", "$defs", "definitions", "strict", "$ref", "default"})


def _gemini_schema(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _gemini_schema(v) for k, v in schema.items() if k not in _GEMINI_DROP}
    if isinstance(schema, list):
        return [_gemini_schema(v) for v in schema]
    return schema


def to_gemini(
    model: str, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], tool_choice: Any
) -> dict[str, Any]:
    system: list[dict[str, Any]] = []
    turns: list[tuple[str, list[Any]]] = []
    call_names: dict[str, str] = {}
    for msg in messages:
        role = msg.get("role")
        if role in ("system", "developer"):
            system += [{"text": t} for t in [_text(msg.get("content"))] if t]
        elif role in ("tool", "function"):
            name = msg.get("name") or call_names.get(msg.get("tool_call_id") or "", "")
            turns.append(("user", [{"functionResponse": {"name": name, "response": {"content": _text(msg.get("content"))}}}]))
        else:
            parts: list[dict[str, Any]] = []
            for part in _parts(msg.get("content")):
                if part.get("type", "text") == "text" and part.get("text"):
                    parts.append({"text": part["text"]})
                elif part.get("type") == "image_url" and (url := _image_url(part)):
                    data = _data_url(url)
                    parts.append(
                        {"inlineData": {"mimeType": data[0], "data": data[1]}} if data else {"fileData": {"fileUri": url}}
                    )
            for call in msg.get("tool_calls") or ():
                fn = call.get("function") or {}
                call_names[call.get("id") or ""] = fn.get("name", "")
                parts.append({"functionCall": {"name": fn.get("name", ""), "args": _arguments(fn.get("arguments"))}})
            turns.append(("model" if role == "assistant" else "user", parts))
    request: dict[str, Any] = {"model": f"models/{model}", "contents": [{"role": r, "parts": p} for r, p in _merge_roles(turns)]}
    if system:
        request["systemInstruction"] = {"parts": system}
    if tools:
        declarations = []
        for fn in map(_function, tools):
            declaration = {"name": fn.get("name", "")}
            if fn.get("description"):
                declaration["description"] = fn["description"]
            if fn.get("parameters"):
                declaration["parameters"] = _gemini_schema(fn["parameters"])
            declarations.append(declaration)
        request["tools"] = [{"functionDeclarations": declarations}]
        name = _choice_name(tool_choice)
        mode = {"auto": "AUTO", "required": "ANY", "none": "NONE"}.get(tool_choice) if isinstance(tool_choice, str) else None
        if name:
            request["toolConfig"] = {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [name]}}
        elif mode:
            request["toolConfig"] = {"functionCallingConfig": {"mode": mode}}
    return {"generateContentRequest": request}


def to_openai_responses(
    model: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    tool_choice: Any,
    response_format: Any = None,
) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for msg in messages:
        role = msg.get("role") or "user"
        if role in ("tool", "function"):
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": msg.get("tool_call_id") or msg.get("name") or "",
                    "output": _text(msg.get("content")),
                }
            )
            continue
        content = msg.get("content")
        if isinstance(content, list):
            kind = "output_text" if role == "assistant" else "input_text"
            parts: list[dict[str, Any]] = []
            for part in _parts(content):
                if part.get("type", "text") == "text":
                    parts.append({"type": kind, "text": part.get("text", "")})
                elif part.get("type") == "image_url" and (url := _image_url(part)):
                    parts.append({"type": "input_image", "image_url": url})
            content = parts
        if content:
            items.append({"role": role, "content": content})
        for call in msg.get("tool_calls") or ():
            fn = call.get("function") or {}
            args = fn.get("arguments")
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.get("id") or "",
                    "name": fn.get("name", ""),
                    "arguments": args if isinstance(args, str) else json.dumps(args or {}),
                }
            )
    body: dict[str, Any] = {"model": model, "input": items}
    if tools:
        body["tools"] = [
            {"type": "function", **{k: fn[k] for k in ("name", "description", "parameters", "strict") if k in fn}}
            for fn in map(_function, tools)
        ]
    name = _choice_name(tool_choice)
    if name:
        body["tool_choice"] = {"type": "function", "name": name}
    elif isinstance(tool_choice, str):
        body["tool_choice"] = tool_choice
    if isinstance(response_format, dict):
        format_type = response_format.get("type")
        if format_type == "json_schema" and isinstance(response_format.get("json_schema"), dict):
            body["text"] = {"format": {"type": "json_schema", **response_format["json_schema"]}}
        elif format_type == "json_object":
            body["text"] = {"format": {"type": "json_object"}}
    return body


# ---------------------------------------------------------------- fingerprints


def _jsonable(obj: Any) -> Any:
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump(exclude_none=True)
    if isinstance(obj, (tuple, set, frozenset)):
        return list(obj)
    return repr(obj)  # hashed and sent upstream, never logged


def canonical_request(target: CountTarget, request: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(fingerprint, plain-JSON copy) of a request: a blake2b hash of its canonical JSON, never its content."""
    keys = ("model", "messages", "tools", "tool_choice", "response_format", "responses")
    plain = {k: request.get(k) for k in keys if request.get(k) is not None}
    text = json.dumps(
        {"request": plain, "provider": target.provider, "model": target.model, "api_base": target.api_base},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=_jsonable,
    )
    fingerprint = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    return fingerprint, json.loads(text)["request"]


# ---------------------------------------------------------------- the worker


@dataclass
class _Job:
    target: CountTarget
    request: dict[str, Any]
    on_result: OnResult


class ProviderCounter:
    """One daemon worker owning a bounded queue of counts; results are remembered per fingerprint.

    `submit` never blocks: a full queue drops the count (``provider_count_dropped``).
    The worker counts one request at a time, so a duplicate queued behind an
    in-flight count waits for it and is then answered from the cache: a
    fingerprint reaches the provider at most once, whatever its outcome.
    Callbacks run on the worker thread and must not block.
    """

    def __init__(
        self,
        timeout: float,
        client: Optional[httpx.Client] = None,
        max_queue: int = MAX_QUEUE,
        max_cache: int = MAX_CACHE,
    ) -> None:
        self.timeout = timeout
        self._client = client
        self._own_client = client is None
        self._queue: deque[_Job] = deque()
        self._max_queue = max_queue
        self._results: OrderedDict[str, tuple[Optional[int], Optional[WarningCode]]] = OrderedDict()
        self._max_cache = max_cache
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self._thread: Optional[threading.Thread] = None
        self._log = RateLimitedLog()  # a dead endpoint fails every count: log each kind once a minute

    def submit(self, target: CountTarget, request: Mapping[str, Any], on_result: OnResult) -> bool:
        """Queue a count; False when it was not queued (full: on_result gets provider_count_dropped)."""
        # Copy the lists now: agents append to their message list as soon as the call returns.
        snapshot = {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in request.items()}
        with self._cond:
            if self._closed:
                return False
            if len(self._queue) < self._max_queue:
                self._queue.append(_Job(target, snapshot, on_result))
                self._ensure_worker()
                self._cond.notify_all()
                return True
        _deliver(on_result, None, WarningCode.PROVIDER_COUNT_DROPPED)
        return False

    def wait_idle(self, timeout: float) -> bool:
        """True once every queued count has been answered (flush)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout=timeout)

    def close(self) -> None:
        """Stop the worker after its current count; queued counts are abandoned without a callback."""
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=0.5)
        if self._own_client and self._client is not None and (thread is None or not thread.is_alive()):
            self._client.close()

    # ------------------------------------------------------------ worker

    def _ensure_worker(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="cw-provider-count", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._busy = False
                self._cond.notify_all()
                self._cond.wait_for(lambda: self._queue or self._closed)
                if self._closed:
                    return
                job = self._queue.popleft()
                self._busy = True
            tokens, failure = self._count(job)
            _deliver(job.on_result, tokens, failure)

    def _count(self, job: _Job) -> tuple[Optional[int], Optional[WarningCode]]:
        try:
            fingerprint, plain = canonical_request(job.target, job.request)
        except Exception as exc:  # noqa: BLE001 - an odd message shape must not kill the worker
            self._log.warning(
                "serialise", f"cw_middleware: provider count skipped, request not serialisable ({type(exc).__name__})"
            )
            return None, WarningCode.PROVIDER_COUNT_FAILED
        cached = self._results.get(fingerprint)
        if cached is not None:
            self._results.move_to_end(fingerprint)
            return cached
        try:
            if self._client is None:
                self._client = httpx.Client(timeout=self.timeout)
            outcome: tuple[Optional[int], Optional[WarningCode]] = (
                count_tokens(job.target, plain, self._client, self.timeout),
                None,
            )
        except CountError as exc:
            self._log.warning(
                f"{job.target.provider}:{exc}", f"cw_middleware: {job.target.provider} provider count failed ({exc})"
            )
            outcome = (None, exc.code)
        except Exception as exc:  # noqa: BLE001
            self._log.warning(
                f"{job.target.provider}:{type(exc).__name__}",
                f"cw_middleware: {job.target.provider} provider count failed ({type(exc).__name__})",
            )
            outcome = (None, WarningCode.PROVIDER_COUNT_FAILED)
        self._results[fingerprint] = outcome
        if len(self._results) > self._max_cache:
            self._results.popitem(last=False)
        return outcome


def _deliver(on_result: OnResult, tokens: Optional[int], failure: Optional[WarningCode]) -> None:
    try:
        on_result(tokens, failure)
    except Exception as exc:  # noqa: BLE001 - a callback failure is the middleware's, never the caller's
        logger.warning("cw_middleware: provider count callback failed (%s)", type(exc).__name__)
