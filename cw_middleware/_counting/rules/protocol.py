"""The counting rules' protocol: what the estimator asks of one provider family's counting model.

`CountingRules` is what every family answers; `PromptAdditions` what only some add to a
prompt, with defaults (none) that a rules class inherits by subclassing it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Optional, Protocol


class PromptAdditions(Protocol):
    """What only some providers add to a prompt; a rules class that adds none inherits these defaults.

    The rules classes subclass this protocol (the defaults are theirs by inheritance); the
    estimator calls every member of `CountingRules`, these included, without probing.
    """

    # Every count goes through `_tiktoken.counter` (the built-in families do): the estimator then
    # hands the tokenizer a request's new texts together (`_tiktoken.batched`).
    counts_in_batches: ClassVar[bool] = False

    def tools_placement(self, system_first: bool, response_format: Any = None) -> int:
        """Where the tool block goes given the first message (OpenAI opens a system message of its own)."""
        return 0

    def response_format_placement(self, system_first: bool, response_format: Any) -> int:
        """Where a structured-output section goes given the first message (OpenAI: a system message of its own)."""
        return 0

    def parallel_result_text(self, content: str) -> Optional[str]:
        """The text a result of a parallel call is shown as, where it is not its content (OpenAI: a JSON string)."""
        return None

    def thinking_overhead(self, thinking: Any) -> int:
        """The hidden instruction a ``thinking`` setting adds (Anthropic's extended thinking)."""
        return 0

    def thinking_for_effort(self, reasoning_effort: Any, model: str) -> Any:
        """The ``thinking`` setting LiteLLM sends for ``reasoning_effort`` on this model; None: none."""
        return None


class CountingRules(PromptAdditions, Protocol):
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


def tool_spec(definition: Mapping[str, Any]) -> Any:
    """What a tool definition defines: a chat tool's ``function`` (or ``custom``, OpenAI's free-form tool), a flat tool itself."""
    if "function" in definition:
        return definition["function"]
    if definition.get("type") == "custom" and isinstance(definition.get("custom"), Mapping):
        return definition["custom"]
    return definition
