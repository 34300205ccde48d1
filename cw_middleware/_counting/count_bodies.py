"""Count-endpoint bodies: an OpenAI-style chat request as each provider's token-count endpoint takes it.

Plain functions of the request (messages, tools, tool choice, response format), one per
endpoint family: Anthropic's ``messages/count_tokens`` body, Gemini's ``countTokens``
``generateContentRequest``, OpenAI's ``responses/input_tokens`` body. The provider counter
(provider_count.py) sends them; nothing here is logged, since every field is content.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Optional


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") if isinstance(p, dict) else str(p) for p in content if not isinstance(p, dict) or "text" in p
        )
    return ""


def _parts(content: Any) -> list[dict[str, Any]]:
    """Content as a list of OpenAI parts (a string becomes one text part)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list):
        return [p if isinstance(p, dict) else {"type": "text", "text": str(p)} for p in content]
    return []


def _image_url(part: Mapping[str, Any]) -> Optional[str]:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    return url if isinstance(url, str) else None


def _data_url(url: str) -> Optional[tuple[str, str]]:
    """(media type, base64 data) of a ``data:`` URL."""
    if not url.startswith("data:") or ";base64," not in url:
        return None
    head, data = url[5:].split(";base64,", 1)
    return head or "application/octet-stream", data


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            return {"arguments": raw}
    return raw if raw is not None else {}


def _merge_roles(turns: list[tuple[str, list[Any]]]) -> list[tuple[str, list[Any]]]:
    """Consecutive turns of one role become one (both Anthropic and Gemini expect alternation)."""
    merged: list[tuple[str, list[Any]]] = []
    for role, blocks in turns:
        if not blocks:
            continue
        if merged and merged[-1][0] == role:
            merged[-1][1].extend(blocks)
        else:
            merged.append((role, list(blocks)))
    return merged


def _function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    fn = tool.get("function")
    return fn if isinstance(fn, dict) else tool


def _choice_name(tool_choice: Any) -> Optional[str]:
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function")
        return (fn or {}).get("name") if isinstance(fn, dict) else tool_choice.get("name")
    return None


def to_anthropic(
    model: str, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], tool_choice: Any
) -> dict[str, Any]:
    system: list[dict[str, Any]] = []
    turns: list[tuple[str, list[Any]]] = []
    for msg in messages:
        role = msg.get("role")
        if role in ("system", "developer"):
            system += [{"type": "text", "text": t} for t in [_text(msg.get("content"))] if t]
        elif role in ("tool", "function"):
            block = {
                "type": "tool_result",
                "tool_use_id": msg.get("tool_call_id") or msg.get("name") or "",
                "content": _text(msg.get("content")),
            }
            turns.append(("user", [block]))
        else:
            blocks: list[dict[str, Any]] = []
            for part in _parts(msg.get("content")):
                if part.get("type", "text") == "text" and part.get("text"):
                    blocks.append({"type": "text", "text": part["text"]})
                elif part.get("type") == "image_url" and (url := _image_url(part)):
                    data = _data_url(url)
                    source = {"type": "base64", "media_type": data[0], "data": data[1]} if data else {"type": "url", "url": url}
                    blocks.append({"type": "image", "source": source})
            for call in msg.get("tool_calls") or ():
                fn = call.get("function") or {}
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call.get("id") or "",
                        "name": fn.get("name", ""),
                        "input": _arguments(fn.get("arguments")),
                    }
                )
            turns.append(("assistant" if role == "assistant" else "user", blocks))
    body: dict[str, Any] = {"model": model, "messages": [{"role": r, "content": b} for r, b in _merge_roles(turns)]}
    if system:
        body["system"] = system
    if tools:
        body["tools"] = [
            {
                "name": fn.get("name", ""),
                **({"description": fn["description"]} if fn.get("description") else {}),
                "input_schema": fn.get("parameters") or {"type": "object", "properties": {}},
            }
            for fn in map(_function, tools)
        ]
        name = _choice_name(tool_choice)
        choice = (
            {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}.get(tool_choice)
            if isinstance(tool_choice, str)
            else None
        )
        if name:
            choice = {"type": "tool", "name": name}
        if choice:
            body["tool_choice"] = choice
    return body


# Keys of JSON Schema that Gemini's OpenAPI-subset schemas reject.
_GEMINI_DROP = frozenset({"additionalProperties", "$schema", "$defs", "definitions", "strict", "$ref", "default"})


def _gemini_schema(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _gemini_schema(v) for k, v in schema.items() if k not in _GEMINI_DROP}
    if isinstance(schema, list):
        return [_gemini_schema(v) for v in schema]
    return schema


def to_gemini(
    model: str, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], tool_choice: Any
) -> dict[str, Any]:
    system: list[dict[str, Any]] = []
    turns: list[tuple[str, list[Any]]] = []
    call_names: dict[str, str] = {}
    for msg in messages:
        role = msg.get("role")
        if role in ("system", "developer"):
            system += [{"text": t} for t in [_text(msg.get("content"))] if t]
        elif role in ("tool", "function"):
            name = msg.get("name") or call_names.get(msg.get("tool_call_id") or "", "")
            turns.append(("user", [{"functionResponse": {"name": name, "response": {"content": _text(msg.get("content"))}}}]))
        else:
            parts: list[dict[str, Any]] = []
            for part in _parts(msg.get("content")):
                if part.get("type", "text") == "text" and part.get("text"):
                    parts.append({"text": part["text"]})
                elif part.get("type") == "image_url" and (url := _image_url(part)):
                    data = _data_url(url)
                    parts.append(
                        {"inlineData": {"mimeType": data[0], "data": data[1]}} if data else {"fileData": {"fileUri": url}}
                    )
            for call in msg.get("tool_calls") or ():
                fn = call.get("function") or {}
                call_names[call.get("id") or ""] = fn.get("name", "")
                parts.append({"functionCall": {"name": fn.get("name", ""), "args": _arguments(fn.get("arguments"))}})
            turns.append(("model" if role == "assistant" else "user", parts))
    request: dict[str, Any] = {"model": f"models/{model}", "contents": [{"role": r, "parts": p} for r, p in _merge_roles(turns)]}
    if system:
        request["systemInstruction"] = {"parts": system}
    if tools:
        declarations = []
        for fn in map(_function, tools):
            declaration = {"name": fn.get("name", "")}
            if fn.get("description"):
                declaration["description"] = fn["description"]
            if fn.get("parameters"):
                declaration["parameters"] = _gemini_schema(fn["parameters"])
            declarations.append(declaration)
        request["tools"] = [{"functionDeclarations": declarations}]
        name = _choice_name(tool_choice)
        mode = {"auto": "AUTO", "required": "ANY", "none": "NONE"}.get(tool_choice) if isinstance(tool_choice, str) else None
        if name:
            request["toolConfig"] = {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [name]}}
        elif mode:
            request["toolConfig"] = {"functionCallingConfig": {"mode": mode}}
    return {"generateContentRequest": request}


def to_openai_responses(
    model: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    tool_choice: Any,
    response_format: Any = None,
) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for msg in messages:
        role = msg.get("role") or "user"
        if role in ("tool", "function"):
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": msg.get("tool_call_id") or msg.get("name") or "",
                    "output": _text(msg.get("content")),
                }
            )
            continue
        content = msg.get("content")
        if isinstance(content, list):
            kind = "output_text" if role == "assistant" else "input_text"
            parts: list[dict[str, Any]] = []
            for part in _parts(content):
                if part.get("type", "text") == "text":
                    parts.append({"type": kind, "text": part.get("text", "")})
                elif part.get("type") == "image_url" and (url := _image_url(part)):
                    parts.append({"type": "input_image", "image_url": url})
            content = parts
        if content:
            items.append({"role": role, "content": content})
        for call in msg.get("tool_calls") or ():
            fn = call.get("function") or {}
            args = fn.get("arguments")
            item = {
                "type": "function_call",
                "call_id": call.get("id") or "",
                "name": fn.get("name", ""),
                "arguments": args if isinstance(args, str) else json.dumps(args or {}),
            }
            if fn.get("namespace"):  # a call into a tool namespace (the Responses adapter keeps it on the function)
                item["namespace"] = fn["namespace"]
            items.append(item)
    body: dict[str, Any] = {"model": model, "input": items}
    if tools:
        body["tools"] = [
            {"type": "function", **{k: fn[k] for k in ("name", "description", "parameters", "strict") if k in fn}}
            for fn in map(_function, tools)
        ]
    name = _choice_name(tool_choice)
    if name:
        body["tool_choice"] = {"type": "function", "name": name}
    elif isinstance(tool_choice, str):
        body["tool_choice"] = tool_choice
    if isinstance(response_format, dict):
        format_type = response_format.get("type")
        if format_type == "json_schema" and isinstance(response_format.get("json_schema"), dict):
            body["text"] = {"format": {"type": "json_schema", **response_format["json_schema"]}}
        elif format_type == "json_object":
            body["text"] = {"format": {"type": "json_object"}}
    return body
