"""Where an official client's requests go: the provider its class and base URL's host say.

A LiteLLM request names its provider (``openai/gpt-4o``, ``custom_llm_provider``); an ``openai``
or ``anthropic`` client's request does not, so the client says it:

* ``openai`` client: ``AzureOpenAI`` or an Azure host (``*.openai.azure.com``,
  ``*.cognitiveservices.azure.com``, ``*.services.ai.azure.com``) -> ``azure``;
  ``api.openai.com`` -> ``openai``; ``api.anthropic.com`` (Anthropic's OpenAI SDK
  compatibility) -> ``anthropic``; a host with ``litellm`` in its name -> ``litellm_proxy``;
  any other host -> ``openai_compatible``.
* ``anthropic`` client: ``AnthropicBedrock`` -> ``bedrock``, ``AnthropicVertex`` -> ``vertex_ai``,
  a ``litellm`` host -> ``litellm_proxy``, any other -> ``anthropic`` (its wire format).
* ``google-genai`` client: Vertex AI (``vertexai=True``) -> ``vertex_ai``, the Gemini API -> ``gemini``.
* a ``boto3`` ``bedrock-runtime`` client -> ``bedrock`` (bedrock.py).

The provider is what spans and snapshots name (``gen_ai.provider.name``); the model keeps the name
the client sends. Read on each call (a few attribute reads): a client's base URL may be changed.
"""

from __future__ import annotations

from typing import Any, Optional
from urllib.parse import urlsplit

from ..apis import Route

_AZURE_HOSTS = (".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com")
_AZURE_CLASSES = frozenset({"AzureOpenAI", "AsyncAzureOpenAI"})
_ANTHROPIC_CLASSES = {"AnthropicBedrock": "bedrock", "AsyncAnthropicBedrock": "bedrock"}
_ANTHROPIC_CLASSES |= {"AnthropicVertex": "vertex_ai", "AsyncAnthropicVertex": "vertex_ai"}


def resource_route(resource: Any, wire: str) -> Route:
    """The route of the client a resource (``client.chat.completions``, ``client.models``) belongs to."""
    if wire == "google.genai":
        return genai_route(getattr(resource, "_api_client", None))
    if wire == "botocore":
        from .bedrock import bedrock_route  # the client itself is the resource

        return bedrock_route(resource)
    return route_of(resource._client, wire)


def genai_route(api_client: Any) -> Route:
    """A ``google-genai`` client's route, from its API client: Vertex AI or the Gemini API, its base URL and key."""
    options = getattr(api_client, "_http_options", None)
    base = _text(getattr(options, "base_url", None)) or None
    key = _text(getattr(api_client, "api_key", None)) or None
    if getattr(api_client, "vertexai", False):
        return Route("vertex_ai", "vertex_ai", "vertex_ai", base, key)
    return Route("gemini", "gemini", "gemini", base, key)


def route_of(client: Any, wire: str) -> Route:
    """The route of an ``openai`` (``wire="openai"``) or ``anthropic`` (``wire="anthropic"``) client object."""
    base = _text(getattr(client, "base_url", None))
    host = (urlsplit(base).hostname or "").lower() if base else ""
    key = _text(getattr(client, "api_key", None)) or None
    classes = {kind.__name__ for kind in type(client).__mro__}
    if wire == "anthropic":
        provider = next((p for name, p in _ANTHROPIC_CLASSES.items() if name in classes), None)
        if provider is not None:
            return Route(provider, provider, provider, base, key)
        if "litellm" in host:
            return Route("litellm_proxy", None, "anthropic", base, key)
        return Route("anthropic", "anthropic", "anthropic", base, key)
    if classes & _AZURE_CLASSES or host.endswith(_AZURE_HOSTS):
        version = _text(getattr(client, "_api_version", None)) or None
        return Route("azure", "azure", "azure", base, key, version)
    if host == "api.openai.com":
        return Route("openai", "openai", "openai", base, key)
    if host == "api.anthropic.com":
        return Route("anthropic", "anthropic", "openai_compatible", base, key)
    if "litellm" in host:
        return Route("litellm_proxy", None, "openai_compatible", base, key)
    return Route("openai_compatible", None, "openai_compatible", base, key)


def _text(value: Optional[object]) -> str:
    return value if isinstance(value, str) else str(value) if value is not None else ""
