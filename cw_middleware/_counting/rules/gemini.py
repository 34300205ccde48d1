"""Gemini: no per-message framing; an o200k count plus the pieces Gemini's vocabulary splits out.

Text: ``promptTokenCount`` carries no role or role names ("Hello" is 1-2 tokens), and
Gemini's vocabulary (shared with Gemma) tiles English prose into about as many pieces
as o200k_base, except in two places where it splits what o200k merges, so text is the
o200k count (at least 1 for non-empty text) plus those pieces:

* Digits. The Gemma report (Gemma Team, 2024, "Gemma: Open Models Based on Gemini
  Research and Technology") says Gemma uses a subset of Gemini's SentencePiece
  tokenizer and that it splits digits, while o200k takes digits three at a time, so
  each run of n digits costs n pieces, not ceil(n / 3) (`split_digit_pieces`).
  Counting digits so moved Gemini's median APE 5.18% -> 3.96%, p90 18.2% -> 16.8%
  (halves 4.86 / 18.8 -> 2.56 / 18.1 and 5.33 / 16.9 -> 4.78 / 16.0; no-tools 2.5
  requests 5.99% -> 1.61%), with a prose scale refitted from 1.06 to 1.04 once digits
  no longer inflated it.
* Newlines (round three, fourth pass). Gemma's vocabulary keeps newline runs as pieces
  of their own, while o200k's pre-tokenizer glues a newline run to the punctuation or
  spaces before it (``.\n\n``, ``",\n``, ``{\n``, ``  \n`` are single o200k tokens),
  so each such seam costs one more piece (`split_newline_pieces`). That was what the
  1.04 scale stood for: fitted by least squares on the text-only Gemini API requests
  (no tools, no thought parts), Gemini's count is 1.00 per o200k token plus 1.12 per
  merged newline, and pretty-printed JSON in a prompt (a schema in a system
  instruction), 10-15% over o200k x 1.04 before, now lands exactly. With the scale
  dropped to 1.00 (scored on both halves by source file): median 2.56 / 4.78% ->
  2.14 / 4.61%, within 2% 0.46 / 0.30 -> 0.50 / 0.39, no-tools p90 32.7 / 10.6% ->
  29.2 / 8.9%; overall p90 18.1 / 16.0% -> 18.3 / 16.5% (the records at the tail are
  ones whose miss is an unbilled-looking 2.5 signature or a dropped thought part, a
  token further). The newline rule at the old 1.04 scale is worse (median 2.56 ->
  3.43% in one half): the two go together.

Framing: the 2.5 and later models bill one token per Content (each turn, and the system
instruction); 2.0 bills none. Checked with the Gemma 3 SentencePiece vocabulary, which
reproduces 2.0 text counts exactly and 2.5/3 counts to that one token per Content.

Tools, calls and results follow what Google's own SDK counts
(``google.genai.local_tokenizer._TextsAccumulator``, which mirrors countTokens):
only the *text values* of a function declaration are billed -- its name,
description, each property's key, description, format, enum values and the
``required`` names -- tokenized piece by piece, never the JSON syntax or type
names. A ``functionCall`` bills its name plus the keys and string values of its
arguments, a ``functionResponse`` its name plus the keys and string values of
the response object. That is exactly the 1.x/2.0 generation. The 2.5 and later
models (and names newer than this table) render each declaration as a JSON
object in the prompt: billed close to the o200k count of the declaration's
JSON, with ``additionalProperties`` and ``title`` annotations dropped and local
``$ref``s inlined (checked on reported usage; see benchmarks/accuracy.py).

Round three, fourth pass: on the Gemini API, a 1.x/2.0 declaration bills two tokens over
its text values (`TEXT_VALUE_DECLARATION_EXTRA`; Vertex AI does not: its text-value
declarations sit on or over the rule already). Evidence: 2.0 requests with OpenAPI-typed
``parameters`` (the form LiteLLM sends) and one or two small declarations sat 2-5 under
(4 repositories, both halves); 13 records closer, 8 further (6 of them one repository's
``parametersJsonSchema`` declarations, which were exact and go 2 over), 4 into 2%, 4 out.
Gemini (after the newline rule, halves): median 2.14 / 4.61% -> 2.04 / 4.48%, p90
18.3 / 16.5% -> 16.9 / 16.5%, within 2% unchanged (0.50 / 0.39). Not adopted: the type
names billed as text instead (median 2.14 -> 2.23% in one half), one constant per request
(3-5 tokens: one half worse at each).

``responseSchema`` is not counted in ``promptTokenCount``; neither are
``thinkingConfig`` (2.5 requests with and without it: same residual, 0-2 tokens)
nor ``toolConfig`` (the same request with mode AUTO and NONE: the same count).
The system instruction is one more Content: its text plus the marker.

Vertex AI counts differently from the Gemini API for the same request: every
generation bills a declaration as its text values (as 2.0 does) and no Content
markers. Evidence: identical requests recorded against both endpoints (Gemini 3
Flash) report 14 tokens fewer on Vertex for one small declaration (its JSON form
vs its name), and single-turn Vertex requests of 2.5 and 3 sit exactly one token
(the marker) under the Gemini API rule. Applying both moved Gemini's median APE
6.94% -> 5.18%, p90 28.2% -> 18.2% (halves 6.50/28.2 -> 4.86/18.8, 7.16/28.1 -> 5.33/16.9).

A ``thoughtSignature`` on a replayed function call is billed by Gemini 3 on the
Gemini API (~0.2 token per base64 character) and not at all on Vertex AI: the same
requests recorded against both endpoints (one test matrix, 29 Vertex records) show
reported counts without the signature on Vertex, and ~0.2 token a character on the
Gemini API. Gemini 2.5 bills little of it (0.01 token a character for 2.5 Pro,
0.02-0.2 for 2.5 Flash): counted as nothing. LiteLLM keeps signatures in ``provider_specific_fields``; when a
message carries one there, it is counted for the Gemini API (see `tool_calls`).
Replayed ``thought`` parts are billed as text.

Round four: on the Gemini API the 2.5 and later models (those that render declarations as
JSON) bill a replayed function call, with its response, ``CALL_RENDERING`` (18) tokens beyond
its text values; a billed thought signature stands in for that rendering up to its size, not on
top of it (`GeminiRules.tool_calls`: the larger of the two). Evidence, on requests recorded one
call/response pair apart in the same conversation (the difference of the reported counts is the
pair's cost): on 2.5 Flash and 2.5 Pro a pair with string arguments sat 18-23 tokens (median 19)
over its text values and two Content markers, whatever its signature's length (unbilled on 2.5)
and with none (11 pairs, 4 repositories; numeric arguments, not text values, 22-25 in 3 pairs of
2 more; 2 parallel calls 44); on 2.0 the same pairs sit within 2 (no
rendering) and on Vertex AI within 2 (Gemini 3). Gemini 3 calls with a real signature fit the
0.2-token-a-character rate alone (single-call pairs +2 on average), but calls without a
signature, or with the documented validator-skip placeholder (44 characters: 8 tokens at that
rate), sat 10-11 tokens under per call (4 cross-provider replays, 3-4 calls each): ~18 a call,
as on 2.5, which also accounts for the -14 intercept the slope fit over long signatures found
(round three, third pass). Gemini (halves): median 2.04 / 4.48% -> 1.96 / 3.61%, p90
16.9 / 16.5% -> 13.5 / 16.5%, within 2% 0.50 / 0.39 -> 0.51 / 0.45; 13 records closer and 4
further in one half, 12 and 3 in the other (the further ones: 2.5 declarations already over,
a parallel call beside a real signature).

Round five: on the Gemini API, 2.5 (Flash and Pro) bills a function declaration as its JSON
*without* spaces (``separators=(",", ":")``, the same form otherwise: annotations dropped, local
``$ref``s inlined) plus ``COMPACT_DECLARATION_EXTRA`` (4) tokens, and a request that declares
functions ``COMPACT_DECLARATIONS_OVERHEAD`` (2) more, once (`GeminiRules.tools_overhead`).
Gemini 3 and newer names keep the JSON with spaces (its flat declarations match that form less a
token or so; the compact form and wrapper move its records further: 9 closer, 19 further in
half 0). Evidence: the
single-declaration, single-turn 2.5 Flash requests without a system instruction sit exactly 6 over
the compact JSON (8 records, 3 repositories, both halves: parameterless declarations, a
one-property one, a 3,900-token one), where the JSON with spaces was 2 under to 5 over; the
multi-declaration ones sit 9 (two declarations) and 13-14 (three) over, which 2 + 4 a declaration
fits (10, 14, 14) better than 6 a declaration (12, 18, 18). Gemini (halves by source file): median
1.96 / 3.61% -> 1.82 / 1.81%, p90 13.49 / 16.45% -> 9.51 / 16.45%, within 2% 0.515 / 0.455 ->
0.567 / 0.509; 19 records closer and 4 further in half 0 (9 into 2%, 2 out), 14 and 10 in half 1
(8 in, 2 out), 4 and 5 repositories. The further ones: declarations with a property that is an
object itself (2 records, ~40 tokens a nested object under, half 1 only), the recursive ``$ref``
pair (~400 under before and after), four streamed 2.5 Flash recordings whose replayed signature
bills (see below), a two- and a three-declaration request of two repositories (+4 -> -15, and
-19 -> -35 for three declarations without ``required``), and four records near exact (+1 -> -2
twice, -2 -> -7, 0 -> -8). 6 a declaration (no per-request part) scores 1.82 / 2.22% median,
9.51 / 14.99% p90: not taken, the multi-declaration requests fit it worse.

Round six: a schema that refers to itself (a local ``$ref`` back into its own definition, as Pydantic
emits for a tree) is unrolled `RECURSION_UNROLL` (10) times and the next reference left as it is
(`_Refs`); references that do not come back are inlined whole, however deep the chain. Google says
recursive schemas are "unrolled to a finite depth" (its developer forum, of ``responseJsonSchema``);
before, counting stopped inlining at six levels of nesting, an arbitrary cut. Evidence, thin: one
recursive declaration (one repository, one file, 2 records, both in one half). Each further copy of
its node is 55 tokens, and 10 copies land its single-turn request exactly (2 over; 9 copies are 53
under, 11 are 57 over); its two-turn request, with a replayed 2.5 signature, lands 28 under (3.3%).
Gemini (halves by source file): median 1.82 / 1.81% -> 1.82 / 1.77%, p90 9.51 / 16.45% -> 9.51 /
13.9%; no other record changes. Vertex AI and 2.0 take the same unrolling for their text values (not
measured: no recursive declaration is recorded there).

Searched in round three's second pass and not adopted (function declarations on the
Gemini API, 2.5 and later): the declaration's JSON with compact separators matches
flat declarations on Gemini 3 exactly (a parameterless one bills 4 tokens under the
default-separator form there, but 1 over it on 2.5 Flash), while a property that is
itself an object, or a ``$ref``'d tree, bills well over either form (~15-30 tokens a
nested object). Scored on the Gemini requests with tools (halves by source file): the
default-separator form (kept) 4.10 / 7.35% median, 16.7 / 16.8% p90; compact JSON
6.85 / 7.61%, 20.2 / 24.9%; compact JSON at the text scale 6.07 / 6.46%, 19.0 / 24.0%;
default-separator JSON at the text scale 4.67 / 6.51%, 19.0 / 21.2%; compact plus a
per-declaration constant (1 or 2) worse still. The rendering differs by generation
and by nesting in a way none of these forms captures. (Round five: scored per generation, compact
JSON plus a wrapper fits 2.5 flat declarations; see above. Round three scored 2.5 and 3 together.)

Round three, third pass, not adopted: Gemini 3's signature rate refitted to the slope over
the long signatures (0.211 token a character, intercept -14): median 2.56 / 4.78%
-> 3.09 / 3.94%, within 2% 0.46 / 0.30 -> 0.43 / 0.38 (halves): one half worse.

Round three, fourth pass, noted and not adopted: Gemini 2.5 Flash bills a replayed signature at
~0.16-0.24 token a character on streamed requests and ~0.01-0.08 on non-streamed ones (the
recordings' own flag, 3 repositories); the scored requests do not carry ``stream``, so no rate
keyed on it could be checked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ._tiktoken import counter
from .protocol import PromptAdditions

TEXT_SCALE = 1.0  # Gemini pieces per o200k token of prose, once digits and newlines are split out
_DIGIT_RUN = re.compile(r"[0-9]+")
# A newline o200k glues to the punctuation or horizontal whitespace before it (one token: ".\n\n", ",\n", " \n").
_MERGED_NEWLINE = re.compile(r"[^\s\w]\n|[^\S\n]\n")
CONTENT_MARKER = 1
# 2.0 (and older) on the Gemini API: a declaration bills 2 tokens over its text values (not on Vertex AI).
TEXT_VALUE_DECLARATION_EXTRA = 2
# 2.5+ on the Gemini API: tokens a replayed function call (with its response) bills beyond its text values.
CALL_RENDERING = 18
# 2.5 on the Gemini API: a declaration is its compact JSON plus these, and a request that declares functions these more.
COMPACT_DECLARATION_EXTRA = 4
COMPACT_DECLARATIONS_OVERHEAD = 2
_COMPACT_DECLARATION_FAMILIES = ("gemini-2.5",)
# 2.5+: the declaration's JSON (o200k, default separators) without these annotations.
_DROPPED_SCHEMA_KEYS = frozenset({"additionalProperties", "title", "$defs", "definitions", "$schema"})
# A local $ref that refers back to itself is unrolled this many times, then left as a bare $ref (see the docstring).
RECURSION_UNROLL = 10
# Bounds on what one declaration is unrolled into: Gemini bills a schema that refers to itself in two places
# exponentially; counting stops inlining past this many $refs, and stops at this nesting (a caller's schema).
_MAX_REF_EXPANSIONS = 2000
_MAX_NESTING = 64
# Base64 characters of a thought signature per billed token (Gemini API, Gemini 3: ~0.2 token/char).
SIGNATURE_CHARS_PER_TOKEN = 5
# Families whose replayed thought signatures cost (next to) nothing on the Gemini API too.
_UNBILLED_SIGNATURE_FAMILIES = ("gemini-1.", "gemini-2.", "gemma")
# Families that bill declarations as their text values only (Google's SDK accumulator).
_TEXT_VALUE_FAMILIES = ("gemini-1.", "gemini-2.0", "gemini-pro", "gemma")


def split_digit_pieces(value: str) -> int:
    """Pieces Gemini's vocabulary adds over o200k for the digits of a text.

    Gemini's SentencePiece model splits every digit into a piece of its own; o200k's
    pre-tokenizer takes digits up to three at a time (each group one token).
    """
    extra = 0
    for run in _DIGIT_RUN.finditer(value):
        n = len(run.group())
        extra += n - -(-n // 3)
    return extra


def split_newline_pieces(value: str) -> int:
    """Pieces Gemini's vocabulary adds over o200k for the newlines of a text.

    Gemini's SentencePiece model keeps a newline run as a piece of its own; o200k's
    pre-tokenizer glues it to a run of punctuation or spaces before it (``.\\n\\n``,
    ``",\\n``, ``{\\n`` are one token each). A newline after a letter or a digit, or at
    the start of a text, is its own token in both.
    """
    return len(_MERGED_NEWLINE.findall(value)) if "\n" in value else 0


def _scaled(count: Callable[[str], int], scale: float) -> Callable[[str], int]:
    def text(value: str) -> int:
        if not value:
            return 0
        return max(1, round(count(value) * scale) + split_digit_pieces(value) + split_newline_pieces(value))

    return text


def _schema_values(schema: Any, out: list[str], refs: _Refs, seen: tuple[str, ...] = (), depth: int = 0) -> None:
    """The texts Google's accumulator takes from a schema (format, description, enum, required, keys)."""
    schema, seen = refs.resolve(schema, seen)
    if not isinstance(schema, Mapping) or depth > _MAX_NESTING:
        return
    for key in ("format", "description"):
        if isinstance(schema.get(key), str) and schema[key]:
            out.append(schema[key])
    for key in ("enum", "required"):
        if isinstance(schema.get(key), list):
            out.extend(str(v) for v in schema[key])
    items = schema.get("items")
    if isinstance(items, Mapping):
        _schema_values(items, out, refs, seen, depth + 1)
    props = schema.get("properties")
    if isinstance(props, Mapping):
        for name, sub in props.items():
            out.append(str(name))
            _schema_values(sub, out, refs, seen, depth + 1)
    for key in ("anyOf", "oneOf", "allOf", "any_of"):
        if isinstance(schema.get(key), list):
            for sub in schema[key]:
                _schema_values(sub, out, refs, seen, depth + 1)


def _value_texts(value: Any, out: list[str]) -> None:
    """Keys and string values of a JSON value (numbers, booleans and null are not text)."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, Mapping):
        for key, sub in value.items():
            out.append(str(key))
            _value_texts(sub, out)
    elif isinstance(value, list):
        for sub in value:
            _value_texts(sub, out)


class _Refs:
    """A declaration's local ``$ref``s, inlined as Gemini does: one that refers back to itself `RECURSION_UNROLL` times."""

    def __init__(self, root: Any) -> None:
        self.root = root if isinstance(root, Mapping) else {}
        self.budget = _MAX_REF_EXPANSIONS

    def resolve(self, schema: Any, seen: tuple[str, ...]) -> tuple[Any, tuple[str, ...]]:
        """The schema with its ``$ref`` inlined, and the refs inlined on the way to it (``seen``)."""
        ref = schema.get("$ref") if isinstance(schema, Mapping) else None
        if not isinstance(ref, str) or not ref.startswith("#/") or self.budget <= 0 or seen.count(ref) >= RECURSION_UNROLL:
            return schema, seen
        target: Any = self.root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, Mapping) else None
        if not isinstance(target, Mapping):
            return schema, seen
        self.budget -= 1
        return {**target, **{k: v for k, v in schema.items() if k != "$ref"}}, (*seen, ref)


def _json_form(schema: Any, refs: _Refs, seen: tuple[str, ...] = (), depth: int = 0) -> Any:
    """The schema as the 2.5+ models see it: refs inlined, annotations dropped."""
    schema, seen = refs.resolve(schema, seen)
    if isinstance(schema, list):
        return [_json_form(v, refs, seen, depth + 1) for v in schema]
    if not isinstance(schema, Mapping):
        return schema
    if depth > _MAX_NESTING:
        return {}
    out = {}
    for key, value in schema.items():
        if key in _DROPPED_SCHEMA_KEYS:
            continue
        if key == "properties" and isinstance(value, Mapping):
            out[key] = {name: _json_form(sub, refs, seen, depth + 1) for name, sub in value.items()}
        else:
            out[key] = _json_form(value, refs, seen, depth + 1)
    return out


def _parse(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


@dataclass(frozen=True)
class GeminiRules(PromptAdditions):
    counts_in_batches: ClassVar[bool] = True  # every text through _tiktoken.counter
    json_declarations: bool = True  # the Gemini API, 2.5 and later; Vertex AI and 2.0 bill text values
    content_markers: bool = True  # 2.5 and later: one token per Content
    bills_signatures: bool = True  # the Gemini API does; Vertex AI does not
    declaration_extra: int = 0  # 2.0 on the Gemini API: tokens a text-value declaration bills over its texts
    call_rendering: int = 0  # 2.5+ on the Gemini API: tokens a replayed call bills beyond its texts (a signature's included)
    compact_declarations: bool = False  # 2.5 on the Gemini API: a declaration's JSON without spaces, plus a fixed wrapper
    name: str = f"gemini:o200k_x{TEXT_SCALE}r"
    provider: str = "gemini"
    exact: bool = False
    text: Callable[[str], int] = field(
        default_factory=lambda: _scaled(counter("o200k_base"), TEXT_SCALE), repr=False, compare=False
    )
    _raw: Callable[[str], int] = field(default_factory=lambda: counter("o200k_base"), repr=False, compare=False)

    def _pieces(self, texts: Sequence[str]) -> int:
        return sum(self.text(t) for t in texts if t)

    def message_framing(self, message: Mapping[str, Any]) -> int:
        # 2.5 and later bill one token per Content (turn, system instruction included); 2.0 none.
        return CONTENT_MARKER if self.content_markers else 0

    def tool_calls(self, tool_calls: Sequence[Mapping[str, Any]]) -> int:
        total = 0
        for call in tool_calls:
            fn = call.get("function") or {}
            texts = [str(fn.get("name", ""))]
            _value_texts(_parse(fn.get("arguments", "")), texts)
            # A billed signature stands in for the call's rendering up to that rendering's size, not on top of it.
            signature = _signature_tokens(call) if self.bills_signatures else 0
            total += self._pieces(texts) + max(self.call_rendering, signature)
        return total

    def tool_definition(self, tool: Mapping[str, Any]) -> int:
        fn = tool.get("function", tool)
        if not isinstance(fn, Mapping):
            return 0
        params = fn.get("parameters")
        if self.json_declarations:
            form = {k: v for k, v in fn.items() if k not in ("parameters", "strict")}
            if isinstance(params, Mapping):
                form["parameters"] = _json_form(params, _Refs(params))
            if self.compact_declarations:
                return self._raw(json.dumps(form, separators=(",", ":"), ensure_ascii=False)) + COMPACT_DECLARATION_EXTRA
            return self._raw(json.dumps(form, ensure_ascii=False))
        texts = [str(fn.get("name", ""))]
        if isinstance(fn.get("description"), str):
            texts.append(fn["description"])
        if isinstance(params, Mapping):
            _schema_values(params, texts, _Refs(params))
        return self._pieces(texts) + self.declaration_extra

    def tools_overhead(self, tools: Sequence[Mapping[str, Any]], tool_choice: Any) -> int:
        return COMPACT_DECLARATIONS_OVERHEAD if self.compact_declarations and tools else 0

    def response_format(self, response_format: Any) -> int:
        return 0  # responseSchema constrains decoding; promptTokenCount does not include it

    def request_overhead(self, n_messages: int) -> int:
        return 0


def _signature_tokens(call: Mapping[str, Any]) -> int:
    """A replayed thought signature, where LiteLLM keeps it (provider_specific_fields)."""
    fields = call.get("provider_specific_fields")
    sig = fields.get("thought_signature") if isinstance(fields, Mapping) else None
    return len(sig) // SIGNATURE_CHARS_PER_TOKEN if isinstance(sig, str) else 0


def rules(model: str, vertex: bool = False) -> GeminiRules:
    """Rules for a Gemini model on the Gemini API, or on Vertex AI (``vertex``)."""
    name = model.lower().rsplit("/", 1)[-1]
    newer = not name.startswith(_TEXT_VALUE_FAMILIES)
    json_declarations = newer and not vertex
    content_markers = newer and not vertex
    # The name keys the estimator's text and tool-count caches: rules that count differently must not share.
    style = "json" if json_declarations else "values"
    bills_signatures = not vertex and not name.startswith(_UNBILLED_SIGNATURE_FAMILIES)
    declaration_extra = 0 if newer or vertex else TEXT_VALUE_DECLARATION_EXTRA
    compact = json_declarations and name.startswith(_COMPACT_DECLARATION_FAMILIES)
    if compact:
        style = "compact"
    return GeminiRules(
        json_declarations=json_declarations,
        content_markers=content_markers,
        bills_signatures=bills_signatures,
        declaration_extra=declaration_extra,
        call_rendering=CALL_RENDERING if json_declarations else 0,
        compact_declarations=compact,
        name=(
            f"gemini:o200k_x{TEXT_SCALE}:{style}{f'+{declaration_extra}' * bool(declaration_extra)}"
            f"{':markers' * content_markers}{':signatures' * bills_signatures}"
        ),
    )
