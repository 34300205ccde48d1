"""Gemini: no per-message framing; o200k text as an approximation of its SentencePiece tokenizer.

responseSchema is not counted by Gemini; function declarations are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ._tiktoken import counter


@dataclass(frozen=True)
class GeminiRules:
    name: str = "gemini:o200k_approx"
    provider: str = "gemini"
    exact: bool = False
    text: Callable[[str], int] = field(default_factory=lambda: counter("o200k_base"), repr=False, compare=False)

    def message_framing(self, message: Mapping[str, Any]) -> int:
        return 0

    def tool_calls(self, tool_calls: Sequence[Mapping[str, Any]]) -> int:
        total = 0
        for call in tool_calls:
            fn = call.get("function") or {}
            args = fn.get("arguments", "")
            total += self.text(str(fn.get("name", ""))) + self.text(args if isinstance(args, str) else json.dumps(args))
        return total

    def tool_definition(self, tool: Mapping[str, Any]) -> int:
        fn = tool.get("function", tool)
        return self.text(json.dumps(fn, ensure_ascii=False))

    def tools_overhead(self, tools: Sequence[Mapping[str, Any]], tool_choice: Any) -> int:
        return 0

    def response_format(self, response_format: Any) -> int:
        return 0

    def request_overhead(self, n_messages: int) -> int:
        return 0


def rules(model: str) -> GeminiRules:
    return GeminiRules()
