"""The response format as LiteLLM sends it: what the estimator counts for ``response_format=``.

A pydantic model class is converted per provider before it goes on the wire; the counting
rules count dicts, so the class is converted here the way LiteLLM converts it.
"""

from __future__ import annotations

import sys
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
    """The conversion of the library that sends it: LiteLLM's (``type_to_response_format_param``, as each
    provider config calls it) where the application runs LiteLLM, else the ``openai`` client's own, which
    LiteLLM's copies.

    OpenAI and most providers: OpenAI's strict schema (``$ref``s inlined, ``additionalProperties:
    false``); Anthropic: pydantic's schema with ``/$defs/`` refs; Gemini: pydantic's schema as is.
    Neither library is imported here: an ``openai`` client's call never loads LiteLLM for it.
    """
    if provider == "gemini":
        return _plain_schema(model_class)
    try:
        litellm = sys.modules.get("litellm")
        if litellm is not None and hasattr(litellm, "utils"):
            ref_template = "/$defs/{model}" if provider == "anthropic" else None
            return litellm.utils.type_to_response_format_param(model_class, ref_template=ref_template)
        if "openai" in sys.modules:
            from openai.lib._parsing._completions import type_to_response_format_param

            return type_to_response_format_param(model_class)
    except Exception:  # noqa: BLE001 - moved, or refused the class: pydantic's schema is the next best
        pass
    return _plain_schema(model_class)


def _plain_schema(model_class: type[BaseModel]) -> dict[str, Any]:
    schema = model_class.model_json_schema()
    return {"type": "json_schema", "json_schema": {"schema": schema, "name": model_class.__name__, "strict": True}}
