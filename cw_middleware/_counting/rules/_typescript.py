"""JSON Schema -> the TypeScript-like text OpenAI models read their tools as.

OpenAI never sends a tool's JSON Schema to the model: the server renders every
function into a ``namespace functions { ... }`` block of TypeScript type
declarations, and bills those tokens. The open-source reference for that
rendering is OpenAI's `harmony` renderer (github.com/openai/harmony,
``src/encoding.rs``: ``json_schema_to_typescript`` and
``template_tools_section``); the chat models' format matches it on the points
below (checked against reported usage): a ``// description`` line above each
function and property (a function's multi-line description one ``//`` line per
line, indentation and blank lines dropped: `description_lines`), ``name?:`` for optional properties, string enums as
``"a" | "b"``, ``integer`` as ``number``, arrays as ``T[]``, nested objects as
indented ``{ ... }`` blocks, a property's title as a comment line above its
description, and a trailing ``// default: x`` comment.
Where harmony falls back to ``any`` (``anyOf``, ``$ref``), the chat renderer
spells out unions and resolves local ``$defs``; that is what is done here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# Local $ref resolution stops here: recursive schemas render as `any` past this depth.
_MAX_REF_DEPTH = 6


def description_lines(description: str) -> list[str]:
    """A function's description as the renderer shows it: one ``//`` line per line of text.

    Each line loses its indentation and blank lines are dropped, so an indented docstring
    (``Args:`` and ``Returns:`` sections) costs its words, not its indentation; a line's
    trailing whitespace stays (the Responses API trims the whole description first).
    """
    return [f"// {line.lstrip()}" for line in description.split("\n") if line.strip()]


def render_function(fn: Mapping[str, Any], responses: bool = False) -> str:
    """One function of the namespace, ending with the blank line that separates functions.

    ``responses``: the Responses API's renderer trims the description, shows the
    parameters schema's own ``title`` (followed by an empty ``//`` line, as harmony
    shows titles) and ``description`` as comment lines, and does not indent nested objects.
    """
    lines = []
    description = fn.get("description")
    if isinstance(description, str):
        lines.extend(description_lines(description.strip() if responses else description))
    name = fn.get("name", "")
    params = fn.get("parameters")
    if responses and isinstance(params, Mapping):
        title, schema_description = params.get("title"), params.get("description")
        if isinstance(title, str) and title:
            lines.extend((f"// {title}", "//"))  # harmony's title form: the title, then an empty comment line
        if isinstance(schema_description, str) and schema_description:
            lines.append(f"// {schema_description}")
    if isinstance(params, Mapping) and params.get("properties"):
        body = _object(params, "", "" if responses else "  ", params, 0)
        lines.append(f"type {name} = (_: {body}) => any;")
    else:
        lines.append(f"type {name} = () => any;")
    return "\n".join(lines) + "\n\n"


def render_custom(spec: Mapping[str, Any]) -> str:
    """A custom tool (free-form input, OpenAI's ``type: custom``) as the function namespace shows one.

    ``// description`` then ``type {name} = (FREEFORM) => any;`` (the form published reconstructions
    of OpenAI's tool prompts show); a grammar-constrained tool's grammar follows as
    ``{name} FREEFORM grammar:`` and its definition.
    """
    lines = []
    description = spec.get("description")
    if isinstance(description, str):
        lines.extend(description_lines(description.strip()))
    name = spec.get("name", "")
    lines.append(f"type {name} = (FREEFORM) => any;")
    text = "\n".join(lines) + "\n\n"
    grammar = _grammar_definition(spec.get("format"))
    if grammar:
        text += f"{name} FREEFORM grammar:\n\n{grammar}\n\n"
    return text


def _grammar_definition(fmt: Any) -> str:
    """A custom tool's grammar: ``format.definition`` (Responses API), ``format.grammar.definition`` (Chat Completions)."""
    if not isinstance(fmt, Mapping) or fmt.get("type") != "grammar":
        return ""
    grammar = fmt.get("grammar")
    definition = (grammar if isinstance(grammar, Mapping) else fmt).get("definition")
    return definition.strip() if isinstance(definition, str) else ""


def opens_bare(fn: Mapping[str, Any]) -> bool:
    """The function's parameters open on a property with no comment line (no title, no description)."""
    params = fn.get("parameters")
    if not isinstance(params, Mapping):
        return False
    props = params.get("properties")
    if not isinstance(props, Mapping) or not props:
        return False
    first = _resolve(next(iter(props.values())), params, 0)
    return not (isinstance(first, Mapping) and any(isinstance(first.get(k), str) and first[k] for k in ("title", "description")))


def _resolve(schema: Any, root: Mapping[str, Any], depth: int) -> Any:
    if isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str) and depth < _MAX_REF_DEPTH:
        ref = schema["$ref"]
        if ref.startswith("#/"):
            target: Any = root
            for part in ref[2:].split("/"):
                target = target.get(part) if isinstance(target, Mapping) else None
            if isinstance(target, Mapping):
                merged = dict(target)
                merged.update({k: v for k, v in schema.items() if k != "$ref"})
                return merged
    return schema


def _default_comment(spec: Mapping[str, Any]) -> str:
    if "default" not in spec:
        return ""
    value = spec["default"]
    if isinstance(value, str):
        return f" // default: {value}" if "enum" in spec else f' // default: "{value}"'
    return f" // default: {json.dumps(value)}"


def _object(schema: Mapping[str, Any], indent: str, step: str, root: Mapping[str, Any], depth: int) -> str:
    out = ["{"]
    required = schema.get("required") or ()
    props = schema.get("properties") or {}
    for key, raw in props.items():
        spec = _resolve(raw, root, depth)
        if not isinstance(spec, Mapping):
            spec = {}
        title = spec.get("title")
        if isinstance(title, str) and title:
            out.append(f"{indent}// {title}")
        description = spec.get("description")
        if isinstance(description, str) and description:
            out.append(f"{indent}// {description}")
        optional = "" if key in required else "?"
        out.append(f"{indent}{key}{optional}: {_type(spec, indent, step, root, depth + 1)},{_default_comment(spec)}")
    out.append(f"{indent}}}" if indent else "}")
    return "\n".join(out)


def _type(spec: Any, indent: str, step: str, root: Mapping[str, Any], depth: int) -> str:
    spec = _resolve(spec, root, depth)
    if not isinstance(spec, Mapping) or depth > _MAX_REF_DEPTH + 8:
        return "any"
    if "const" in spec:
        return json.dumps(spec["const"], ensure_ascii=False)
    enum = spec.get("enum")
    if isinstance(enum, list) and enum:
        return " | ".join(json.dumps(v, ensure_ascii=False) for v in enum)
    union = spec.get("anyOf") or spec.get("oneOf")
    if isinstance(union, list) and union:
        return " | ".join(_type(v, indent, step, root, depth + 1) for v in union)
    all_of = spec.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1:
        return _type(all_of[0], indent, step, root, depth + 1)
    kind = spec.get("type")
    if isinstance(kind, list):
        return " | ".join(
            _scalar(k) if k not in ("object", "array") else _type({**spec, "type": k}, indent, step, root, depth) for k in kind
        )
    if kind == "object" or (kind is None and "properties" in spec):
        if spec.get("properties"):
            return _object(spec, indent + step, step, root, depth)
        return "object"
    if kind == "array":
        items = spec.get("items")
        if items is None:
            return "any[]"
        inner = _type(items, indent, step, root, depth + 1)
        flat = isinstance(items, Mapping) and (items.get("anyOf") or items.get("oneOf") or isinstance(items.get("type"), list))
        return f"Array<{inner}>" if flat else f"{inner}[]"
    return _scalar(kind)


def _scalar(kind: Any) -> str:
    if kind == "integer":
        return "number"
    if kind in ("string", "number", "boolean", "null"):
        return kind
    return "any"
