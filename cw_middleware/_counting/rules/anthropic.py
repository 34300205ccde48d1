"""Anthropic: no public tokenizer; o200k tokens weighed in Claude pieces plus the documented hidden prompts.

Calibration (dev set ``gt_dev.jsonl``, clean records, see benchmarks/accuracy.py):
Claude's tokenizer (Claude 3 to Opus 4.6) splits English prose, code and JSON into
~18% more pieces than o200k_base on average; JSON (tool definitions, the structured-output
schema) is still ``ceil(o200k * scale)``, and text is counted in Claude pieces (round four, below).
Framing follows the turn layout Claude models read: the system prompt sits
before the first turn with no header of its own (``SYSTEM_FRAMING`` 0), every
user/assistant turn opens with a "Human:"/"Assistant:"-style
header (``MESSAGE_FRAMING``) and the reply is primed with one more
(``REQUEST_OVERHEAD``); a one-message request bills ~7 tokens over its text,
and a system message adds only its text. LiteLLM's bundled ``anthropic_tokenizer.json``
is the Claude-2-era vocabulary: it needs the ``tokenizers`` package at run time and
is no closer for Claude 3+ models, so it is not used.

Any request with tools carries a hidden tool-use system prompt whose size
Anthropic documents per model and ``tool_choice`` ("Tool use with Claude",
pricing: e.g. 496 tokens for auto/none and 588 for any/tool on the 4.5 models,
313 / 315 on Claude 4 / 4.1, 675 / 804 on Opus 4.7): the table below is that
documentation, newest first, with the 4.5 sizes for names newer than it. It lands
in ``tools`` (source ``tool_framing``). Evidence on reported usage (clean dev
records; text counted with a reconstruction of Claude's tokenizer so only the
hidden part remains): requests forcing a tool sit ~90 tokens above auto ones on
the 4.5/4.6 models and ~2 above on Claude 4, as the table says; applying the
any/tool size moved Anthropic's median APE 2.8% -> 2.1% (halves 2.6 -> 2.0,
3.1 -> 2.2). Tool definitions are listed as that prompt lists them, one
``<function>{JSON}</function>`` line per tool with the tool's description, name and
parameters, keys sorted (the JSONSchema form of Claude's tool-use prompt), and scaled by
``TOOL_SCALE``: JSON splits closer to o200k than prose does (ctok on the dev set's tool
definitions in that form: 1.092 Claude tokens per o200k token, against ~1.13 for message
text). Round three, on reported usage: with text counted by ctok (so only the rendering
is left), single-message requests sat 6-7 Claude tokens under per tool whatever the model
(1 tool -7, 2 tools -13, 3 tools -20, in each of 7 repositories), which the ``<function>`` line
accounts for (tools median 2.23% -> 1.30% under ctok, halves 2.02 / 2.59 -> 0.97 / 1.50).
In the shipped o200k count, listing and scale together: median 1.96 / 2.16% -> 1.60 /
1.74%, within 2% 0.50 / 0.48 -> 0.54 / 0.56, tools median 1.34 / 1.64% -> 1.09 / 1.19%,
tools p90 7.6 / 8.0% -> 7.4 / 7.1% (halves); the listing alone at the prose scale
overcounts (median 2.43 / 2.64%), the scale alone (1.10) moves the halves apart (1.88 / 1.63%).
Replayed tool_use and tool_result blocks carry their
``toolu_...`` id into the prompt: each id is billed as text (~15 tokens, twice per
call), which accounts for the ~40 tokens per call/result pair that arguments and
results alone miss.

Extended thinking (``thinking={"type": "enabled", ...}``) adds a fixed hidden
instruction of ``THINKING_PROMPT`` tokens (28-29 over the same request without it
on Sonnet 3.7, 4, 4.5 and Haiku 4.5, whatever the budget); ``disabled`` and
``adaptive`` add none (measured 0-1). It counts as ``other`` (source ``thinking``).
Applying it moved p90 APE 15.2% -> 10.7% (halves 16.0 -> 11.8, 15.0 -> 10.2).
``reasoning_effort`` is LiteLLM's spelling of the same switch: LiteLLM sends it as
``thinking`` (``enabled`` with a budget on models before adaptive thinking,
``adaptive`` on Opus 4.6 and later, nothing for ``none``), so it is counted as the
``thinking`` LiteLLM's own mapping produces for the model (`thinking_for_effort`).

Structured outputs (``output_format``) add a fixed instruction block plus the
schema, also measured on reported usage; ``other`` (source ``response_format``).
Models before the 4.5 generation have no native structured output in LiteLLM's
model map: LiteLLM sends a ``response_format`` to them as a forced ``json_tool_call``
tool, so it costs the any/tool prompt plus that tool's definition (still ``other``).

Opus 4.7 and later (Opus 4.8, Opus 5, Sonnet 5) read text with a new tokenizer
that Anthropic says uses 1.0-1.35x the tokens of the previous one, by content type;
ctok's reconstruction of both vocabularies gives 1.37x (prose) and 1.37x (tool JSON)
on the dev set's texts. Those families scale text and tool JSON by a further
``NEW_TOKENIZER_SCALE`` (1.35): p90 APE 10.7% -> 10.2% (halves 11.8 -> 10.2,
10.2 -> 10.2), median 2.11% -> 2.04%.

Tokenizer: ctok (PyPI, MIT), an offline reconstruction of Claude's tokenizer,
puts 95 of 98 text-only dev requests within a token of the reported count where
o200k x 1.18 is off by up to ~10%; it needs Python 3.12 (this package supports 3.11) and is
pure Python (~150 KB of text a second), so it is not run: see docs/accuracy.md (round four
takes a per-token table from it, offline, below).

The no-tool tail (round three, second pass): it is the tokenizer, not framing. No
clean record carries a document block, and the thinking records sit within
8 tokens but one (the thinking rule holds). The largest misses are synthetic prompts of one word
repeated, which Claude splits into two pieces where o200k takes one (~40% under) or
into one piece as o200k does (~18% over, the scale's excess): no single ratio serves
both. Short system strings sit ~3 tokens over in single-turn requests (4
repositories): the ``ceil`` of a scaled short text. Rounding every text instead of
taking its ceiling (the scale unchanged) trades that for the median: p90 10.2 / 10.2%
-> 9.8 / 8.4% but median 1.96 / 2.16% -> 2.49 / 2.59% and within 2% 0.50 / 0.48 ->
0.46 / 0.41 (halves), 20 records into 2% and 36 out; not adopted.

Round four: text in Claude pieces, the request's frame, replayed calls as Claude shows them.
The 1.18 average hid where the two vocabularies differ: a common word is one piece in both, a
rarer one ("farewell") two or three in Claude's, and Claude keeps apart some seams o200k glues.
So text is now its o200k tokens weighed one by one (`claude_pieces`, `PIECES_FILE`: a
letters-only token costs the pieces Claude's vocabulary splits it into, an underscore and
letters (``"_error"``) one more for the underscore, every other token one), plus `split_pieces`:
a newline after punctuation or spaces (o200k ``".\n"``, ``"{\n"``; Claude ``"."``, ``"\n"``, the
seam Gemini splits too) and a space after a digit before a word or a sign (o200k ``" and"``,
``" +"``; Claude ``" "``, ``"+"``). The per-token table comes from ctok's reconstruction of Claude's
vocabulary (MIT License, Copyright (c) 2026 Sander Land), each o200k token counted alone, built
offline once: nothing of ctok runs at estimate time. No ratio is fitted: on the dev set's texts,
against ctok, the summed absolute error of the text counts falls from 8,102 (o200k x 1.18) to
1,895 Claude tokens. Two framing facts the 1.18 overcount had hidden come with it: a one-message
request is framed by 7 tokens (ctok's single-message frame, and what single-turn text-only
requests show once their text is right), so ``REQUEST_OVERHEAD`` is 4, not 3; and a replayed
``tool_use`` is billed as Claude's tool-use format shows a call, an ``<invoke name=...>``
element holding one ``<parameter name=...>`` element per argument (string values bare, others as
JSON), not as JSON: on requests recorded one call/result pair apart, the pair's reported cost
minus the estimate's went from +8 (median; 17 of 53 pairs within 5, 4 repositories) to -2 (25 of
53 within 5). The newer tokenizer (Opus 4.7 and later) keeps its 1.35 on the piece count.
Anthropic (halves): median 1.60 / 1.74% -> 1.19 / 1.26%, p90 10.2 / 10.2% -> 7.1 / 6.7%, within
2% 0.54 / 0.56 -> 0.64 / 0.64; no tools median 3.24 -> 1.94%, p90 14.9 -> 6.2% (the
repeated-word prompts, 40% under or 18% over before, now exact); 82 records closer and 54
further in one half, 78 and 43 in the other. The three go together: without the split pieces
median 1.64 / 1.39%, p90 11.3 / 10.0%; with a 3-token frame 1.33 / 1.73%; with calls as JSON
1.48 / 1.20%, within 2% 0.58 / 0.61; the pieces alone (3-token frame, JSON calls) 1.86 / 1.79%.
Not adopted: the structured-output schema counted in pieces too (its 120-token instruction was
measured with the schema at 1.18): 1.43 / 1.48%. Mirascope's median moves 1.42 -> 1.76% (its
schema-in-prompt and structured-output records sit 2-6% under), every other repository's
improves.

Round three, third pass, not adopted: the structured-output schema at the tool-JSON ratio
(its 120-token instruction unchanged): median 1.60 / 1.74% -> 1.88 / 1.79% (halves), the
instruction's size was fitted with the schema at the prose ratio. With exact text (ctok,
offline) a replayed tool_use / tool_result pair still sits ~5-10 Claude tokens under: the
ids billed as text stand in for the blocks' rendering, which the data does not pin down.
"""

from __future__ import annotations

import inspect
import json
import math
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from ._tiktoken import counter
from .protocol import PromptAdditions

TEXT_SCALE = 1.18  # Claude tokens per o200k token of JSON outside tool definitions (the structured-output schema)
# Claude pieces per o200k token (one byte per token id): a letters-only token (" word", "Word") costs the pieces
# Claude's vocabulary splits it into (ctok's reconstruction of it), every other token one piece.
PIECES_FILE = "claude_pieces.zlib"
# Where Claude keeps apart what o200k glues: a newline after punctuation or spaces (".\n", "{\n", ":\n"),
# and a space after a digit before a word or a sign ("1 and", "2 + 2": o200k " and", " +"; Claude " ", "and").
_SPLIT = re.compile(r"[^\s\w]\n|[^\S\n]\n|(?<=\d) (?=[^\s\d])")
# Claude tokens per o200k token of a tool definition's JSON: JSON splits closer to o200k than prose
# (ctok, offline, on the dev set's tool definitions as listed below: 1.092 overall, 1.06 the median tool).
TOOL_SCALE = 1.09
# A definition as the hidden tool-use prompt lists it: one ``<function>{JSON}</function>`` line per tool.
FUNCTION_OPEN, FUNCTION_CLOSE = "<function>", "</function>\n"
# Opus 4.7 and later (Opus 4.8, Opus 5, Sonnet 5) read text with a new tokenizer: more tokens for the same text.
NEW_TOKENIZER_SCALE = 1.35
_NEW_TOKENIZER_FAMILIES = ("claude-opus-4-7", "claude-opus-4-8", "claude-opus-4-9", "claude-opus-5", "claude-sonnet-5")
MESSAGE_FRAMING = 3
SYSTEM_FRAMING = 0
REQUEST_OVERHEAD = 4
STRUCTURED_OUTPUT_PROMPT = 120
# Extended thinking (``thinking={"type": "enabled", ...}``) adds a fixed hidden instruction, in Claude tokens.
THINKING_PROMPT = 28

# Hidden tool-use system prompt (Anthropic's table, Claude tokens): (name prefixes, auto/none, any/tool).
# Names are matched newest first; the first prefix match wins.
_TOOL_PROMPT_BY_FAMILY: tuple[tuple[tuple[str, ...], int, int], ...] = (
    (("claude-opus-5",), 286, 406),
    (("claude-sonnet-5",), 354, 474),
    (("claude-opus-4-8",), 290, 410),
    (("claude-opus-4-7",), 675, 804),
    (("claude-opus-4-6", "claude-sonnet-4-6"), 497, 589),
    (("claude-opus-4-5", "claude-sonnet-4-5", "claude-haiku-4-5"), 496, 588),
    (("claude-opus-4", "claude-sonnet-4", "claude-4"), 313, 315),
    (("claude-3-7-sonnet", "claude-3-5-sonnet-2024102", "claude-3-5-sonnet-latest"), 346, 313),
    (("claude-3-5-sonnet",), 294, 261),
    (("claude-3-5-haiku",), 264, 355),
    (("claude-3-opus",), 530, 281),
    (("claude-3-sonnet",), 159, 235),
    (("claude-3-haiku",), 264, 340),
)
TOOL_PROMPT_DEFAULT = (496, 588)  # names newer than this table: the current generation's size
# Families LiteLLM sends a response_format to as a forced ``json_tool_call`` tool (no native structured
# output in its model map): the request then carries the any/tool prompt and that tool's definition.
_TOOL_STRUCTURED_OUTPUT_FAMILIES = (
    "claude-opus-4-0",
    "claude-opus-4-1",
    "claude-opus-4-2",
    "claude-sonnet-4-0",
    "claude-sonnet-4-2",
    "claude-4",
    "claude-3",
    "claude-2",
    "claude-instant",
)


def _bare(model: str) -> str:
    """The model name without a route or a Bedrock region/vendor prefix."""
    return model.lower().rsplit("/", 1)[-1].removeprefix("us.").removeprefix("eu.").removeprefix("anthropic.")


def tool_prompt_tokens(model: str) -> tuple[int, int]:
    """(auto/none, any/tool) sizes of the hidden tool-use system prompt for a model name."""
    name = _bare(model)
    for prefixes, auto, forced in _TOOL_PROMPT_BY_FAMILY:
        if name.startswith(prefixes):
            return auto, forced
    return TOOL_PROMPT_DEFAULT


def forces_a_tool(tool_choice: Any) -> bool:
    """True for Anthropic's ``any`` / ``tool`` choices, in LiteLLM's (OpenAI) spelling or Anthropic's own."""
    if isinstance(tool_choice, str):
        return tool_choice in ("required", "any")
    if isinstance(tool_choice, Mapping):
        return tool_choice.get("type") in ("function", "tool", "any") or "function" in tool_choice
    return False


def _scaled(count: Callable[[str], int], scale: float) -> Callable[[str], int]:
    return lambda text: math.ceil(count(text) * scale) if text else 0


@lru_cache(maxsize=1)
def claude_pieces() -> bytes:
    """Claude pieces per o200k token id (`PIECES_FILE`, shipped with the package)."""
    return zlib.decompress(Path(__file__).with_name(PIECES_FILE).read_bytes())


def split_pieces(value: str) -> int:
    """Pieces Claude keeps apart where o200k glues them: a newline after punctuation or spaces, a space after a digit."""
    return len(_SPLIT.findall(value))


def _pieces(count: Callable[[str], int], scale: float) -> Callable[[str], int]:
    """Claude's count of a text: its o200k tokens weighted by `claude_pieces`, plus `split_pieces`."""
    if scale == 1:
        return lambda text: count(text) + split_pieces(text) if text else 0
    return lambda text: math.ceil((count(text) + split_pieces(text)) * scale) if text else 0


def _invoke(name: str, arguments: Any) -> str:
    """A replayed call as Claude's tool-use format shows it: an invoke element with one parameter element per argument."""
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        args = None
    if not isinstance(args, Mapping):  # not an object: its text as it came
        return f'<invoke name="{name}">{arguments if isinstance(arguments, str) else json.dumps(arguments)}</invoke>'
    params = "".join(
        f'<parameter name="{key}">{value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}</parameter>'
        for key, value in args.items()
    )
    return f'<invoke name="{name}">{params}</invoke>'


@dataclass(frozen=True)
class AnthropicRules(PromptAdditions):
    counts_in_batches: ClassVar[bool] = True  # every text through _tiktoken.counter
    tool_prompt: int = TOOL_PROMPT_DEFAULT[0]  # tool_choice auto / none (or absent)
    forced_tool_prompt: int = TOOL_PROMPT_DEFAULT[1]  # tool_choice any / a named tool
    structured_output_as_tool: bool = False  # LiteLLM sends response_format as a forced json_tool_call tool
    name: str = "anthropic:pieces_x1"
    provider: str = "anthropic"
    exact: bool = False
    piece_scale: float = 1.0  # Claude tokens per piece (`claude_pieces`): more on the newer tokenizer
    scale: float = TEXT_SCALE  # Claude tokens per o200k token of the structured-output schema's JSON
    tool_scale: float = TOOL_SCALE  # ... and of a tool definition's JSON
    text: Callable[[str], int] = field(init=False, repr=False, compare=False)
    _raw: Callable[[str], int] = field(default_factory=lambda: counter("o200k_base"), repr=False, compare=False)
    _weighted: Callable[[str], int] = field(
        default_factory=lambda: counter("o200k_base", claude_pieces, "claude_pieces"), repr=False, compare=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", _pieces(self._weighted, self.piece_scale))

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
            total += self.text(_invoke(str(fn.get("name", "")), fn.get("arguments", "")))
            total += self.text(str(call.get("id") or ""))  # a tool_use block carries its id
        return total

    def tool_definition(self, tool: Mapping[str, Any]) -> int:
        """``<function>{"description": ..., "name": ..., "parameters": ...}</function>``, keys sorted, as the prompt lists it."""
        fn = tool.get("function", tool)
        shown = {key: fn[key] for key in ("description", "name", "parameters") if fn.get(key) is not None}
        listed = FUNCTION_OPEN + json.dumps(shown, ensure_ascii=False, sort_keys=True) + FUNCTION_CLOSE
        return math.ceil(self._raw(listed) * self.tool_scale)

    def tools_overhead(self, tools: Sequence[Mapping[str, Any]], tool_choice: Any) -> int:
        if not tools:
            return 0
        return self.forced_tool_prompt if forces_a_tool(tool_choice) else self.tool_prompt

    def thinking_overhead(self, thinking: Any) -> int:
        """Extended thinking's hidden instruction; ``disabled`` and ``adaptive`` add none."""
        return THINKING_PROMPT if isinstance(thinking, Mapping) and thinking.get("type") == "enabled" else 0

    def thinking_for_effort(self, reasoning_effort: Any, model: str) -> Any:
        """The ``thinking`` LiteLLM sends for ``reasoning_effort`` on this model (None: none, or unknown)."""
        return litellm_thinking(reasoning_effort, model)

    def response_format(self, response_format: Any) -> int:
        if not isinstance(response_format, Mapping):
            return 0
        schema = (response_format.get("json_schema") or {}).get("schema")
        if schema is None:
            return 0
        if self.structured_output_as_tool:  # the forced tool's prompt (as if no other tools) and its definition
            tool = {"name": "json_tool_call", "input_schema": {"type": "object", **schema}}
            return self.forced_tool_prompt + self.tool_definition(tool)
        return STRUCTURED_OUTPUT_PROMPT + math.ceil(self._raw(json.dumps(schema, ensure_ascii=False)) * self.scale)

    def request_overhead(self, n_messages: int) -> int:
        return REQUEST_OVERHEAD


def litellm_thinking(reasoning_effort: Any, model: str) -> Any:
    """LiteLLM's own ``reasoning_effort`` -> ``thinking`` mapping for an Anthropic model.

    Asked of LiteLLM rather than copied: which models think adaptively, and what each effort
    maps to, lives in its model map and changes with it. A LiteLLM without the mapping, or an
    effort it refuses (the call itself then fails), counts no thinking.
    """
    effort = reasoning_effort.get("effort") if isinstance(reasoning_effort, Mapping) else reasoning_effort
    return _litellm_thinking(effort, model.rsplit("/", 1)[-1]) if isinstance(effort, str) else None


@lru_cache(maxsize=256)
def _litellm_thinking(effort: str, model: str) -> Any:
    try:
        from ..._kernel.offline import litellm

        config = litellm().AnthropicConfig
        mapping = getattr(config, "map_reasoning_effort", None) or config._map_reasoning_effort
        # LiteLLM 1.83 maps (effort, model); later releases add the provider.
        takes_provider = "custom_llm_provider" in inspect.signature(mapping).parameters
        return mapping(effort, model, "anthropic") if takes_provider else mapping(effort, model)
    except Exception:  # noqa: BLE001 - an unknown effort or LiteLLM layout: no hidden instruction counted
        return None


def rules(model: str) -> AnthropicRules:
    auto, forced = tool_prompt_tokens(model)
    name = _bare(model)
    newer = name.startswith(_NEW_TOKENIZER_FAMILIES)
    piece_scale = NEW_TOKENIZER_SCALE if newer else 1.0
    scale = round(TEXT_SCALE * NEW_TOKENIZER_SCALE, 3) if newer else TEXT_SCALE
    tool_scale = round(TOOL_SCALE * NEW_TOKENIZER_SCALE, 3) if newer else TOOL_SCALE
    # The name keys the estimator's text and tool-count caches: families with different hidden
    # tool prompts or tokenizers must not share a count.
    as_tool = name.startswith(_TOOL_STRUCTURED_OUTPUT_FAMILIES)
    label = f"anthropic:pieces_x{piece_scale}:tp{auto}-{forced}{':so-tool' * as_tool}"
    return AnthropicRules(
        tool_prompt=auto,
        forced_tool_prompt=forced,
        piece_scale=piece_scale,
        scale=scale,
        tool_scale=tool_scale,
        name=label,
        structured_output_as_tool=as_tool,
    )
