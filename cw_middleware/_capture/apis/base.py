"""The types every API adapter speaks: the parsed request, the forwarded one, a reading, the `Api` protocol."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from ..._kernel.contract import WarningCode


@dataclass(frozen=True, slots=True)
class Parsed:
    """A request as the estimator reads it, whatever API it was written for."""

    model: str
    messages: Any  # chat-shaped messages, tags on (what the caller passed, for Chat Completions)
    options: Mapping[str, Any]  # the estimator's keyword arguments: tools, tool_choice, response_format, ...
    api: str  # which framing the counting rules apply: "chat" | "responses"
    # Responses: the index of the input item each message came from, so tagged ones can be stripped.
    origins: Optional[Sequence[int]] = None
    warnings: frozenset[WarningCode] = frozenset()


@dataclass(slots=True)
class Forward:
    """The request as LiteLLM gets it."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    # We asked for the stream's usage and the caller did not: their stream must not show it.
    hide_usage: bool = False


@dataclass(frozen=True, slots=True)
class Usage:
    """Input, output and cache-read tokens of one response, as the provider reported them."""

    input_tokens: Optional[int]
    output_tokens: Optional[int] = None
    cache_read_tokens: Optional[int] = None
    # Cache read + write where the provider reports writes (an explicit breakpoint's exact prefix count).
    cache_prefix_tokens: Optional[int] = None

    def over(self, earlier: Optional[Usage]) -> Usage:
        """This usage, its unreported fields taken from an earlier event of the same stream (Anthropic's
        ``message_start`` reports the input, its ``message_delta`` the output)."""
        if earlier is None:
            return self
        return Usage(
            earlier.input_tokens if self.input_tokens is None else self.input_tokens,
            earlier.output_tokens if self.output_tokens is None else self.output_tokens,
            earlier.cache_read_tokens if self.cache_read_tokens is None else self.cache_read_tokens,
            earlier.cache_prefix_tokens if self.cache_prefix_tokens is None else self.cache_prefix_tokens,
        )


@dataclass(frozen=True, slots=True)
class Route:
    """Where an official client's request goes (the client says it, not the request): provider and endpoint.

    A LiteLLM request names its route in its own arguments (``custom_llm_provider``, ``api_base``,
    ...); a request made through the ``openai`` or ``anthropic`` client does not, so the client's
    base URL and class say it (clients/routes.py).
    """

    provider: str  # gen_ai.provider.name: openai | azure | anthropic | litellm_proxy | openai_compatible | ...
    # The LiteLLM provider whose model map and counting rules apply (None: by the model's name alone).
    facts_provider: Optional[str]
    # The LiteLLM provider that sends the same wire format to the same endpoint (stream usage, refusals).
    wire_provider: str
    api_base: Optional[str] = None
    api_key: Optional[str] = field(default=None, repr=False)  # for a provider count; never logged
    api_version: Optional[str] = None

    def endpoint(self) -> dict[str, Any]:
        """The route as LiteLLM's arguments spell it (what the call path reads of a LiteLLM request)."""
        spelled = {
            "custom_llm_provider": self.facts_provider,
            "api_base": self.api_base,
            "api_key": self.api_key,
            "api_version": self.api_version,
        }
        return {k: v for k, v in spelled.items() if v is not None}


@dataclass(frozen=True, slots=True)
class Reading:
    """What one response, stream chunk or stream event says about the call."""

    usage: Optional[Usage] = None
    model: Optional[str] = None
    usage_only: bool = False  # a stream chunk that carries usage and nothing else
    unreadable: bool = False  # it carried a usage block we could not read
    tool_calls: tuple[str, ...] = ()  # the name of each tool call it makes (a stream: each call's first chunk)
    finish_reasons: tuple[str, ...] = ()  # why each choice or candidate stopped, as the provider spells it


NOTHING = Reading()


class Api(Protocol):
    """One wire format (Chat Completions, Responses, Anthropic Messages): its request shape, stream usage and usage block."""

    @property
    def operation(self) -> str: ...  # gen_ai.operation.name of its calls

    def parse(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Parsed: ...

    def forward(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        parsed: Parsed,
        tagged: Optional[Sequence[int]],  # entries of parsed.messages that carry a tag; None: check every one
        provider: Optional[str],
        stream_usage: bool = True,  # may a stream be asked for its usage (the stream_usage policy)
        endpoint: Optional[Mapping[str, Any]] = None,  # where it goes, as LiteLLM spells it; None: the kwargs say
    ) -> Forward: ...

    def count_request(self, forward: Forward, model: str) -> dict[str, Any]: ...

    def read(self, obj: Any) -> Reading: ...
