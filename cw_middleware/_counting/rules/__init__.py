"""Counting rules: how each provider family turns a chat request into input tokens.

The estimator (``estimator.py``) walks a request and asks a `CountingRules` for
the pieces: text, per-message framing, tool calls, tool definitions, the shared
tool overhead (OpenAI's tool namespace, Anthropic's hidden tool-use system
prompt), structured-output schemas and the per-request overhead. It caches the
answers, so rules stay plain functions of their inputs.

`rules_for(model)` picks the rules by provider family from the model name, with
a fallback for names newer than LiteLLM's model map. `split_provider` is the one
place a LiteLLM model string is taken apart (routing prefix, family, bare name):
the rules, the model facts and the provider-count target all ask it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple, Optional

from .protocol import CountingRules, PromptAdditions, tool_spec

__all__ = ["CountingRules", "ModelName", "PromptAdditions", "rules_for", "split_provider", "tool_spec"]


class ModelName(NamedTuple):
    """A LiteLLM model string taken apart, by its own rules (LiteLLM is not imported: it takes seconds)."""

    family: str  # "openai" | "anthropic" | "gemini", else the route (or "unknown")
    bare: str  # the model without LiteLLM's routing prefix
    route: str  # the routing prefix or custom_llm_provider, lower-cased ("" for neither)


def split_provider(model: str, custom_llm_provider: Optional[str] = None) -> ModelName:
    """(provider family, bare model name, route) from a LiteLLM model string, without importing LiteLLM."""
    bare = model
    prefix = ""
    if "/" in model:
        prefix, bare = model.split("/", 1)
    route = (custom_llm_provider or prefix or "").lower()
    name = bare.lower()
    if route in ("openai", "azure", "azure_ai", "text-completion-openai"):
        return ModelName("openai", bare, route)
    if route in ("anthropic", "bedrock", "vertex_ai") and "claude" in name:
        return ModelName("anthropic", bare, route)
    if route in ("gemini", "vertex_ai", "vertex_ai_beta") or name.startswith(("gemini", "gemma")):
        return ModelName("gemini", bare, route)
    if name.startswith("claude") or "claude" in name:
        return ModelName("anthropic", bare, route)
    if name.startswith(("gpt-", "gpt4", "o1", "o3", "o4", "chatgpt", "text-davinci", "davinci", "ft:gpt")):
        return ModelName("openai", bare, route)
    return ModelName(route or "unknown", bare, route)


@lru_cache(maxsize=256)
def rules_for(model: str, custom_llm_provider: Optional[str] = None, api: str = "chat") -> CountingRules:
    """The counting rules for a LiteLLM model string (cached; cheap to call per request).

    ``api`` is the API the request is written for ("chat" or "responses"): OpenAI
    frames the two differently. LiteLLM serves a Responses request to any other
    provider through its chat API, so their rules do not depend on it.
    """
    # Each family's module is imported when a model of it is first counted: a program that calls one
    # provider holds only that provider's rules.
    family, bare, route = split_provider(model, custom_llm_provider)
    if family == "anthropic":
        from . import anthropic

        return anthropic.rules(bare)
    if family == "gemini":
        from . import gemini

        return gemini.rules(bare, vertex=route.startswith("vertex_ai"))
    from . import openai

    return openai.rules(bare, api) if family == "openai" else openai.approximate_rules(family)
