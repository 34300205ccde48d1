"""Model facts: the provider, the model's name, its context window and prices, as spans, snapshots and metrics give them.

LiteLLM's model map (`model_map`, read as data: LiteLLM is not imported for it) names the provider,
the window and the prices (`ModelFacts`, cached, one per Runtime);
the settings may set the window, for every call (``context_windows``) or for one
(``cw_context_window``). The one place model names are normalised, for spans, snapshots and
metric labels alike: the provider goes to gen_ai.provider.name and the model is named as the
provider names it, without LiteLLM's routing prefix, so ``openai/gpt-4o`` and ``gpt-4o`` are
one series (``gpt-4o``, provider ``openai``). A model LiteLLM does not know keeps its name as
written, and its provider is our family guess (`rules.split_provider`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

from .._kernel.contract import StageInfo, WarningCode
from .._kernel.log import RateLimitedLog
from .._kernel.values import MAX_CONTEXT_WINDOW
from . import model_map
from .cost import Prices, prices_from
from .rules import split_provider

logger = logging.getLogger("cw_middleware")

OPTION_CONTEXT_WINDOW = "cw_context_window"  # the per-call window, removed before LiteLLM sees the request
MAX_MODELS = 512  # model strings whose facts are kept


@dataclass(frozen=True, slots=True)
class RequestMeta:
    """What a snapshot says about its request besides the numbers."""

    run_id: Optional[str]
    stage_id: Optional[str]
    provider: Optional[str]
    model: Optional[str]
    context_window_tokens: Optional[int]
    prices: Optional[Prices] = None  # the model's input prices (`ModelFacts.prices`); None: no cost


class Facts(NamedTuple):
    provider: Optional[str]
    name: str  # as the provider names it
    window: Optional[int]  # max input tokens; None: unknown
    prices: Optional[Prices] = None  # LiteLLM's input prices; None: the map has none


class ModelFacts:
    """LiteLLM's facts by model string, bounded; what a Runtime's snapshots say about each request."""

    def __init__(self, max_models: int = MAX_MODELS) -> None:
        self._known: dict[tuple[str, Optional[str]], Facts] = {}
        self._max = max_models

    def of(self, model: str, custom_llm_provider: Optional[str]) -> Facts:
        key = (model, custom_llm_provider)
        facts = self._known.get(key)
        if facts is None:
            facts = _look_up(model, custom_llm_provider)
            if len(self._known) >= self._max:
                self._known.clear()
            self._known[key] = facts
            if facts.window is None and facts.prices is None:  # said once a model, in our logger, never on stdout
                logger.warning(
                    "cw_middleware: %r is not in LiteLLM's model map: its calls have no context window or price "
                    "(configure(context_windows={...}) gives the window)",
                    model,
                )
        return facts

    def request_meta(
        self,
        model: str,
        custom_llm_provider: Optional[str],
        window_override: Any,
        stage: Optional[StageInfo],
        *,
        context_windows: Mapping[str, int],
        log: RateLimitedLog,
        client_provider: Optional[str] = None,
    ) -> tuple[RequestMeta, set[WarningCode]]:
        """What the snapshots say about the request, and the warnings that go with it (the window's).

        ``context_windows`` is the setting (`Config.context_windows`); ``log`` says why a per-call
        window was ignored. ``client_provider`` is an official client's provider (its route): then the
        provider is named so and the model as the client wrote it (an Azure deployment, a proxy's
        alias); LiteLLM's map still gives the window where it knows the name.
        """
        provider, name, window, prices = self.of(model, custom_llm_provider)
        if client_provider is not None:
            provider, name = client_provider, model
        codes: set[WarningCode] = set()
        if prices is None:
            codes.add(WarningCode.PRICE_UNKNOWN)
        configured = configured_window(context_windows, model, name, provider)
        override = window_from(window_override)
        if override is not None:
            window = override
        else:
            if window_override is not None:  # given, but not a window: the caller hears why, the call goes on
                codes.add(WarningCode.INVALID_CONTEXT_WINDOW)
                message = (
                    f"cw_middleware: ignoring {OPTION_CONTEXT_WINDOW}: "
                    f"use a whole number of tokens from 1 to {MAX_CONTEXT_WINDOW}"
                )
                log.warning("window", message)
            if configured is not None:
                window = configured
        if window is None:
            codes.add(WarningCode.UNKNOWN_CONTEXT_WINDOW)
        run_id, stage_id = (stage.run_id, stage.stage_id) if stage else (None, None)
        return RequestMeta(run_id, stage_id, provider, name or None, window, prices), codes


def window_from(value: Any) -> Optional[int]:
    """``cw_context_window``: an int or a string of digits ("2000"), 1 to MAX_CONTEXT_WINDOW; anything else is not a window."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        value = int(text) if text.isascii() and text.isdigit() and len(text) <= 10 else None  # "²" is a digit to isdigit
    return value if isinstance(value, int) and 0 < value <= MAX_CONTEXT_WINDOW else None


def configured_window(configured: Mapping[str, int], model: str, name: str, provider: Optional[str]) -> Optional[int]:
    """``context_windows`` by the model as written first, then with or without its provider prefix."""
    if not configured:
        return None
    candidates = [model, name, split_provider(model).bare]
    if provider:
        candidates.append(f"{provider}/{name}")
    return next((configured[key] for key in candidates if key in configured), None)


def _look_up(model: str, custom_llm_provider: Optional[str]) -> Facts:
    """(provider, model name, max input tokens, prices) from LiteLLM's model map (`model_map`), read as data.

    Where the application runs LiteLLM, LiteLLM names the provider (``get_llm_provider``: its own
    spelling, ``bedrock`` for a Converse model) and resolves what the map does not hold by that name
    (an alias such as ``claude-opus-latest``), but only for a name it routes: for any other it prints
    on the application's stdout. An unknown model keeps its name as written, and our family guess.
    """
    provider, name, found = model_map.resolve(model, custom_llm_provider)
    litellm = model_map.loaded_litellm()
    prefix, slash, _ = model.partition("/")
    if litellm is not None and (custom_llm_provider or found is not None or (slash and model_map.is_provider(prefix))):
        try:
            name, provider = litellm.get_llm_provider(model, custom_llm_provider=custom_llm_provider)[:2]
        except Exception:  # noqa: BLE001 - the map's reading stands
            pass
        if found is None:
            try:
                found = litellm.get_model_info(model, custom_llm_provider=custom_llm_provider)
            except Exception:  # noqa: BLE001 - not in LiteLLM's map either
                found = None
    if provider is None:
        guess = split_provider(model, custom_llm_provider).family
        provider = None if guess == "unknown" else guess
    window = (found.get("max_input_tokens") or found.get("max_tokens")) if found is not None else None
    prices = prices_from(found) if found is not None else None
    return Facts(provider, str(name or model), int(window) if isinstance(window, (int, float)) and window else None, prices)


def min_cacheable_tokens(model: Optional[str]) -> int:
    """The shortest prefix the provider's prompt cache takes, as its documentation gives it (1024 for most).

    Anthropic: 1024 tokens, 2048 for Claude 3 and 3.5 Haiku, 4096 for Claude Opus 4.5 and Haiku 4.5;
    OpenAI caches automatically from 1024; Gemini's implicit cache from 1024 (Flash) or 2048 (Pro).
    """
    name = (model or "").lower()
    if "claude" in name:
        if "haiku-4" in name or "opus-4-5" in name or "opus-4.5" in name:
            return 4096
        if "haiku" in name:
            return 2048
    if "gemini" in name and "pro" in name:
        return 2048
    return 1024
