"""The types every API adapter speaks: the parsed request, the forwarded one, a reading, the `Api` protocol."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Protocol

from ..contract import WarningCode

if TYPE_CHECKING:
    from ..estimator import Estimate


@dataclass(frozen=True)
class Parsed:
    """A request as the estimator reads it, whatever API it was written for."""

    model: str
    messages: Any  # chat-shaped messages, tags on (what the caller passed, for Chat Completions)
    options: Mapping[str, Any]  # the estimator's keyword arguments: tools, tool_choice, response_format, ...
    api: str  # which framing the counting rules apply: "chat" | "responses"
    # Responses: the index of the input item each message came from, so tagged ones can be stripped.
    origins: Optional[Sequence[int]] = None
    warnings: frozenset[WarningCode] = frozenset()


@dataclass
class Forward:
    """The request as LiteLLM gets it."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    # We asked for the stream's usage and the caller did not: their stream must not show it.
    hide_usage: bool = False


@dataclass(frozen=True)
class Usage:
    """Input, output and cache-read tokens of one response, as the provider reported them."""

    input_tokens: Optional[int]
    output_tokens: Optional[int] = None
    cache_read_tokens: Optional[int] = None
    # Cache read + write where the provider reports writes (an explicit breakpoint's exact prefix count).
    cache_prefix_tokens: Optional[int] = None


@dataclass(frozen=True)
class Reading:
    """What one response, stream chunk or stream event says about the call."""

    usage: Optional[Usage] = None
    model: Optional[str] = None
    usage_only: bool = False  # a stream chunk that carries usage and nothing else
    unreadable: bool = False  # it carried a usage block we could not read
    tool_calls: tuple[str, ...] = ()  # the name of each tool call it makes (a stream: each call's first chunk)


NOTHING = Reading()


class Api(Protocol):
    """One LiteLLM API (Chat Completions, Responses): its request shape, stream usage and usage block."""

    @property
    def operation(self) -> str: ...  # gen_ai.operation.name of its calls

    def parse(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Parsed: ...

    def forward(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        parsed: Parsed,
        estimate: Optional[Estimate],
        provider: Optional[str],
        stream_usage: bool = True,  # may a stream be asked for its usage (the stream_usage policy)
    ) -> Forward: ...

    def count_request(self, forward: Forward, model: str) -> dict[str, Any]: ...

    def read(self, obj: Any) -> Reading: ...
