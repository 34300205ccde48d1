"""Gemini's GenerateContent (the ``google-genai`` client's ``models.generate_content[_stream]``): contents, parts, usage.

As for Anthropic Messages (messages.py), a native request is read as the chat request LiteLLM's
Gemini path would have sent it, the form the Gemini rules were calibrated on:

* ``config.system_instruction`` (a string, a Content, parts) is a system message ahead of the turns;
* ``contents`` (a string, parts, or Contents with role ``user`` / ``model``) are the turns: ``text``
  parts one text joined by newlines (apart where a part is tagged), a ``function_call`` an assistant
  tool call (arguments as JSON), a ``function_response`` a tool message, ``inline_data`` /
  ``file_data`` non-text parts (never guessed: the response's usage gives them what the local
  count missed); ``thought`` parts are not counted, as on the LiteLLM path;
* ``config.tools``: each function declaration a function tool (``parameters_json_schema``, or the
  ``parameters`` Schema as JSON Schema); Google's own tools (search, code execution, ...) and MCP
  sessions raise ``provider_tool_not_estimated``; ``config.response_schema`` /
  ``response_json_schema`` counts as a response format.

The client's objects (``types.Content``, ``types.Part``, ``GenerateContentConfig``) and plain dicts
(snake_case or camelCase, as the client takes them) are read alike. Tags go on dicts: a Content or
a part with ``cw_tag`` (`cw.segment` works as a part), `cw.message` dicts (turned into Contents
before the client sees them), `cw.tool` on a function declaration or on a Tool; every tag is
removed before the request goes out, so the client's strict models never see one.

Usage: ``usage_metadata.prompt_token_count`` (cached content included) plus
``tool_use_prompt_token_count`` is what the context held; ``cached_content_token_count`` what the
cache served. A stream's chunks carry the usage so far; its last one the whole.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from ..._counting.tags import TAG_KEY
from ..._kernel.contract import WarningCode
from .base import NOTHING, Forward, Parsed, Reading, Usage

_SNAKE = {
    "functionCall": "function_call",
    "functionResponse": "function_response",
    "inlineData": "inline_data",
    "fileData": "file_data",
    "functionDeclarations": "function_declarations",
    "parametersJsonSchema": "parameters_json_schema",
    "systemInstruction": "system_instruction",
    "responseSchema": "response_schema",
    "responseJsonSchema": "response_json_schema",
}


# ---------------------------------------------------------------- reading the client's shapes


def plain(obj: Any) -> Any:
    """A client object (pydantic) or dict as a dict of snake_case keys; anything else as it is."""
    if isinstance(obj, Mapping):
        return {_SNAKE.get(k, k): v for k, v in obj.items()}
    dump = getattr(obj, "model_dump", None)
    if callable(dump) and not isinstance(obj, type):
        try:
            return dump(exclude_none=True)
        except Exception:  # noqa: BLE001 - an object the client made that will not dump: read nothing of it
            return {}
    return obj


def _parts_of(content: Any) -> list[Any]:
    return [plain(p) for p in (plain(content).get("parts") or [])]


def _as_contents(contents: Any) -> list[dict[str, Any]]:
    """``contents`` as the client reads it: a string or loose parts are one user turn; Contents stay as they are."""
    if contents is None:
        return []
    items = list(contents) if isinstance(contents, (list, tuple)) else [contents]
    out: list[dict[str, Any]] = []
    loose: list[Any] = []
    for item in items:
        item = plain(item)
        if isinstance(item, Mapping) and ("parts" in item or "role" in item or "content" in item):
            if loose:
                out.append({"role": "user", "parts": loose})
                loose = []
            out.append(dict(item))
        else:
            loose.append({"text": item} if isinstance(item, str) else item)
    if loose:
        out.append({"role": "user", "parts": loose})
    return out


def _text_of(part: Mapping[str, Any]) -> Optional[str]:
    text = part.get("text")
    return text if isinstance(text, str) and not part.get("thought") else None


def content_as_chat(content: Mapping[str, Any]) -> Any:
    """One Content as the chat message(s) the estimator counts (see the module docstring)."""
    if "content" in content and "parts" not in content:
        return content  # a cw.message(...): chat-shaped already
    role = "assistant" if content.get("role") == "model" else "user"
    tag = content.get(TAG_KEY)
    out: list[dict[str, Any]] = []
    texts: list[Any] = []
    calls: list[dict[str, Any]] = []
    tagged_parts = any(isinstance(p, Mapping) and TAG_KEY in p for p in content.get("parts") or [])
    for part in _parts_of(content):
        if not isinstance(part, Mapping):
            continue
        call, answer = part.get("function_call"), part.get("function_response")
        if call is not None:
            call = plain(call)
            name = call.get("name", "")
            calls.append(
                {
                    "id": call.get("id") or name,
                    "type": "function",
                    "function": {"name": name, "arguments": _json(call.get("args"))},
                }
            )
        elif answer is not None:
            answer = plain(answer)
            name = answer.get("name", "")
            result = {
                "role": "tool",
                "tool_call_id": answer.get("id") or name,
                "name": name,
                "content": _json(answer.get("response")),
            }
            if part.get(TAG_KEY, tag) is not None:
                result[TAG_KEY] = part.get(TAG_KEY, tag)
            out.append(result)
        elif (text := _text_of(part)) is not None:
            texts.append({"type": "text", "text": text, TAG_KEY: part[TAG_KEY]} if TAG_KEY in part else text)
        elif part.get("inline_data") is not None or part.get("file_data") is not None:
            texts.append({"type": "image_url", "image_url": {"url": "gemini:part"}})  # never guessed from bytes
    if texts or calls:
        body: Any = (
            _joined(texts) if not tagged_parts else [{"type": "text", "text": t} if isinstance(t, str) else t for t in texts]
        )
        turn: dict[str, Any] = {"role": role, "content": body if texts else None}
        if calls:
            turn["tool_calls"] = calls
        if tag is not None:
            turn[TAG_KEY] = tag
        out.append(turn)
    return out[0] if len(out) == 1 else out


def _joined(texts: list[Any]) -> Any:
    strings = [t for t in texts if isinstance(t, str)]
    others = [t for t in texts if not isinstance(t, str)]
    if not others:
        return "\n".join(strings)
    return ([{"type": "text", "text": "\n".join(strings)}] if strings else []) + others


def _system_head(system: Any) -> list[dict[str, Any]]:
    if system is None:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}] if system else []
    parts = _parts_of(system) if isinstance(plain(system), Mapping) and "parts" in plain(system) else None
    if parts is None:
        items = system if isinstance(system, (list, tuple)) else [system]
        parts = [{"text": p} if isinstance(p, str) else plain(p) for p in items]
    texts = [t for p in parts if isinstance(p, Mapping) and (t := _text_of(p)) is not None]
    head: dict[str, Any] = {"role": "system", "content": "\n".join(texts)}
    tag = plain(system).get(TAG_KEY) if isinstance(plain(system), Mapping) else None
    if tag is not None:
        head[TAG_KEY] = tag
    return [head] if texts else []


def _json_schema(schema: Any) -> Any:
    """A Gemini ``Schema`` (``type: OBJECT``) as the JSON Schema a function tool's ``parameters`` holds."""
    schema = plain(schema)
    if isinstance(schema, Mapping):
        out: dict[str, Any] = {}
        for key, value in schema.items():
            if key == "type" and isinstance(value, str):
                out[key] = value.lower()
            elif key == "properties" and isinstance(value, Mapping):
                out[key] = {name: _json_schema(v) for name, v in value.items()}
            elif key in ("items", "any_of"):
                out["anyOf" if key == "any_of" else key] = (
                    [_json_schema(v) for v in value] if isinstance(value, list) else _json_schema(value)
                )
            else:
                out[key] = value
        return out
    return schema


def _tools(tools: Any, warnings: set[WarningCode]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for raw in tools if isinstance(tools, (list, tuple)) else ():
        if callable(raw) and not isinstance(raw, Mapping):
            declaration = _from_callable(raw)
            if declaration is None:
                warnings.add(WarningCode.PROVIDER_TOOL_NOT_ESTIMATED)
            else:
                out.append(_chat_tool(declaration, None))
            continue
        tool = plain(raw)
        if not isinstance(tool, Mapping):
            warnings.add(WarningCode.PROVIDER_TOOL_NOT_ESTIMATED)  # an MCP session: its tools are listed by the client
            continue
        declarations = tool.get("function_declarations")
        if declarations is None and "name" in tool:  # a bare declaration (cw.tool({...}) on one)
            declarations = [tool]
        if not declarations:
            warnings.add(WarningCode.PROVIDER_TOOL_NOT_ESTIMATED)  # Google Search, code execution, URL context, ...
            continue
        for declaration in declarations:
            out.append(_chat_tool(plain(declaration), tool.get(TAG_KEY)))
    return out


def _chat_tool(declaration: Mapping[str, Any], tag: Any) -> dict[str, Any]:
    parameters = declaration.get("parameters_json_schema")
    if parameters is None and declaration.get("parameters") is not None:
        parameters = _json_schema(declaration["parameters"])
    function: dict[str, Any] = {"name": declaration.get("name", "")}
    if declaration.get("description"):
        function["description"] = declaration["description"]
    if parameters is not None:
        function["parameters"] = parameters
    chat: dict[str, Any] = {"type": "function", "function": function}
    own = declaration.get(TAG_KEY, tag)
    if own is not None:
        chat[TAG_KEY] = own
    return chat


def _from_callable(fn: Any) -> Optional[Mapping[str, Any]]:
    """A Python function given as a tool (the client's automatic function calling), as the client declares it."""
    try:
        from google.genai import types  # the application's client: it is imported when its call is observed

        return plain(types.FunctionDeclaration.from_callable_with_api_option(callable=fn))
    except Exception:  # noqa: BLE001 - a client without it, or a function it cannot declare
        return None


def _response_format(config: Mapping[str, Any]) -> Any:
    schema = config.get("response_json_schema")
    if schema is None and config.get("response_schema") is not None:
        given = config["response_schema"]
        schema_of = getattr(given, "model_json_schema", None)
        schema = schema_of() if isinstance(given, type) and callable(schema_of) else _json_schema(given)
    return {"type": "json_schema", "json_schema": {"schema": schema}} if schema is not None else None


# ---------------------------------------------------------------- the adapter


class GenerateContent:
    # GenAI semantic conventions: Gemini's generateContent is "generate_content".
    operation = "generate_content"

    def parse(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Parsed:
        model = str(kwargs.get("model") or "")
        config = plain(kwargs.get("config")) or {}
        warnings: set[WarningCode] = set()
        head = _system_head(config.get("system_instruction"))
        turns = _as_contents(kwargs.get("contents"))
        options = {
            "tools": _tools(config.get("tools"), warnings) or None,
            "tool_choice": None,
            "response_format": _response_format(config),
            "custom_llm_provider": "gemini",
            "read_message": content_as_chat,
        }
        origins = range(-len(head), len(turns))
        return Parsed(bare_model(model), [*head, *turns], options, "chat", origins, frozenset(warnings))

    def forward(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        parsed: Parsed,
        tagged: Optional[Sequence[int]],
        provider: Optional[str],
        stream_usage: bool = True,
        endpoint: Optional[Mapping[str, Any]] = None,
    ) -> Forward:
        contents = kwargs.get("contents")
        if _needs_cleaning(contents):
            kwargs["contents"] = _clean_contents(contents)
        config = kwargs.get("config")
        if isinstance(config, Mapping) and (_any_tag(config) or _needs_cleaning(config.get("system_instruction"))):
            kwargs["config"] = _clean_config(config)
        return Forward(args, kwargs)  # every chunk of a Gemini stream carries its usage so far: nothing to ask for

    def count_request(self, forward: Forward, model: str) -> dict[str, Any]:
        """The clean request as Gemini's ``countTokens`` takes it (``gemini``: its ``generateContentRequest``)."""
        kwargs = forward.kwargs
        config = plain(kwargs.get("config")) or {}
        request: dict[str, Any] = {
            "model": f"models/{model}",
            "contents": [_wire(c) for c in _as_contents(kwargs.get("contents"))],
        }
        system = config.get("system_instruction")
        if system is not None:
            request["systemInstruction"] = _wire(system if not isinstance(system, str) else {"parts": [{"text": system}]})
        tools = [_wire(t) for t in config.get("tools") or () if isinstance(plain(t), Mapping)]
        if tools:
            request["tools"] = tools
        return {"model": model, "messages": [], "gemini": {"generateContentRequest": request}}

    def read(self, obj: Any) -> Reading:
        usage = _get(obj, "usage_metadata")
        model = _get(obj, "model_version")
        calls = tuple(_calls(obj))
        reasons = tuple(_finish_reasons(obj))
        if usage is None:
            found = model or calls or reasons
            return (
                Reading(None, model if isinstance(model, str) else None, tool_calls=calls, finish_reasons=reasons)
                if found
                else NOTHING
            )
        prompt = _get(usage, "prompt_token_count")
        tool_prompt = _get(usage, "tool_use_prompt_token_count")
        cached = _get(usage, "cached_content_token_count")
        input_tokens = prompt + (tool_prompt if isinstance(tool_prompt, int) else 0) if isinstance(prompt, int) else None
        return Reading(
            Usage(input_tokens, _get(usage, "candidates_token_count"), cached if isinstance(cached, int) else None),
            model if isinstance(model, str) else None,
            tool_calls=calls,
            finish_reasons=reasons,
        )


GENERATE_CONTENT = GenerateContent()


def bare_model(model: str) -> str:
    """``models/gemini-2.5-flash`` and Vertex's ``publishers/google/models/...`` as the model's own name."""
    return model.rsplit("/models/", 1)[-1].removeprefix("models/").removeprefix("google/")


def _finish_reasons(obj: Any) -> list[str]:
    """Each candidate's ``finish_reason`` (the client's enum, or the REST string), as Gemini spells it."""
    out = []
    for candidate in _get(obj, "candidates") or ():
        reason = _get(candidate, "finish_reason")
        if reason is not None:
            out.append(str(getattr(reason, "value", reason)))
    return out


def _calls(obj: Any) -> list[str]:
    """The name of each function the first candidate calls."""
    candidates = _get(obj, "candidates") or ()
    content = _get(candidates[0], "content") if candidates else None
    calls = (_get(part, "function_call") for part in _get(content, "parts") or ())
    return [name for call in calls if isinstance(name := _get(call, "name"), str)]


# ---------------------------------------------------------------- tags out


def _any_tag(obj: Any) -> bool:
    if isinstance(obj, Mapping):
        return TAG_KEY in obj or any(_any_tag(v) for v in obj.values() if isinstance(v, (Mapping, list, tuple)))
    if isinstance(obj, (list, tuple)):
        return any(_any_tag(v) for v in obj)
    return False


def _needs_cleaning(item: Any) -> bool:
    """A tag anywhere in it, or a chat-shaped `cw.message` / `cw.segment` the client's models would refuse."""
    if isinstance(item, (list, tuple)):
        return any(_needs_cleaning(i) for i in item)
    return isinstance(item, Mapping) and (
        _any_tag(item) or ("content" in item and "parts" not in item) or item.get("type") == "text"
    )


def _clean_contents(contents: Any) -> Any:
    if not isinstance(contents, (list, tuple)):
        return _clean_item(contents)
    return [_clean_item(item) for item in contents]


def _clean_item(item: Any) -> Any:
    if not isinstance(item, Mapping) or not _needs_cleaning(item):
        return item
    if "content" in item and "parts" not in item:  # a cw.message(...): the Content it stands for
        role = "model" if item.get("role") == "assistant" else "user"
        body = item.get("content")
        parts = [{"text": body}] if isinstance(body, str) else [_clean_part(p) for p in body or ()]
        return {"role": role, "parts": parts}
    if "parts" in item or "role" in item:
        clean = {k: v for k, v in item.items() if k != TAG_KEY}
        if isinstance(clean.get("parts"), (list, tuple)):
            clean["parts"] = [_clean_part(p) for p in clean["parts"]]
        return clean
    return _clean_part(item)


def _clean_part(part: Any) -> Any:
    if isinstance(part, str):
        return {"text": part}
    if not isinstance(part, Mapping):
        return part
    if part.get("type") == "text":  # a cw.segment (or a chat text part): the Gemini part it stands for
        return {"text": part.get("text", "")}
    return {k: v for k, v in part.items() if k != TAG_KEY} if TAG_KEY in part else part


def _clean_config(config: Mapping[str, Any]) -> dict[str, Any]:
    clean = dict(config)
    for key in ("system_instruction", "systemInstruction"):
        if key in clean and _needs_cleaning(clean[key]):
            system = clean[key]
            clean[key] = _clean_contents(system) if isinstance(system, (list, tuple)) else _clean_item(system)
    if isinstance(clean.get("tools"), (list, tuple)):
        clean["tools"] = [_clean_tool(t) for t in clean["tools"]]
    return clean


def _clean_tool(tool: Any) -> Any:
    if not isinstance(tool, Mapping) or not _any_tag(tool):
        return tool
    clean = {k: v for k, v in tool.items() if k != TAG_KEY}
    for key in ("function_declarations", "functionDeclarations"):
        if isinstance(clean.get(key), (list, tuple)):
            clean[key] = [{k: v for k, v in d.items() if k != TAG_KEY} if isinstance(d, Mapping) else d for d in clean[key]]
    if "name" in clean and "function_declarations" not in clean and "functionDeclarations" not in clean:
        return {"function_declarations": [clean]}  # cw.tool on a bare declaration: the Tool that holds it
    return clean


# ---------------------------------------------------------------- helpers


def _wire(obj: Any) -> Any:
    """A client object or dict as the REST API spells it (camelCase keys), for a count request."""
    dump = getattr(obj, "model_dump", None)
    if callable(dump) and not isinstance(obj, type):
        return dump(exclude_none=True, by_alias=True, mode="json")
    return obj


def _get(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _json(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)
