"""OpenAI: the model's own tiktoken encoding plus chat framing and tool rendering.

Chat framing (OpenAI cookbook, "How to count tokens with tiktoken"): every
message costs 3 tokens around its content, a ``name`` one more, and every reply
is primed with 3. Tool definitions are rendered into a TypeScript-like
``namespace functions`` block that the model reads as part of the system prompt.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ._tiktoken import counter

# Families whose encoding is o200k_base; older chat models use cl100k_base.
_O200K_PREFIXES = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "gpt-oss", "gpt-realtime", "codex")
_CL100K_PREFIXES = ("gpt-4", "gpt-3.5", "gpt-35", "text-embedding")

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3


def encoding_for(model: str) -> str:
    name = model.lower().removeprefix("ft:")
    if name.startswith(_O200K_PREFIXES):
        return "o200k_base"
    if name.startswith(_CL100K_PREFIXES):
        return "cl100k_base"
    return "o200k_base"  # newer than this table: OpenAI's current encoding


@dataclass(frozen=True)
class OpenAIRules:
    name: str
    provider: str
    exact: bool
    text: Callable[[str], int] = field(repr=False, compare=False)

    def message_framing(self, message: Mapping[str, Any]) -> int:
        return TOKENS_PER_MESSAGE + (TOKENS_PER_NAME if message.get("name") else 0)

    def tool_calls(self, tool_calls: Sequence[Mapping[str, Any]]) -> int:
        total = 0
        for call in tool_calls:
            fn = call.get("function") or {}
            total += 3 + self.text(str(fn.get("name", ""))) + self.text(_as_text(fn.get("arguments", "")))
        return total

    def tool_definition(self, tool: Mapping[str, Any]) -> int:
        return self.text(render_tool(tool))

    def tools_overhead(self, tools: Sequence[Mapping[str, Any]], tool_choice: Any) -> int:
        if not tools:
            return 0
        return self.text("# Tools\n\n## functions\n\nnamespace functions {\n\n} // namespace functions")

    def response_format(self, response_format: Any) -> int:
        if not isinstance(response_format, Mapping):
            return 0
        schema = (response_format.get("json_schema") or {}).get("schema")
        if schema is None:
            return 0
        return self.text(json.dumps(schema, separators=(",", ":")))

    def request_overhead(self, n_messages: int) -> int:
        return REPLY_PRIMING


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def render_tool(tool: Mapping[str, Any]) -> str:
    """A tool definition in the TypeScript-like form OpenAI shows the model."""
    fn = tool.get("function", tool)
    lines = []
    if fn.get("description"):
        lines.append(f"// {fn['description']}")
    params = fn.get("parameters") or {}
    props = params.get("properties") or {}
    if props:
        lines.append(f"type {fn.get('name', '')} = (_: {{")
        for key, spec in props.items():
            if isinstance(spec, Mapping) and spec.get("description"):
                lines.append(f"// {spec['description']}")
            optional = "" if key in (params.get("required") or []) else "?"
            lines.append(f"{key}{optional}: {_ts_type(spec)},")
        lines.append("}) => any;")
    else:
        lines.append(f"type {fn.get('name', '')} = () => any;")
    return "\n".join(lines) + "\n\n"


def _ts_type(spec: Any) -> str:
    if not isinstance(spec, Mapping):
        return "any"
    if "enum" in spec:
        return " | ".join(json.dumps(v) for v in spec["enum"])
    kind = spec.get("type")
    if kind == "array":
        return f"{_ts_type(spec.get('items'))}[]"
    if kind == "object":
        props = spec.get("properties") or {}
        inner = ", ".join(f"{k}: {_ts_type(v)}" for k, v in props.items())
        return f"{{{inner}}}"
    if kind == "integer":
        return "number"
    return kind if isinstance(kind, str) else "any"


def rules(model: str) -> OpenAIRules:
    encoding = encoding_for(model)
    return OpenAIRules(name=f"openai:{encoding}", provider="openai", exact=True, text=counter(encoding))


def approximate_rules(provider: str) -> OpenAIRules:
    """Any other provider: OpenAI's current encoding and framing, flagged as approximate."""
    return OpenAIRules(name="approx:o200k_base", provider=provider, exact=False, text=counter("o200k_base"))
