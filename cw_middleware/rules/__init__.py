"""Counting rules: how each provider family turns a chat request into input tokens.

The estimator (``estimator.py``) walks a request and asks a `CountingRules` for
the pieces: text, per-message framing, tool calls, tool definitions, the shared
tool overhead (OpenAI's tool namespace, Anthropic's hidden tool-use system
prompt), structured-output schemas and the per-request overhead. It caches the
answers, so rules stay plain functions of their inputs.

`rules_for(model)` picks the rules by provider family from the model name, with
a fallback for names newer than LiteLLM's model map.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Optional, Protocol


class CountingRules(Protocol):
    """One provider family's counting model. Every method returns a token count >= 0."""

    # Read-only members (frozen dataclasses implement them).
    @property
    def name(self) -> str: ...  # cache namespace: equal names must count text (and tools) identically

    @property
    def provider(self) -> str: ...  # "openai", "anthropic", "gemini", or the LiteLLM provider name

    @property
    def exact(self) -> bool: ...  # True when `text` is the provider's own tokenizer

    @property
    def text(self) -> Callable[[str], int]: ...

    def message_framing(self, message: Mapping[str, Any]) -> int: ...

    def tool_calls(self, tool_calls: Sequence[Mapping[str, Any]]) -> int: ...

    def tool_definition(self, tool: Mapping[str, Any]) -> int: ...

    def tools_overhead(self, tools: Sequence[Mapping[str, Any]], tool_choice: Any) -> int: ...

    def response_format(self, response_format: Any) -> int: ...

    def request_overhead(self, n_messages: int) -> int: ...


def split_provider(model: str, custom_llm_provider: Optional[str] = None) -> tuple[str, str]:
    """(provider family, bare model name) from a LiteLLM model string, without importing LiteLLM."""
    bare = model
    prefix = ""
    if "/" in model:
        prefix, bare = model.split("/", 1)
    provider = (custom_llm_provider or prefix or "").lower()
    name = bare.lower()
    if provider in ("openai", "azure", "azure_ai", "text-completion-openai"):
        return "openai", bare
    if provider in ("anthropic", "bedrock", "vertex_ai") and "claude" in name:
        return "anthropic", bare
    if provider in ("gemini", "vertex_ai", "vertex_ai_beta") or name.startswith(("gemini", "gemma")):
        return "gemini", bare
    if name.startswith("claude") or "claude" in name:
        return "anthropic", bare
    if name.startswith(("gpt-", "gpt4", "o1", "o3", "o4", "chatgpt", "text-davinci", "davinci", "ft:gpt")):
        return "openai", bare
    return provider or "unknown", bare


@lru_cache(maxsize=256)
def rules_for(model: str, custom_llm_provider: Optional[str] = None, api: str = "chat") -> CountingRules:
    """The counting rules for a LiteLLM model string (cached; cheap to call per request).

    ``api`` is the API the request is written for ("chat" or "responses"): OpenAI
    frames the two differently. LiteLLM serves a Responses request to any other
    provider through its chat API, so their rules do not depend on it.
    """
    from . import anthropic, gemini, openai

    family, bare = split_provider(model, custom_llm_provider)
    if family == "openai":
        return openai.rules(bare, api)
    if family == "anthropic":
        return anthropic.rules(bare)
    if family == "gemini":
        route = (custom_llm_provider or (model.split("/", 1)[0] if "/" in model else "")).lower()
        return gemini.rules(bare, vertex=route.startswith("vertex_ai"))
    return openai.approximate_rules(family)
