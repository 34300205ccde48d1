"""Anthropic: no public tokenizer; a scaled o200k count plus the documented hidden prompts.

Calibration (dev set ``gt_dev.jsonl``, clean records, see benchmarks/accuracy.py):
Claude's tokenizer splits English prose, code and JSON into ~18% more pieces
than o200k_base, so text (and tool-definition JSON) is ``ceil(o200k * TEXT_SCALE)``.
Framing follows the turn layout Claude models read: the system prompt sits
before the first turn with no header of its own (``SYSTEM_FRAMING`` 0), every
user/assistant turn opens with a "Human:"/"Assistant:"-style
header (``MESSAGE_FRAMING``) and the reply is primed with one more
(``REQUEST_OVERHEAD``); a one-message request bills ~7 tokens over its text,
and a system message adds only its text. LiteLLM's bundled ``anthropic_tokenizer.json``
is the Claude-2-era vocabulary: it needs the ``tokenizers`` package at run time and
is no closer for Claude 3+ models, so it is not used.

Any request with tools carries a hidden tool-use system prompt whose size
Anthropic documents per model family and tool_choice ("Tool use with Claude",
pricing table: 346 tokens for auto/none on Claude 4 / Sonnet 3.7, 264 on Haiku 3.5,
530 on Opus 3). The 4.5+ generation bills about 500 on reported usage; older
families land nearer the table once the text scale is applied. Tool definitions
are the JSON of name/description/input_schema, scaled like text. Replayed
tool_use and tool_result blocks carry their ``toolu_...`` id into the prompt:
each id is billed as text (~15 tokens, twice per call), which accounts for the
~40 tokens per call/result pair that arguments and results alone miss.
Structured outputs (``output_format``) add a fixed instruction block plus the
schema, also measured on reported usage.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._tiktoken import counter

TEXT_SCALE = 1.18
TOOL_SCALE = TEXT_SCALE  # one tokenizer ratio for prose and for JSON definitions
MESSAGE_FRAMING = 3
SYSTEM_FRAMING = 0
REQUEST_OVERHEAD = 3
STRUCTURED_OUTPUT_PROMPT = 120

# Hidden tool-use system prompt by family (auto/none), newest first; first prefix match wins.
_TOOL_PROMPT_BY_FAMILY = (
    (("claude-3-5-haiku", "claude-3-haiku"), 264),
    (("claude-3-opus",), 530),
    (("claude-3-sonnet",), 159),
    (
        (
            "claude-3-5-sonnet",
            "claude-3-7-sonnet",
            "claude-sonnet-4-0",
            "claude-sonnet-4-2",
            "claude-opus-4-0",
            "claude-opus-4-1",
            "claude-opus-4-2",
            "claude-4",
        ),
        300,
    ),
)
TOOL_PROMPT_DEFAULT = 500  # Claude 4.5 and newer, and names newer than this table


def tool_prompt_tokens(model: str) -> int:
    name = model.lower().rsplit("/", 1)[-1].removeprefix("anthropic.").removeprefix("us.anthropic.")
    for prefixes, tokens in _TOOL_PROMPT_BY_FAMILY:
        if name.startswith(prefixes):
            return tokens
    return TOOL_PROMPT_DEFAULT


def _scaled(count: Callable[[str], int], scale: float) -> Callable[[str], int]:
    return lambda text: math.ceil(count(text) * scale) if text else 0


@dataclass(frozen=True)
class AnthropicRules:
    tool_prompt: int = TOOL_PROMPT_DEFAULT
    name: str = "anthropic:o200k_x1.18"
    provider: str = "anthropic"
    exact: bool = False
    text: Callable[[str], int] = field(
        default_factory=lambda: _scaled(counter("o200k_base"), TEXT_SCALE), repr=False, compare=False
    )
    _raw: Callable[[str], int] = field(default_factory=lambda: counter("o200k_base"), repr=False, compare=False)

    def message_framing(self, message: Mapping[str, Any]) -> int:
        role = message.get("role")
        if role in ("system", "developer"):
            return SYSTEM_FRAMING
        if role in ("tool", "function"):  # a tool_result block is rendered with its tool_use_id
            return MESSAGE_FRAMING + self.text(str(message.get("tool_call_id") or ""))
        return MESSAGE_FRAMING

    def tool_calls(self, tool_calls: Sequence[Mapping[str, Any]]) -> int:
        total = 0
        for call in tool_calls:
            fn = call.get("function") or {}
            args = fn.get("arguments", "")
            total += self.text(str(fn.get("name", ""))) + self.text(args if isinstance(args, str) else json.dumps(args))
            total += self.text(str(call.get("id") or ""))  # a tool_use block carries its id
        return total

    def tool_definition(self, tool: Mapping[str, Any]) -> int:
        fn = tool.get("function", tool)
        return math.ceil(self._raw(json.dumps(fn, ensure_ascii=False)) * TOOL_SCALE)

    def tools_overhead(self, tools: Sequence[Mapping[str, Any]], tool_choice: Any) -> int:
        return self.tool_prompt if tools else 0

    def response_format(self, response_format: Any) -> int:
        if not isinstance(response_format, Mapping):
            return 0
        schema = (response_format.get("json_schema") or {}).get("schema")
        if schema is None:
            return 0
        return STRUCTURED_OUTPUT_PROMPT + self.text(json.dumps(schema, ensure_ascii=False))

    def request_overhead(self, n_messages: int) -> int:
        return REQUEST_OVERHEAD


def rules(model: str) -> AnthropicRules:
    tokens = tool_prompt_tokens(model)
    # The name keys the estimator's text and tool-count caches: families with different hidden
    # tool prompts must not share a tool count.
    return AnthropicRules(tool_prompt=tokens, name=f"anthropic:o200k_x{TEXT_SCALE}:tp{tokens}")
