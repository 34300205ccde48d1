"""The Responses API (``litellm.responses`` / ``aresponses``): input items, flat tools, ``text.format``, usage.

The estimator reads chat-shaped requests, so `to_chat` turns a Responses request
into one, tags kept: ``instructions`` and a string ``input`` become a system and
a user message; message items stay as they are (the same dicts: no copy);
each ``function_call`` item becomes an assistant turn with that one call (its
``namespace``, if any, kept on the call's function: part of the tool's address) and
each ``function_call_output`` item a tool message; flat function tools
(``{"type": "function", "name": ...}``) become chat tools; ``text.format``
becomes a ``response_format``. What the provider holds or encrypts
(``previous_response_id``, item references, reasoning items) and provider-run
tools (web search, file search, remote MCP, ...) cannot be counted here: they
raise warnings, and response usage still reconciles the total.

Tags: `cw.message` dicts and `cw.segment` parts work inside ``input`` as in chat
messages, and `cw.tool` on Responses tool definitions. Before the request goes
out, a tagged item loses its tags, its ``text`` parts become ``input_text`` (or
``output_text`` for the assistant), as the Responses API spells them, and a
``cw.message("tool", ..., tool_call_id=ID)`` becomes the ``function_call_output``
item it stands for. Untagged items are passed on untouched.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from ..._counting.tags import TAG_KEY, has_tag, strip_messages, strip_tools
from ..._kernel.contract import WarningCode
from .base import NOTHING, Forward, Parsed, Reading, Usage

# Events whose response carries the final usage block.
TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete"})
# responses() arguments that continue a conversation the provider stores.
_STORED_CONTEXT_KEYS = ("previous_response_id", "conversation", "prompt")
_MESSAGE_TYPES = (None, "message")
_CALL_TYPES = {"function_call": "arguments", "custom_tool_call": "input"}
_OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})
_COUNTED_TOOLS = frozenset({"function", "custom"})  # tools the caller runs; the others are the provider's
_TOOL_ROLES = ("tool", "function")
_INSTRUCTIONS = {"category": "system_prompt", "source": "instructions"}
_ADDITIONAL_TOOLS = {"category": "tools", "source": "additional_tools"}


@dataclass
class ChatShape:
    """A Responses request as chat-shaped messages and tools, for the estimator (and the count converters).

    ``messages`` holds the input items themselves (the caller's list when there are no
    instructions): the estimator reads each new item through `item_as_message`, so a
    turn costs what is new in it, as for Chat Completions.
    """

    messages: list[Any] = field(default_factory=list)
    origins: Sequence[int] = ()  # input-item index of each message; -1: not an item
    tools: Optional[list[Any]] = None
    tool_choice: Any = None
    response_format: Any = None
    warnings: set[WarningCode] = field(default_factory=set)


def to_chat(
    input: Any, instructions: Any = None, tools: Any = None, tool_choice: Any = None, text: Any = None, text_format: Any = None
) -> ChatShape:
    shape = ChatShape()
    head: list[Any] = []
    if isinstance(instructions, str) and instructions:
        head.append({"role": "system", "content": instructions, TAG_KEY: _INSTRUCTIONS})
    elif isinstance(instructions, (list, tuple)):  # instructions as input items (a stored prompt's shape)
        head.extend(instructions)
    if isinstance(input, str):
        shape.messages = [*head, {"role": "user", "content": input}]
        shape.origins = [-1] * len(shape.messages)
    elif isinstance(input, (list, tuple)):
        shape.messages = [*head, *input] if head or type(input) is not list else input
        shape.origins = range(-len(head), len(input))  # negative: an instructions message, not an item
    else:
        shape.messages = head
        shape.origins = [-1] * len(head)
    if tools:
        shape.tools = _counted_tools(tools, shape.warnings)
    shape.tool_choice = _chat_tool_choice(tool_choice)
    shape.response_format = _response_format(text, text_format)
    return shape


def item_as_message(item: dict[str, Any]) -> Optional[dict[str, Any]]:
    """One input item as the chat message the estimator counts; None for what it cannot see.

    A message item is its own message; each ``function_call`` item is an assistant turn with
    that one call (the Responses API does not merge consecutive calls into one parallel call
    as a chat message's tool_calls list is: measured, benchmarks/accuracy.py); a
    ``function_call_output`` item is a tool message. Reasoning items (encrypted), item
    references and provider-run tool calls are held or encrypted by the provider: None.
    """
    kind = item.get("type")
    if kind is None or kind == "message":
        return item if "role" in item else None
    if kind in _CALL_TYPES:
        arguments = item.get(_CALL_TYPES[kind], "")
        function = {
            "name": item.get("name", ""),
            "arguments": arguments if isinstance(arguments, str) else _json(arguments),
        }
        namespace = item.get("namespace")
        if isinstance(namespace, str) and namespace:  # a call into a namespace of tools: part of its address
            function["namespace"] = namespace
        call = {"id": item.get("call_id") or item.get("id") or "", "type": "function", "function": function}
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    if kind == "additional_tools":  # tools made available mid-conversation (tool search, deferred tools)
        tools = [t for t in item.get("tools") or () if isinstance(t, Mapping) and t.get("type", "function") in _COUNTED_TOOLS]
        if not tools:
            return None
        return {"role": item.get("role") or "developer", "content": None, "tools": tools, TAG_KEY: _ADDITIONAL_TOOLS}
    if kind in _OUTPUT_TYPES:
        message = {"role": "tool", "tool_call_id": item.get("call_id", ""), "content": _output(item.get("output"))}
        if TAG_KEY in item:
            message[TAG_KEY] = item[TAG_KEY]
        return message
    return None


def _output(output: Any) -> Any:
    if isinstance(output, (str, list, tuple)) or output is None:
        return output
    return _json(output)


def _counted_tools(tools: Sequence[Any], warnings: set[WarningCode]) -> Any:
    """The tools the estimator counts: flat function tools (``{"type": "function", "name": ...}``) and custom ones, as they are.

    The counting rules read a flat definition as they read a chat tool's ``function``, so
    the caller's list is passed on untouched (the tools cache compares it by value); only
    provider-run tools (web search, file search, remote MCP, ...) are left out, with a warning.
    A custom tool (free-form input) is the caller's own and shown to the model: it is counted.
    """
    if all(type(tool) is dict and tool.get("type") in _COUNTED_TOOLS for tool in tools):
        return tools
    counted = [tool for tool in tools if _as_dict(tool).get("type") in _COUNTED_TOOLS]
    if len(counted) < len(tools):
        warnings.add(WarningCode.PROVIDER_TOOL_NOT_ESTIMATED)
    return counted


def _chat_tools(tools: Sequence[Any]) -> list[Any]:
    """Flat function tools as chat tools (for the Anthropic and Gemini count converters)."""
    out = []
    for raw in tools:
        tool = _as_dict(raw)
        if "function" in tool:
            out.append(tool)
        else:
            out.append(
                {
                    "type": "function",
                    "function": {k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool},
                }
            )
    return out


def _chat_tool_choice(tool_choice: Any) -> Any:
    if isinstance(tool_choice, Mapping) and tool_choice.get("type") == "function" and "name" in tool_choice:
        return {"type": "function", "function": {"name": tool_choice["name"]}}
    return tool_choice


def _response_format(text: Any, text_format: Any) -> Any:
    if text_format is not None:
        return text_format  # a pydantic class or a schema dict, as for completion()'s response_format
    fmt = _as_dict(text).get("format") if text is not None else None
    if not isinstance(fmt, Mapping):
        return None
    if fmt.get("type") == "json_schema":
        spec = {k: fmt[k] for k in ("name", "description", "schema", "strict") if k in fmt}
        return {"type": "json_schema", "json_schema": spec}
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    return None


# ---------------------------------------------------------------- the adapter


class Responses:
    # GenAI semantic conventions: "chat" applies (there is no value of its own for the Responses API).
    operation = "chat"

    def parse(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Parsed:
        # litellm.responses(input, model, ...): input comes first.
        input = kwargs.get("input", args[0] if args else None)
        model = kwargs.get("model", args[1] if len(args) > 1 else None)
        shape = to_chat(
            input,
            kwargs.get("instructions"),
            kwargs.get("tools"),
            kwargs.get("tool_choice"),
            kwargs.get("text"),
            kwargs.get("text_format"),
        )
        if any(kwargs.get(k) for k in _STORED_CONTEXT_KEYS):
            shape.warnings.add(WarningCode.OPAQUE_CONTEXT_NOT_ESTIMATED)
        options = {
            "tools": shape.tools,
            "tool_choice": shape.tool_choice,
            "response_format": shape.response_format,
            "custom_llm_provider": kwargs.get("custom_llm_provider"),
            "read_message": item_as_message,
        }
        return Parsed(str(model or ""), shape.messages, options, "responses", shape.origins, frozenset(shape.warnings))

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
        items = kwargs.get("input", args[0] if args else None)
        if isinstance(items, (list, tuple)):
            clean = strip_messages(items, _tagged_items(parsed, tagged, items), _clean_item)
            if clean is not items:
                if args and "input" not in kwargs:
                    out.args = (clean, *args[1:])
                else:
                    kwargs["input"] = clean
        tools = kwargs.get("tools")
        clean_tools = strip_tools(tools)
        if clean_tools is not tools:
            kwargs["tools"] = clean_tools
        return out  # a Responses stream always ends with its usage (response.completed): nothing to ask for

    def count_request(self, forward: Forward, model: str) -> dict[str, Any]:
        args, kwargs = forward.args, forward.kwargs
        body: dict[str, Any] = {"input": kwargs.get("input", args[0] if args else None)}
        for key in ("instructions", "tools", "tool_choice", "text", "reasoning", "parallel_tool_calls"):
            if kwargs.get(key) is not None:
                body[key] = kwargs[key]
        shape = to_chat(body["input"], body.get("instructions"), body.get("tools"), body.get("tool_choice"), body.get("text"))
        messages = [m for m in (item_as_message(_as_dict(item)) for item in shape.messages) if m is not None]
        # The chat shape serves the Anthropic and Gemini count converters; OpenAI counts the body as it is.
        request: dict[str, Any] = {"model": model, "messages": messages, "responses": body}
        for key, value in (
            ("tools", shape.tools),
            ("tool_choice", shape.tool_choice),
            ("response_format", shape.response_format),
        ):
            if value:
                request[key] = value
        return request

    def read(self, obj: Any) -> Reading:
        """A ResponsesAPIResponse, or a stream event: only the terminal event carries the final usage."""
        fields = getattr(obj, "__dict__", None)  # a pydantic object's fields: no slow __getattr__ for a missing one
        kind = fields.get("type") if isinstance(fields, dict) else getattr(obj, "type", None)
        if isinstance(kind, str):
            if getattr(kind, "value", kind) not in TERMINAL_EVENTS:  # LiteLLM's event types are a str Enum
                return NOTHING
            obj = getattr(obj, "response", None)
        usage = _get(obj, "usage")
        model = _get(obj, "model")
        model = model if isinstance(model, str) else None
        calls = _output_calls(_get(obj, "output"))
        status = _get(obj, "status")
        reason = _get(_get(obj, "incomplete_details"), "reason") or status
        reasons = (reason,) if isinstance(reason, str) else ()
        if usage is None:
            return Reading(None, model, tool_calls=calls, finish_reasons=reasons) if model or calls else NOTHING
        input_tokens = _get(usage, "input_tokens")
        cached = _get(_get(usage, "input_tokens_details"), "cached_tokens")
        return Reading(
            Usage(
                input_tokens if isinstance(input_tokens, int) and input_tokens >= 0 else None,
                _get(usage, "output_tokens"),
                cached if isinstance(cached, int) else None,
            ),
            model,
            tool_calls=calls,
            finish_reasons=reasons,
        )


RESPONSES = Responses()


# ---------------------------------------------------------------- tags out


def _tagged_items(parsed: Parsed, tagged: Optional[Sequence[int]], items: Sequence[Any]) -> Optional[list[int]]:
    """Indexes of the input items that carry a tag, from the tagged messages when they are known; None: check all."""
    if tagged is None or parsed.origins is None or len(parsed.origins) != len(parsed.messages):
        return None
    # An item read as a tagged message is not always tagged itself (additional_tools: tagged as tools by the reader).
    return sorted({o for i in tagged if (o := parsed.origins[i]) >= 0 and has_tag(items[o])})


def _clean_item(item: Any) -> Any:
    if not isinstance(item, Mapping):
        return item
    role = item.get("role")
    if role in _TOOL_ROLES and "tool_call_id" in item:  # cw.message("tool", ...): the item it stands for
        return {"type": "function_call_output", "call_id": item["tool_call_id"], "output": _output_text(item.get("content"))}
    clean = {k: v for k, v in item.items() if k != TAG_KEY}
    content = item.get("content")
    if isinstance(content, (list, tuple)):
        kind = "output_text" if role == "assistant" else "input_text"
        clean["content"] = [_clean_part(part, kind) for part in content]
    return clean


def _clean_part(part: Any, kind: str) -> Any:
    if not isinstance(part, Mapping):
        return part
    clean = {k: v for k, v in part.items() if k != TAG_KEY}
    if clean.get("type") == "text":  # cw.segment and cw.message write chat parts
        clean["type"] = kind
    return clean


def _output_text(content: Any) -> Any:
    if isinstance(content, (list, tuple)):
        return [_clean_part(part, "input_text") for part in content]
    return content


# ---------------------------------------------------------------- helpers


def _as_dict(obj: Any) -> Any:
    """Items may be dicts or the SDK's objects (a previous response's output items appended to input)."""
    if isinstance(obj, dict):
        return obj
    if isinstance(obj, Mapping):
        return dict(obj)
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        try:
            dumped = dump(exclude_none=True)
            return dumped if isinstance(dumped, dict) else {}
        except Exception:  # noqa: BLE001 - an odd object: not countable, LiteLLM's to judge
            return {}
    return {}


def _output_calls(output: Any) -> tuple[str, ...]:
    """The tool names a response's output items call (``function_call``, ``custom_tool_call``)."""
    if not isinstance(output, (list, tuple)):
        return ()
    names = []
    for item in output:
        if _get(item, "type") in _CALL_TYPES:
            name = _get(item, "name")
            if isinstance(name, str) and name:
                names.append(name)
    return tuple(names)


def _get(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)
