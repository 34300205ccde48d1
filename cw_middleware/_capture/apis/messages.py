"""Anthropic Messages (the ``anthropic`` client's ``messages.create`` / ``messages.stream``): blocks, tools, usage.

The estimator reads chat-shaped requests, and the Anthropic counting rules were calibrated on them
(LiteLLM's Anthropic path: OpenAI-style messages that LiteLLM turns into Messages). So a native
request is read as the chat request LiteLLM would have turned into it, and counts the same:

* ``system`` (a string, or text blocks with their ``cache_control``) is a system message ahead of
  the turns;
* a user or assistant message with plain text is its own message (the same dict: no copy); with
  blocks, it is read (`message_as_chat`) as: a tool message per ``tool_result`` block (its
  ``tool_use_id`` and content), then the rest of the turn, whose ``tool_use`` (and
  ``server_tool_use``) blocks become ``tool_calls`` (arguments as JSON), ``text`` blocks one text
  joined by newlines (apart where one is tagged), a server tool's result its content as text, and
  images or documents non-text parts (never guessed: response usage gives them what the local
  count missed). ``thinking`` blocks are not counted, as on the LiteLLM path;
* ``tools`` with ``input_schema`` are function tools with those ``parameters``; server tools (web
  search, code execution, ...) raise ``provider_tool_not_estimated``; ``tool_choice`` keeps
  Anthropic's spelling (the rules read it); ``thinking`` and ``output_config.format`` (or
  ``output_format``) count as on the LiteLLM path.

That is the form the accuracy scorer gives a recorded Anthropic request, the one the Anthropic rules
were calibrated on: on the shared data set's 302 clean Anthropic records the two give the same
estimate, record for record (benchmarks/native_accuracy.py).

``cache_control`` stays on the blocks the estimator reads, so a breakpoint marks the same prefix and
the response's cache read + write reconciles it in two groups (`reconcile.reconcile_with_prefix`).

Usage: ``input_tokens`` + ``cache_creation_input_tokens`` + ``cache_read_input_tokens`` is what the
context held; a stream reports it on ``message_start`` and its output (and, lately, the input
again) on ``message_delta``, merged by the call (`Usage.over`).

Tags: `cw.message` dicts and `cw.segment` blocks work in ``messages`` and ``system`` (a segment is a
text block), `cw.tool` on tool definitions; a ``cw.message("tool", ..., tool_call_id=ID)`` becomes
the user turn with that ``tool_result``. Before the request goes out, every tag is removed, nested
ones (in a ``tool_result``'s content) included; untagged messages are passed on untouched.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from ..._counting.tags import TAG_KEY, strip_messages, strip_part, strip_tools
from ..._kernel.contract import WarningCode
from ..._snapshots.reconcile import usage_cache_prefix_tokens, usage_input_tokens
from .base import NOTHING, Forward, Parsed, Reading, Usage

_SYSTEM = {"role": "system"}
_TEXT = "text"
_NOT_COUNTED = frozenset({"thinking", "redacted_thinking"})
_CALLS = ("tool_use", "server_tool_use")
_STREAM_START, _STREAM_DELTA = "message_start", "message_delta"
_INPUT_FIELDS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


# ---------------------------------------------------------------- reading a request


def message_as_chat(message: dict[str, Any]) -> Any:
    """One entry of ``messages`` as the chat message(s) the estimator counts (see the module docstring)."""
    content = message.get("content")
    if not isinstance(content, (list, tuple)) or message.get("role") not in ("user", "assistant"):
        return message  # a string turn, a system head, a cw.message("tool", ...): chat-shaped already
    tag = message.get(TAG_KEY)
    out: list[dict[str, Any]] = []
    parts: list[Any] = []
    calls: list[dict[str, Any]] = []
    for block in content:
        kind = _kind(block)
        if kind == "tool_result":
            result = {"role": "tool", "tool_call_id": block.get("tool_use_id", ""), "content": _joined(block.get("content"))}
            own = block.get(TAG_KEY, tag)
            if own is not None:
                result[TAG_KEY] = own
            out.append(result)
        elif kind in _CALLS:
            arguments = block.get("input", {})
            calls.append(
                {
                    "id": block.get("id", ""),
                    "type": "function",
                    "function": {"name": block.get("name", ""), "arguments": _json(arguments)},
                }
            )
        elif isinstance(kind, str) and kind.endswith("_tool_result"):  # a server tool's result: its content as text
            parts.append({"type": _TEXT, "text": _json(block.get("content"))})
        elif kind not in _NOT_COUNTED:
            parts.append(block)
    if parts or calls:
        turn: dict[str, Any] = {"role": message["role"], "content": _joined(parts) if parts else None}
        if calls:
            turn["tool_calls"] = calls
        if tag is not None:
            turn[TAG_KEY] = tag
        out.append(turn)
    return out[0] if len(out) == 1 else out


def _joined(content: Any) -> Any:
    """Text blocks as the one text LiteLLM's caller writes (joined by newlines), unless a block is tagged.

    The Anthropic rules were calibrated on requests whose turns hold one text each: blocks of one
    turn counted apart would each round up, and miss the newline between them. Images and
    documents stay parts of their own (never guessed); a tagged block keeps its own count.
    """
    if not isinstance(content, (list, tuple)):
        return content
    texts, others = [], []
    for block in content:
        if isinstance(block, str):
            texts.append(block)
        elif isinstance(block, Mapping) and TAG_KEY in block:
            return list(content)  # a tagged block counts under its tag: the blocks stay apart
        elif _kind(block) == _TEXT and isinstance(block.get("text"), str):
            texts.append(block["text"])
        else:
            others.append(block)
    text = "\n".join(texts)
    if not others:
        return text
    return [{"type": _TEXT, "text": text}, *others] if texts else others


def _kind(block: Any) -> Any:
    return block.get("type", _TEXT) if isinstance(block, Mapping) else _TEXT


def _system_head(system: Any) -> list[dict[str, Any]]:
    if isinstance(system, str):
        return [{**_SYSTEM, "content": system}] if system else []
    if isinstance(system, (list, tuple)) and system:
        head = {**_SYSTEM, "content": _joined(system)}
        if any(isinstance(block, Mapping) and block.get("cache_control") for block in system):
            head["cache_control"] = {"type": "ephemeral"}  # the breakpoint the estimator looks for on the message
        return [head]
    return []


def _tools(tools: Sequence[Any], warnings: set[WarningCode]) -> list[Any]:
    """Client tools as chat function tools (tag and ``cache_control`` kept on the tool); server tools left out."""
    out = []
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        if tool.get("type") not in (None, "custom") or "input_schema" not in tool:
            warnings.add(WarningCode.PROVIDER_TOOL_NOT_ESTIMATED)
            continue
        # The function LiteLLM's caller writes for it, as the Anthropic rules were calibrated on (benchmarks/
        # native_accuracy.py): name, parameters, then a description that is not empty; ``strict`` is not counted.
        function = {"name": tool.get("name", ""), "parameters": tool["input_schema"]}
        if tool.get("description"):
            function["description"] = tool["description"]
        chat: dict[str, Any] = {"type": "function", "function": function}
        for key in (TAG_KEY, "cache_control"):
            if key in tool:
                chat[key] = tool[key]
        out.append(chat)
    return out


def _response_format(output_config: Any, output_format: Any) -> Any:
    """``output_config.format`` (or the earlier ``output_format``) as the response_format the rules count."""
    fmt = output_format if isinstance(output_format, Mapping) else None
    if fmt is None and isinstance(output_config, Mapping):
        fmt = output_config.get("format")
    if isinstance(fmt, Mapping) and isinstance(fmt.get("schema"), Mapping):
        return {"type": "json_schema", "json_schema": {"schema": fmt["schema"]}}
    schema = getattr(output_format, "model_json_schema", None)
    if isinstance(output_format, type) and callable(schema):  # messages.stream(output_format=SomeModel)
        return {"type": "json_schema", "json_schema": {"schema": schema()}}
    return None


# ---------------------------------------------------------------- the adapter


class Messages:
    # GenAI semantic conventions: "chat" (Anthropic Messages is a chat API).
    operation = "chat"

    def parse(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Parsed:
        model = kwargs.get("model")
        messages = kwargs.get("messages")
        head = _system_head(kwargs.get("system"))
        items = list(messages) if isinstance(messages, (list, tuple)) else []
        warnings: set[WarningCode] = set()
        tools = kwargs.get("tools")
        options = {
            "tools": _tools(tools, warnings) if isinstance(tools, (list, tuple)) and tools else None,
            "tool_choice": kwargs.get("tool_choice"),
            "response_format": _response_format(kwargs.get("output_config"), kwargs.get("output_format")),
            "custom_llm_provider": "anthropic",
            "read_message": message_as_chat,
            "thinking": kwargs.get("thinking"),
        }
        listed = [*head, *items] if head or type(messages) is not list else messages
        origins = range(-len(head), len(items))  # negative: the system head, not an entry of messages
        return Parsed(str(model or ""), listed, options, "chat", origins, frozenset(warnings))

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
        out = Forward(args, kwargs)
        messages = kwargs.get("messages")
        if isinstance(messages, (list, tuple)):
            clean = strip_messages(messages, _tagged_messages(parsed, tagged, messages), _clean_message)
            if clean is not messages:
                kwargs["messages"] = clean
        system = kwargs.get("system")
        if isinstance(system, (list, tuple)) and any(_tagged(block) for block in system):
            kwargs["system"] = [strip_part(block) for block in system]
        tools = kwargs.get("tools")
        clean_tools = strip_tools(tools)
        if clean_tools is not tools:
            kwargs["tools"] = clean_tools
        return out  # a Messages stream always reports its usage (message_start, message_delta)

    def count_request(self, forward: Forward, model: str) -> dict[str, Any]:
        """The clean request as Anthropic's count endpoint takes it (``anthropic``), with its chat shape."""
        kwargs = forward.kwargs
        body = {k: kwargs[k] for k in ("messages", "system", "tools", "tool_choice", "thinking") if kwargs.get(k) is not None}
        return {"model": model, "messages": [], "anthropic": body}

    def read(self, obj: Any) -> Reading:
        """A Message, or a stream event: ``message_start`` (input) and ``message_delta`` (output) carry usage."""
        fields = getattr(obj, "__dict__", None)
        kind = fields.get("type") if isinstance(fields, dict) else _get(obj, "type")
        if kind == _STREAM_START:
            obj = _get(obj, "message")
        elif kind == _STREAM_DELTA:
            stop = _get(_get(obj, "delta"), "stop_reason")
            return Reading(_delta_usage(_get(obj, "usage")), finish_reasons=(stop,) if isinstance(stop, str) else ())
        elif kind != "message":
            return NOTHING
        usage = _get(obj, "usage")
        model = _get(obj, "model")
        model = model if isinstance(model, str) else None
        stop = _get(obj, "stop_reason")
        reasons = (stop,) if isinstance(stop, str) else ()
        if usage is None:
            return Reading(None, model, finish_reasons=reasons) if model else NOTHING
        return Reading(_usage(usage), model, finish_reasons=reasons)


MESSAGES = Messages()


def _usage(usage: Any) -> Usage:
    read = _get(usage, "cache_read_input_tokens")
    return Usage(
        usage_input_tokens(usage),
        _get(usage, "output_tokens"),
        read if isinstance(read, int) else None,
        usage_cache_prefix_tokens(usage),
    )


def _delta_usage(usage: Any) -> Optional[Usage]:
    """``message_delta``'s usage: the output, and the input only where it reports all three input fields."""
    if usage is None:
        return None
    whole = all(
        isinstance(_get(usage, k), int) for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
    if whole:
        return _usage(usage)
    return Usage(None, _get(usage, "output_tokens"))


# ---------------------------------------------------------------- tags out


def _tagged_messages(parsed: Parsed, tagged: Optional[Sequence[int]], messages: Sequence[Any]) -> list[int]:
    """Indexes of the entries of ``messages`` that carry a tag: from the tagged messages when known, else all checked."""
    origins = parsed.origins
    if tagged is None or origins is None or len(origins) != len(parsed.messages):
        return [i for i, message in enumerate(messages) if _tagged(message)]
    return sorted({o for i in tagged if (o := origins[i]) >= 0 and _tagged(messages[o])})


def _tagged(item: Any) -> bool:
    """A message or block that carries a tag: on itself, on a block, or on a block inside a tool_result."""
    if not isinstance(item, Mapping):
        return False
    if TAG_KEY in item:
        return True
    content = item.get("content")
    return isinstance(content, (list, tuple)) and any(_tagged(block) for block in content)


def _clean_message(message: Any) -> Any:
    if not isinstance(message, Mapping):
        return message
    if message.get("role") in ("tool", "function") and "tool_call_id" in message:  # cw.message("tool", ...)
        result = {
            "type": "tool_result",
            "tool_use_id": message["tool_call_id"],
            "content": _clean_content(message.get("content")),
        }
        return {"role": "user", "content": [result]}
    clean = {k: v for k, v in message.items() if k != TAG_KEY}
    if "content" in clean:
        clean["content"] = _clean_content(clean["content"])
    return clean


def _clean_content(content: Any) -> Any:
    if not isinstance(content, (list, tuple)):
        return content
    return [_clean_block(block) for block in content]


def _clean_block(block: Any) -> Any:
    if not isinstance(block, Mapping) or not _tagged(block):
        return block
    clean = {k: v for k, v in block.items() if k != TAG_KEY}
    if isinstance(clean.get("content"), (list, tuple)):
        clean["content"] = _clean_content(clean["content"])
    return clean


# ---------------------------------------------------------------- helpers


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
