"""API adapters: what one wire format's requests and responses look like, one module per format.

A call's lifecycle (``call.Call``) is the same for every entry point: read
the request, estimate it locally, strip the tags, forward it, read the usage.
What differs between Chat Completions and the Responses API sits behind `Api`:

* ``parse``         the request as the estimator reads it: chat-shaped messages and
                    tools, tags still on (`cw.estimate` shares this step);
* ``forward``       the request LiteLLM gets: tags stripped, stream usage asked for
                    where the caller did not ask;
* ``count_request`` the clean request a provider count sends upstream;
* ``read``          the usage and model carried by a response, a stream chunk or a
                    stream event.

A new LiteLLM entry point is one adapter here plus two thin shells (sync, async)
in ``wrapper.py``; `API_OF` says which adapter serves which LiteLLM function. The official
clients (``clients/``) speak the same formats, plus Anthropic Messages (messages.py), Gemini's
GenerateContent (gemini.py) and Bedrock's Converse (converse.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Optional

from .base import NOTHING, Api, Forward, Parsed, Reading, Route, Usage
from .chat import CHAT

__all__ = [
    "API_OF",
    "CHAT",
    "CONVERSE",
    "GENERATE_CONTENT",
    "MESSAGES",
    "NOTHING",
    "RESPONSES",
    "Api",
    "Forward",
    "Parsed",
    "Reading",
    "Route",
    "Usage",
    "adapter",
    "for_estimate",
]

# The adapters other than Chat Completions', by name -> the module holding each: imported when first named
# (`adapter`, or ``from apis import MESSAGES``), so a program that speaks one API holds one adapter (issue 35).
_LATER = {"RESPONSES": ".responses", "MESSAGES": ".messages", "GENERATE_CONTENT": ".gemini", "CONVERSE": ".converse"}

# LiteLLM function name -> the name of the adapter of the API it speaks.
API_OF: dict[str, str] = {"completion": "CHAT", "acompletion": "CHAT", "responses": "RESPONSES", "aresponses": "RESPONSES"}


def __getattr__(name: str) -> Api:
    module = _LATER.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    found: Api = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = found  # from now on a plain global
    return found


def adapter(name: str) -> Api:
    """The adapter named ``name`` (``"CHAT"``, ``"MESSAGES"``: the constants above), imported when first asked for."""
    found: Optional[Api] = globals().get(name) if name == "CHAT" or name in _LATER else None
    return found if found is not None else __getattr__(name)


def for_estimate(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Api:
    """`cw.estimate` takes completion() or responses() arguments: ``input=`` without ``messages=`` is the latter."""
    if "input" in kwargs and "messages" not in kwargs and len(args) < 2:
        return adapter(API_OF["responses"])
    return adapter(API_OF["completion"])
