"""Amazon Bedrock's Converse API (``boto3``'s ``bedrock-runtime`` ``converse`` / ``converse_stream``): blocks, tools, usage.

A native request is read as the chat request LiteLLM's Bedrock path would have sent it (the form the
counting rules were calibrated on), and counted by the model family's rules (``anthropic.claude-*``:
Anthropic's; a family without rules, such as ``amazon.nova-*`` or ``meta.llama*``, gets the honest
local estimate that warns ``approximate_tokenizer``):

* ``system`` (text blocks, ``cachePoint`` markers) is a system message ahead of the turns;
* each of ``messages``: ``text`` blocks one text joined by newlines (apart where one is tagged), a
  ``toolUse`` an assistant tool call (its ``input`` as JSON), a ``toolResult`` a tool message (its
  ``text`` and ``json`` content), images, documents and videos non-text parts (never guessed);
  ``reasoningContent`` is not counted, as on the LiteLLM path;
* ``toolConfig.tools``: each ``toolSpec`` a function tool with its ``inputSchema.json``;
  ``toolChoice`` (``auto`` / ``any`` / ``tool``) as the chat spelling;
* a ``cachePoint`` marks the end of a cached prefix: the response's cache read + write reconciles
  it apart from the rest, as an Anthropic ``cache_control`` breakpoint does.

Tags go on dicts (botocore checks every parameter against the service model, so none may reach it):
a message or a block with ``cw_tag`` (`cw.segment` works as a block), `cw.message` dicts (turned into
Converse messages), `cw.tool` on a tool (``{"toolSpec": ...}``) or on the spec inside one.

Usage: ``inputTokens`` + ``cacheReadInputTokens`` + ``cacheWriteInputTokens`` is what the context
held; a stream reports it in its ``metadata`` event.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from ..._counting.tags import TAG_KEY
from .base import NOTHING, Forward, Parsed, Reading, Usage

OPERATIONS = frozenset({"Converse", "ConverseStream"})
_NON_TEXT = ("image", "document", "video", "audio")


# ---------------------------------------------------------------- reading a request


def message_as_chat(message: Mapping[str, Any]) -> Any:
    """One Converse message as the chat message(s) the estimator counts (see the module docstring)."""
    content = message.get("content")
    if not isinstance(content, (list, tuple)):
        return message  # a cw.message(...) with a string, or a system head: chat-shaped already
    tag = message.get(TAG_KEY)
    out: list[dict[str, Any]] = []
    parts: list[Any] = []
    calls: list[dict[str, Any]] = []
    cached = False
    tagged_blocks = any(isinstance(b, Mapping) and TAG_KEY in b for b in content)
    for block in content:
        if not isinstance(block, Mapping):
            continue
        if "toolUse" in block:
            use = block["toolUse"]
            function = {"name": use.get("name", ""), "arguments": _json(use.get("input", {}))}
            calls.append({"id": use.get("toolUseId", ""), "type": "function", "function": function})
        elif "toolResult" in block:
            result = block["toolResult"]
            texts = [
                _json(c["json"]) if "json" in c else c.get("text", "")
                for c in result.get("content") or ()
                if isinstance(c, Mapping)
            ]
            tool: dict[str, Any] = {"role": "tool", "tool_call_id": result.get("toolUseId", ""), "content": "\n".join(texts)}
            if block.get(TAG_KEY, tag) is not None:
                tool[TAG_KEY] = block.get(TAG_KEY, tag)
            out.append(tool)
        elif "text" in block and isinstance(block["text"], str):
            parts.append({"type": "text", "text": block["text"], TAG_KEY: block[TAG_KEY]} if TAG_KEY in block else block["text"])
        elif block.get("type") == "text":  # a cw.segment
            parts.append(dict(block))
        elif "cachePoint" in block:
            cached = True
        elif any(kind in block for kind in _NON_TEXT):
            parts.append({"type": "image_url", "image_url": {"url": "bedrock:block"}})  # never guessed from bytes
    if parts or calls:
        strings = [p for p in parts if isinstance(p, str)]
        body: Any = "\n".join(strings) if not tagged_blocks and len(strings) == len(parts) else _apart(parts)
        turn: dict[str, Any] = {"role": "assistant" if message.get("role") == "assistant" else "user", "content": body}
        if calls:
            turn["tool_calls"] = calls
        if tag is not None:
            turn[TAG_KEY] = tag
        if cached:
            turn["cache_control"] = {"type": "ephemeral"}
        out.append(turn)
    return out[0] if len(out) == 1 else out


def _apart(parts: list[Any]) -> list[Any]:
    return [{"type": "text", "text": p} if isinstance(p, str) else p for p in parts]


def _system_head(system: Any) -> list[dict[str, Any]]:
    if not isinstance(system, (list, tuple)) or not system:
        return []
    texts = [b["text"] for b in system if isinstance(b, Mapping) and isinstance(b.get("text"), str)]
    head: dict[str, Any] = {"role": "system", "content": "\n".join(texts)}
    tags = [b[TAG_KEY] for b in system if isinstance(b, Mapping) and TAG_KEY in b]
    if tags:
        head[TAG_KEY] = tags[0]
    if any(isinstance(b, Mapping) and "cachePoint" in b for b in system):
        head["cache_control"] = {"type": "ephemeral"}
    return [head] if texts else []


def _tools(config: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    tools = config.get("tools") if isinstance(config, Mapping) else None
    for tool in tools or ():
        spec = (tool.get("toolSpec") or (tool if "name" in tool else None)) if isinstance(tool, Mapping) else None
        if not isinstance(spec, Mapping):
            continue  # a cachePoint between tools
        schema = spec.get("inputSchema") or {}
        function: dict[str, Any] = {"name": spec.get("name", ""), "parameters": schema.get("json", {})}
        if spec.get("description"):
            function["description"] = spec["description"]
        chat: dict[str, Any] = {"type": "function", "function": function}
        own = spec.get(TAG_KEY, tool.get(TAG_KEY))
        if own is not None:
            chat[TAG_KEY] = own
        out.append(chat)
    return out


def _tool_choice(config: Any) -> Any:
    choice = config.get("toolChoice") if isinstance(config, Mapping) else None
    if not isinstance(choice, Mapping):
        return None
    if "tool" in choice:
        return {"type": "function", "function": {"name": (choice["tool"] or {}).get("name", "")}}
    return "required" if "any" in choice else "auto" if "auto" in choice else None


# ---------------------------------------------------------------- the adapter


class Converse:
    # GenAI semantic conventions: "chat" (Converse is a chat API).
    operation = "chat"

    def parse(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Parsed:
        model = str(kwargs.get("modelId") or "")
        head = _system_head(kwargs.get("system"))
        messages = kwargs.get("messages")
        items = list(messages) if isinstance(messages, (list, tuple)) else []
        config = kwargs.get("toolConfig")
        options = {
            "tools": _tools(config) or None,
            "tool_choice": _tool_choice(config),
            "custom_llm_provider": "bedrock",
            "read_message": message_as_chat,
        }
        return Parsed(bare_model(model), [*head, *items], options, "chat", range(-len(head), len(items)))

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
        messages = kwargs.get("messages")
        if isinstance(messages, (list, tuple)) and any(_needs_cleaning(m) for m in messages):
            kwargs["messages"] = [_clean_message(m) for m in messages]
        system = kwargs.get("system")
        if isinstance(system, (list, tuple)) and any(_needs_cleaning(b) for b in system):
            kwargs["system"] = [_clean_block(b) for b in system]
        config = kwargs.get("toolConfig")
        if isinstance(config, Mapping) and _tagged(config):
            kwargs["toolConfig"] = {**config, "tools": [_clean_tool(t) for t in config.get("tools") or ()]}
        return Forward(args, kwargs)  # a ConverseStream always ends with its usage (the metadata event)

    def count_request(self, forward: Forward, model: str) -> dict[str, Any]:
        kwargs = forward.kwargs
        native = {k: kwargs[k] for k in ("messages", "system", "toolConfig") if kwargs.get(k) is not None}
        return {"model": model, "messages": [], "bedrock": native}

    def read(self, obj: Any) -> Reading:
        """A Converse response, or a stream event: ``metadata`` carries the usage, ``contentBlockStart`` a tool call."""
        if not isinstance(obj, Mapping):
            return NOTHING
        start = obj.get("contentBlockStart")
        if isinstance(start, Mapping):
            use = (start.get("start") or {}).get("toolUse")
            return Reading(tool_calls=(use.get("name", ""),)) if isinstance(use, Mapping) else NOTHING
        stopped = obj.get("messageStop")
        stop = stopped.get("stopReason") if isinstance(stopped, Mapping) else obj.get("stopReason")
        reasons = (stop,) if isinstance(stop, str) else ()
        event = obj.get("metadata")
        usage = (event if isinstance(event, Mapping) else obj).get("usage")
        calls = tuple(_response_calls(obj))
        if not isinstance(usage, Mapping):
            return Reading(tool_calls=calls, finish_reasons=reasons) if calls or reasons else NOTHING
        read = _int(usage.get("cacheReadInputTokens"))
        write = _int(usage.get("cacheWriteInputTokens"))
        given = _int(usage.get("inputTokens"))
        total = None if given is None else given + (read or 0) + (write or 0)
        prefix = (read or 0) + (write or 0) if read is not None or write is not None else None
        return Reading(Usage(total, _int(usage.get("outputTokens")), read, prefix), tool_calls=calls, finish_reasons=reasons)


CONVERSE = Converse()


def bare_model(model_id: str) -> str:
    """A model id, an inference profile (``us.anthropic.claude-...``) or an ARN, as the model's own id."""
    return model_id.rsplit("/", 1)[-1]


def _response_calls(obj: Mapping[str, Any]) -> list[str]:
    message = (obj.get("output") or {}).get("message") if isinstance(obj.get("output"), Mapping) else None
    blocks = message.get("content") if isinstance(message, Mapping) else None
    return [
        b["toolUse"].get("name", "") for b in blocks or () if isinstance(b, Mapping) and isinstance(b.get("toolUse"), Mapping)
    ]


# ---------------------------------------------------------------- tags out


def _tagged(obj: Any) -> bool:
    if isinstance(obj, Mapping):
        return TAG_KEY in obj or any(_tagged(v) for v in obj.values() if isinstance(v, (Mapping, list, tuple)))
    if isinstance(obj, (list, tuple)):
        return any(_tagged(v) for v in obj)
    return False


def _needs_cleaning(item: Any) -> bool:
    """A tag anywhere in it, or a chat-shaped `cw.message` / `cw.segment` that botocore would refuse."""
    if not isinstance(item, Mapping):
        return False
    return _tagged(item) or isinstance(item.get("content"), str) or item.get("type") == "text"


def _clean_message(message: Any) -> Any:
    if not isinstance(message, Mapping) or not _needs_cleaning(message):
        return message
    content = message.get("content")
    role = "assistant" if message.get("role") == "assistant" else "user"
    if message.get("role") in ("tool", "function") and "tool_call_id" in message:  # cw.message("tool", ...)
        result = {"toolUseId": message["tool_call_id"], "content": [{"text": content if isinstance(content, str) else ""}]}
        return {"role": "user", "content": [{"toolResult": result}]}
    blocks = [{"text": content}] if isinstance(content, str) else [_clean_block(b) for b in content or ()]
    return {"role": role, "content": blocks}


def _clean_block(block: Any) -> Any:
    if isinstance(block, str):
        return {"text": block}
    if not isinstance(block, Mapping):
        return block
    if block.get("type") == "text":  # a cw.segment: the Converse block it stands for
        return {"text": block.get("text", "")}
    clean = {k: v for k, v in block.items() if k != TAG_KEY}
    result = clean.get("toolResult")
    if isinstance(result, Mapping) and _tagged(result):
        clean["toolResult"] = {**result, "content": [_clean_block(c) for c in result.get("content") or ()]}
    return clean


def _clean_tool(tool: Any) -> Any:
    if not isinstance(tool, Mapping) or not _tagged(tool):
        return tool
    spec = tool.get("toolSpec")
    if isinstance(spec, Mapping):
        return {"toolSpec": {k: v for k, v in spec.items() if k != TAG_KEY}}
    if "name" in tool:  # cw.tool on a bare spec: the tool that holds it
        return {"toolSpec": {k: v for k, v in tool.items() if k != TAG_KEY}}
    return {k: v for k, v in tool.items() if k != TAG_KEY}


# ---------------------------------------------------------------- helpers


def _int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _json(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)
