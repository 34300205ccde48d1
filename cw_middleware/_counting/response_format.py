"""The response format as LiteLLM sends it: what the estimator counts for ``response_format=``.

A pydantic model class is converted per provider before it goes on the wire; the counting
rules count dicts, so the class is converted here the way LiteLLM converts it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from pydantic import BaseModel


def response_format_as_sent(response_format: Any, provider: str) -> Any:
    """``response_format`` as LiteLLM puts it on the wire: a pydantic model class becomes its JSON-schema dict.

    LiteLLM accepts a ``BaseModel`` subclass and converts it per provider before sending;
    the rules count dicts, so a class would otherwise count nothing at all.
    """
    if isinstance(response_format, type) and issubclass(response_format, BaseModel):
        return _pydantic_response_format(response_format, provider)
    return response_format


@lru_cache(maxsize=128)
def _pydantic_response_format(model_class: type[BaseModel], provider: str) -> Any:
    """LiteLLM's own conversion (``type_to_response_format_param``), as each provider config calls it.

    OpenAI and most providers: OpenAI's strict schema (``$ref``s inlined, ``additionalProperties:
    false``); Anthropic: pydantic's schema with ``/$defs/`` refs; Gemini: pydantic's schema as is.
    Imported lazily: only a request with a model class pays for it, and the call path has
    LiteLLM loaded anyway (the read side never estimates).
    """
    if provider == "gemini":
        schema: Any = model_class.model_json_schema()
        return {"type": "json_schema", "json_schema": {"schema": schema, "name": model_class.__name__, "strict": True}}
    try:
        from .._offline import litellm

        type_to_response_format_param = litellm().utils.type_to_response_format_param

        ref_template = "/$defs/{model}" if provider == "anthropic" else None
        return type_to_response_format_param(model_class, ref_template=ref_template)
    except Exception:  # noqa: BLE001 - LiteLLM moved it, or refused the class: pydantic's schema is the next best
        schema = model_class.model_json_schema()
        return {"type": "json_schema", "json_schema": {"schema": schema, "name": model_class.__name__, "strict": True}}
