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

from collections.abc import Mapping
from typing import Any

from .base import NOTHING, Api, Forward, Parsed, Reading, Route, Usage
from .chat import CHAT
from .converse import CONVERSE
from .gemini import GENERATE_CONTENT
from .messages import MESSAGES
from .responses import RESPONSES

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
    "for_estimate",
]

# LiteLLM function name -> the adapter of the API it speaks.
API_OF: dict[str, Api] = {"completion": CHAT, "acompletion": CHAT, "responses": RESPONSES, "aresponses": RESPONSES}


def for_estimate(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Api:
    """`cw.estimate` takes completion() or responses() arguments: ``input=`` without ``messages=`` is the latter."""
    if "input" in kwargs and "messages" not in kwargs and len(args) < 2:
        return API_OF["responses"]
    return API_OF["completion"]
