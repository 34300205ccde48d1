"""Gemini: no per-message framing; a scaled o200k count approximates its SentencePiece tokenizer.

Calibration (dev set, clean records, see benchmarks/accuracy.py): Gemini's
vocabulary (shared with Gemma) splits text into ~6% more pieces than
o200k_base, and ``promptTokenCount`` carries no role or turn markers ("Hello"
is 1-2 tokens), so text is ``ceil(o200k * TEXT_SCALE)`` and framing is zero.
Function declarations are billed much more compactly than their JSON
(``DECLARATION_SCALE`` of the o200k count of the declaration JSON, grid-searched
on requests with tools). ``responseSchema`` is not counted. The official
tokenizer would need the ``sentencepiece`` model of Gemma (not shipped offline
by an installed package), so it is not used.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ._tiktoken import counter

TEXT_SCALE = 1.06
DECLARATION_SCALE = 0.7


def _scaled(count: Callable[[str], int], scale: float) -> Callable[[str], int]:
    return lambda text: math.ceil(count(text) * scale) if text else 0


@dataclass(frozen=True)
class GeminiRules:
    name: str = "gemini:o200k_x1.06"
    provider: str = "gemini"
    exact: bool = False
    text: Callable[[str], int] = field(default_factory=lambda: _scaled(counter("o200k_base"), TEXT_SCALE), repr=False, compare=False)
    _raw: Callable[[str], int] = field(default_factory=lambda: counter("o200k_base"), repr=False, compare=False)

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
        return math.ceil(self._raw(json.dumps(fn, ensure_ascii=False)) * DECLARATION_SCALE)

    def tools_overhead(self, tools: Sequence[Mapping[str, Any]], tool_choice: Any) -> int:
        return 0

    def response_format(self, response_format: Any) -> int:
        return 0  # responseSchema constrains decoding; promptTokenCount does not include it

    def request_overhead(self, n_messages: int) -> int:
        return 0


def rules(model: str) -> GeminiRules:
    return GeminiRules()
