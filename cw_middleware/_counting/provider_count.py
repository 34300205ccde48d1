"""Provider token counts, in the background, at most once per request fingerprint.

Split as OpenTelemetry splits `BatchProcessor` from an exporter: `ProviderCounter`
owns the hard parts (its jobs on the package's one bounded `worker.Worker`, the time
box, drop on full, the once-per-fingerprint cache), while `count_tokens` is a plain
function that asks one provider endpoint and either returns an int or raises `CountError`.
(`rules.CountingRules` is the other kind of counting: local, by the model's tokenizer.)

Endpoints (request bodies are converted from the OpenAI-style chat request by
count_bodies.py; a Responses-API request, under ``"responses"``, goes to OpenAI's
endpoint as it is, an Anthropic Messages request, under ``"anthropic"``, to Anthropic's, and a
GenerateContent request, under ``"gemini"``, to Gemini's):

* Anthropic ``POST {base}/v1/messages/count_tokens`` -> ``{"input_tokens": N}``
* Gemini ``POST {base}/v1beta/models/{model}:countTokens`` with a
  ``generateContentRequest`` -> ``{"totalTokens": N}``
* OpenAI ``POST {base}/v1/responses/input_tokens`` -> ``{"input_tokens": N}``

A count sends the whole prompt upstream a second time, so the policy that asks
for one lives in the call (`call.Call`, the ``provider_count`` setting); here, nothing is ever logged
or reported but status codes and exception type names: response bodies and
prompts are content.

The HTTP library is the one the application loaded (`http_library`): importing httpx on a worker
thread while an openai 3 call runs on the caller's can fail that call (openai looks for a loaded
``httpx``, for clients of it a caller may pass, and may find it half imported).
"""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

import msgspec

from .._kernel.config import provider_variable
from .._kernel.contract import WarningCode
from .._kernel.log import RateLimitedLog
from .._kernel.worker import Worker
from .count_bodies import to_anthropic, to_gemini, to_openai_responses
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
MAX_WATCHES = 4  # counts run one at a time: a watch ending while the next one starts, and room to spare

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
    family_guess, bare, _ = split_provider(model, kwargs.get("custom_llm_provider"))
    family = _FAMILY.get(provider or "") or (_FAMILY.get(family_guess) if provider is None else None)
    if family is None:
        return None
    key = kwargs.get("api_key") or provider_variable(_KEY_ENV[family], environ)
    if not isinstance(key, str) or not key:
        return None
    base = kwargs.get("api_base") or kwargs.get("base_url") or provider_variable(_BASE_ENV[family], environ)
    return CountTarget(family, bare, base if isinstance(base, str) and base else None, key)


# ---------------------------------------------------------------- the count itself


class CountError(Exception):
    """A count that did not produce a number; `code` says which warning it becomes."""

    def __init__(self, code: WarningCode, reason: str) -> None:
        super().__init__(reason)  # reason: a status code or an exception type, never a body
        self.code = code


# A count answer is a few bytes; anything longer is not one.
MAX_COUNT_BODY = 64 * 1024


def count_tokens(
    target: CountTarget,
    request: Mapping[str, Any],
    client: Any,
    timeout: Optional[float] = None,
    watchdog: Optional[Worker] = None,
) -> int:
    """Ask the provider how many input tokens ``request`` (OpenAI chat shape, plain JSON) has.

    ``timeout`` bounds the whole count, not each socket read: a server trickling
    its headers or body must not hold the single worker. httpx's timeouts are per
    read, so a watch on the ``watchdog`` worker (the counter's; without one, a worker
    of this count's own) shuts the connection's socket down at the deadline (each
    count uses a connection of its own, so the watch sees its socket).
    """
    url, headers, body, field = _endpoint(target, request)
    http = _library_of(client)  # httpx or httpx2: its exceptions are the client's
    deadline = None if timeout is None else time.monotonic() + timeout
    if deadline is not None and watchdog is None:
        watchdog = Worker("cw-provider-count-watchdog", 1, idle_exit=0.0)
    watch = _Watch(deadline, watchdog)
    try:
        kwargs: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        with client.stream(
            "POST", url, headers={**headers, "Connection": "close"}, json=body, extensions={"trace": watch.trace}, **kwargs
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
    except http.TimeoutException as exc:
        raise CountError(WarningCode.PROVIDER_COUNT_TIMEOUT, type(exc).__name__) from None
    except http.HTTPError as exc:
        code = WarningCode.PROVIDER_COUNT_TIMEOUT if watch.fired else WarningCode.PROVIDER_COUNT_FAILED
        raise CountError(code, type(exc).__name__) from None
    finally:
        watch.cancel()
    if watch.fired:  # the socket was shut at the deadline: what arrived is cut short
        raise CountError(WarningCode.PROVIDER_COUNT_TIMEOUT, "deadline")
    try:
        tokens = json.loads(bytes(raw))[field]
    except (ValueError, KeyError, TypeError):
        raise CountError(WarningCode.PROVIDER_COUNT_FAILED, "unexpected response body") from None
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise CountError(WarningCode.PROVIDER_COUNT_FAILED, "unexpected response body")
    return tokens


def http_library() -> Any:
    """httpx where the application loaded it; else httpx2 where it loaded that (openai 3 does); else httpx, imported now."""
    for name in ("httpx", "httpx2"):
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "HTTPError"):  # an import in progress on another thread lacks it yet
            return module
    import httpx

    return httpx


def _library_of(client: Any) -> Any:
    """The HTTP library a client (or its base class) comes from."""
    for klass in type(client).__mro__:
        module = sys.modules.get(klass.__module__.partition(".")[0])
        if module is not None and hasattr(module, "HTTPError") and hasattr(module, "TimeoutException"):
            return module
    return http_library()


class _Watch:
    """Shuts a count's socket down at its deadline (best effort; never raises): one job on a watchdog worker."""

    def __init__(self, deadline: Optional[float], watchdog: Optional[Worker]) -> None:
        self.fired = False
        self._socket: Any = None
        self._cancelled = threading.Event()
        if deadline is not None and watchdog is not None:
            # Refused only by a closed or full worker (counts run one at a time): httpx's own timeouts then.
            watchdog.submit(lambda: self._watch(deadline))

    def _watch(self, deadline: float) -> None:
        if not self._cancelled.wait(max(0.0, deadline - time.monotonic())):
            self._fire()

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
        self._cancelled.set()


def _endpoint(target: CountTarget, request: Mapping[str, Any]) -> tuple[str, dict[str, str], dict[str, Any], str]:
    base = (target.api_base or DEFAULT_BASES[target.provider]).rstrip("/")
    messages = list(request.get("messages") or ())
    tools = list(request.get("tools") or ())
    tool_choice = request.get("tool_choice")
    if target.provider == "anthropic":
        base = _strip_suffix(base, "/v1/messages", "/v1")
        headers = {"x-api-key": target.api_key, "anthropic-version": ANTHROPIC_VERSION}
        native = request.get("anthropic")
        if isinstance(native, Mapping):  # an Anthropic Messages request (the anthropic client's): counted as sent
            body = {"model": target.model, **native}
        else:
            body = to_anthropic(target.model, messages, tools, tool_choice)
        return f"{base}/v1/messages/count_tokens", headers, body, "input_tokens"
    if target.provider == "gemini":
        base = _strip_suffix(base, "/v1beta", "/v1")
        url = f"{base}/v1beta/models/{target.model}:countTokens"
        native = request.get("gemini")  # a GenerateContent request (the google-genai client's): counted as sent
        body = dict(native) if isinstance(native, Mapping) else to_gemini(target.model, messages, tools, tool_choice)
        return url, {"x-goog-api-key": target.api_key}, body, "totalTokens"
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


# ---------------------------------------------------------------- fingerprints


def _jsonable(obj: Any) -> Any:
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump(exclude_none=True)
    if isinstance(obj, (tuple, set, frozenset)):
        return list(obj)
    return repr(obj)  # hashed and sent upstream, never logged


_REQUEST_KEYS = ("model", "messages", "tools", "tool_choice", "response_format", "responses", "anthropic", "gemini")
# msgspec's encoder with sorted keys: the canonical text of a 97k-token request in ~1 ms, where
# json.dumps(sort_keys=True) and a json.loads back took ~6 ms of the worker's CPU on every call (issue 38).
_ENCODER = msgspec.json.Encoder(enc_hook=_jsonable, order="sorted")


class Canonical(NamedTuple):
    """A request's fingerprint (a blake2b hash of its canonical JSON, never its content) and that JSON."""

    fingerprint: str
    text: bytes

    def plain(self) -> dict[str, Any]:
        """The request as plain JSON values, decoded only when a count is really sent."""
        return dict(json.loads(self.text.decode("utf-8", "surrogatepass"))["request"])


def canonical_request(target: CountTarget, request: Mapping[str, Any]) -> Canonical:
    """The request's `Canonical` form: the same for the same content, whatever its objects or key order."""
    plain = {k: request.get(k) for k in _REQUEST_KEYS if request.get(k) is not None}
    whole = {"request": plain, "provider": target.provider, "model": target.model, "api_base": target.api_base}
    try:
        text = _ENCODER.encode(whole)
    except (TypeError, ValueError, UnicodeEncodeError, OverflowError):
        # What msgspec refuses (a lone surrogate, a key of no JSON type, an int past 64 bits) json renders.
        text = json.dumps(whole, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_jsonable).encode(
            "utf-8", "surrogatepass"
        )
    return Canonical(hashlib.blake2b(text, digest_size=16).hexdigest(), text)


# ---------------------------------------------------------------- the counter


class ProviderCounter:
    """Counts on one bounded `Worker`; results are remembered per fingerprint.

    `submit` never blocks: a full queue drops the count (``provider_count_dropped``).
    The worker counts one request at a time, so a duplicate queued behind an
    in-flight count waits for it and is then answered from the cache: a
    fingerprint reaches the provider at most once, whatever its outcome.
    Callbacks run on the worker thread and must not block. A count's job (its
    request copy and its callback, which holds the call) is dropped once it has run.
    """

    def __init__(
        self,
        timeout: float,
        client: Any = None,
        max_queue: int = MAX_QUEUE,
        max_cache: int = MAX_CACHE,
    ) -> None:
        self.timeout = timeout
        self._client = client
        self._own_client = client is None
        self._counts = Worker("cw-provider-count", max_queue, fork_gated=True)
        self._watchdog = Worker("cw-provider-count-watchdog", MAX_WATCHES)  # each count's time box
        self._results: OrderedDict[str, tuple[Optional[int], Optional[WarningCode]]] = OrderedDict()
        self._max_cache = max_cache
        self._log = RateLimitedLog()  # a dead endpoint fails every count: log each kind once a minute

    def submit(self, target: CountTarget, request: Mapping[str, Any], on_result: OnResult) -> bool:
        """Queue a count; False when it was not queued (full: on_result gets provider_count_dropped)."""
        # Copy the lists now: agents append to their message list as soon as the call returns.
        snapshot = {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in request.items()}
        if self._counts.submit(lambda: _deliver(on_result, *self._count(target, snapshot))):
            return True
        if not self._counts.closed:
            _deliver(on_result, None, WarningCode.PROVIDER_COUNT_DROPPED)
        return False

    def wait_idle(self, timeout: float) -> bool:
        """True once every queued count has been answered (flush)."""
        return self._counts.wait_idle(timeout)

    def close(self) -> None:
        """Stop the worker after its current count; queued counts are abandoned without a callback."""
        ended = self._counts.close(timeout=0.5)
        self._watchdog.close(timeout=0.0)
        if self._own_client and self._client is not None and ended:
            self._client.close()

    def _count(self, target: CountTarget, request: dict[str, Any]) -> tuple[Optional[int], Optional[WarningCode]]:
        try:
            canonical = canonical_request(target, request)
        except Exception as exc:  # noqa: BLE001 - an odd message shape must not kill the worker
            self._log.warning(
                "serialise", f"cw_middleware: provider count skipped, request not serialisable ({type(exc).__name__})"
            )
            return None, WarningCode.PROVIDER_COUNT_FAILED
        fingerprint = canonical.fingerprint
        cached = self._results.get(fingerprint)
        if cached is not None:
            self._results.move_to_end(fingerprint)
            return cached
        try:
            if self._client is None:
                self._client = http_library().Client(timeout=self.timeout)
            outcome: tuple[Optional[int], Optional[WarningCode]] = (
                count_tokens(target, canonical.plain(), self._client, self.timeout, self._watchdog),
                None,
            )
        except CountError as exc:
            self._log.warning(f"{target.provider}:{exc}", f"cw_middleware: {target.provider} provider count failed ({exc})")
            outcome = (None, exc.code)
        except Exception as exc:  # noqa: BLE001
            self._log.warning(
                f"{target.provider}:{type(exc).__name__}",
                f"cw_middleware: {target.provider} provider count failed ({type(exc).__name__})",
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
