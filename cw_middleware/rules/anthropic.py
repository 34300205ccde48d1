"""Anthropic: no public tokenizer; o200k text as an approximation plus documented overheads.

Any request with tools carries a hidden tool-use system prompt (Anthropic's
tool-use pricing table lists it per model family and tool_choice).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ._tiktoken import counter

TOOL_USE_SYSTEM_PROMPT = {"auto": 346, "none": 346, "any": 313, "tool": 313}


@dataclass(frozen=True)
class AnthropicRules:
    name: str = "anthropic:o200k_approx"
    provider: str = "anthropic"
    exact: bool = False
    text: Callable[[str], int] = field(default_factory=lambda: counter("o200k_base"), repr=False, compare=False)

    def message_framing(self, message: Mapping[str, Any]) -> int:
        return 3

    def tool_calls(self, tool_calls: Sequence[Mapping[str, Any]]) -> int:
        total = 0
        for call in tool_calls:
            fn = call.get("function") or {}
            args = fn.get("arguments", "")
            total += 10 + self.text(str(fn.get("name", ""))) + self.text(args if isinstance(args, str) else json.dumps(args))
        return total

    def tool_definition(self, tool: Mapping[str, Any]) -> int:
        fn = tool.get("function", tool)
        return self.text(json.dumps(fn, ensure_ascii=False))

    def tools_overhead(self, tools: Sequence[Mapping[str, Any]], tool_choice: Any) -> int:
        if not tools:
            return 0
        choice = tool_choice.get("type", "tool") if isinstance(tool_choice, Mapping) else (tool_choice or "auto")
        return TOOL_USE_SYSTEM_PROMPT.get(str(choice), 346)

    def response_format(self, response_format: Any) -> int:
        if not isinstance(response_format, Mapping):
            return 0
        schema = (response_format.get("json_schema") or {}).get("schema")
        return self.text(json.dumps(schema)) if schema is not None else 0

    def request_overhead(self, n_messages: int) -> int:
        return 1


def rules(model: str) -> AnthropicRules:
    return AnthropicRules()
