"""Tags: how a caller says what a prompt segment or a tool is.

A tag is a small dict stored under the reserved key ``cw_tag`` of a message, a
content part or a tool definition: ``{"category": "memory", "source": "AGENTS.md"}``.
Plain dicts keep tagged requests JSON-serialisable (the CLI's ``estimate`` reads
them from a file) and comparable by value, which the incremental estimator relies
on. Tags never reach the provider: ``strip_*`` removes them before LiteLLM sees
the request.

Bad tags raise `TagError` where they are made (``segment``, ``message``, ``tool``)
and, for hand-built tags, when the request is read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

from .._kernel.contract import Category
from .._kernel.errors import TagError

TAG_KEY = "cw_tag"
MAX_SOURCE_LENGTH = 120

MESSAGE_ROLES = ("system", "developer", "user", "assistant", "tool", "function")

# Labels the middleware derives from request fields rather than from a caller's tag: an unknown
# role string, the server part of an ``mcp__server__tool`` name. They are exported, so they are
# held to the shape of an OpenAI tool name (``^[a-zA-Z0-9_-]{1,64}$``) plus ``.``: anything else
# could be prompt text, or break a backend's label rules.
MAX_DERIVED_LABEL = 64
UNKNOWN_ROLE_LABEL = "unknown_role"
_NOT_LABEL = re.compile(r"[^A-Za-z0-9_.\-]")


@dataclass(frozen=True)
class Tag:
    category: Category
    source: Optional[str] = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"category": self.category.value}
        if self.source is not None:
            out["source"] = self.source
        return out


@dataclass(frozen=True)
class ToolSource:
    """Where a tool definition comes from; decides its category."""

    category: Category
    label: str

    @classmethod
    def native(cls) -> ToolSource:
        return cls(Category.TOOLS, "native")

    @classmethod
    def mcp(cls, server: str) -> ToolSource:
        return cls(Category.MCP_TOOLS, f"mcp:{_check_label(server, 'MCP server name')}")

    @classmethod
    def skill(cls, name: str) -> ToolSource:
        return cls(Category.SKILLS, f"skill:{_check_label(name, 'skill name')}")


def _check_label(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TagError(f"{what} must be a non-empty string, got {type(value).__name__}")
    if len(value) > MAX_SOURCE_LENGTH:
        raise TagError(f"{what} is {len(value)} characters; at most {MAX_SOURCE_LENGTH} are allowed")
    return value


def role_label(role: str) -> str:
    """An untagged message's source label: its role when that reads as a role name, else ``unknown_role``.

    A role string is the caller's, not ours: one that is long or holds spaces, punctuation or
    control characters may be text, so it is never exported as it is.
    """
    return derived_label(role, UNKNOWN_ROLE_LABEL)


def derived_label(value: str, fallback: str) -> str:
    """``value`` when it has the shape of a derived label (a tool name's, plus ``.``), else ``fallback``."""
    if 0 < len(value) <= MAX_DERIVED_LABEL and not _NOT_LABEL.search(value):
        return value
    return fallback


def mcp_server_label(server: str) -> str:
    """``mcp:<server>`` for a server name read from a tool name: other characters become ``_``, at most 64 kept."""
    name = _NOT_LABEL.sub("_", server[:MAX_DERIVED_LABEL]) or "unknown"
    return f"mcp:{name}"


def make_tag(category: Union[Category, str], source: Optional[str] = None) -> Tag:
    """Validate a category and source label into a Tag (raises TagError)."""
    if isinstance(category, Category):
        cat = category
    elif isinstance(category, str):
        try:
            cat = Category(category)
        except ValueError:
            allowed = ", ".join(c.value for c in Category)
            raise TagError(f"unknown category {category!r}; expected one of: {allowed}") from None
    else:
        raise TagError(f"category must be a string or cw.Category, got {type(category).__name__}")
    if source is not None:
        _check_label(source, "source")
    return Tag(cat, source)


def read_tag(obj: Mapping[str, Any]) -> Optional[Tag]:
    """The tag stored on a message, part or tool, validated; None when untagged."""
    raw = obj.get(TAG_KEY)
    if raw is None:
        return None
    if isinstance(raw, Tag):
        return raw
    if not isinstance(raw, Mapping) or "category" not in raw:
        raise TagError(f"{TAG_KEY} must be a mapping with a 'category' key, got {type(raw).__name__}")
    return make_tag(raw["category"], raw.get("source"))


# ---------------------------------------------------------------- making tags


def segment(text: str, category: Union[Category, str], source: Optional[str] = None) -> dict[str, Any]:
    """A text content part tagged with its category: use inside `message` content lists."""
    if not isinstance(text, str):
        raise TagError(f"segment text must be a string, got {type(text).__name__}")
    tag = make_tag(category, source)
    return {"type": "text", "text": text, TAG_KEY: tag.as_dict()}


def message(
    role: str,
    content: Union[str, Sequence[Any], None],
    *,
    category: Union[Category, str, None] = None,
    source: Optional[str] = None,
    **fields: Any,
) -> dict[str, Any]:
    """A chat message; with ``category`` every part of it counts there.

    ``content`` is a string or a list of parts (strings, `segment` dicts, or any
    OpenAI-style part). Extra fields (``tool_call_id``, ``name``, ``tool_calls``)
    are kept as given.
    """
    if role not in MESSAGE_ROLES:
        raise TagError(f"unknown message role {role!r}; expected one of: {', '.join(MESSAGE_ROLES)}")
    if content is not None and not isinstance(content, (str, list, tuple)):
        raise TagError(f"message content must be a string or a list of parts, got {type(content).__name__}")
    if source is not None and category is None:
        raise TagError("a message source needs a category")
    out: dict[str, Any] = {"role": role}
    if isinstance(content, (list, tuple)):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append({"type": "text", "text": part})
            elif isinstance(part, Mapping):
                read_tag(part)  # validate now, not at call time
                parts.append(dict(part))
            else:
                raise TagError(f"a content part must be a string or a dict, got {type(part).__name__}")
        out["content"] = parts
    else:
        out["content"] = content
    out.update(fields)
    if category is not None:
        out[TAG_KEY] = make_tag(category, source).as_dict()
    return out


def tool(definition: Mapping[str, Any], source: Optional[ToolSource] = None) -> dict[str, Any]:
    """A copy of an OpenAI-style tool definition tagged with where it comes from."""
    if not isinstance(definition, Mapping):
        raise TagError(f"a tool definition must be a dict, got {type(definition).__name__}")
    if source is None:
        source = ToolSource.native()
    if not isinstance(source, ToolSource):
        raise TagError(f"tool source must be a cw.ToolSource, got {type(source).__name__}")
    out = dict(definition)
    out[TAG_KEY] = Tag(source.category, source.label).as_dict()
    return out


# ---------------------------------------------------------------- stripping tags


def strip_part(part: Any) -> Any:
    if isinstance(part, dict) and TAG_KEY in part:
        return {k: v for k, v in part.items() if k != TAG_KEY}
    return part


def strip_message(msg: Any) -> Any:
    """The message as the provider must see it; the same object when it carries no tag."""
    if not isinstance(msg, dict):
        return msg
    content = msg.get("content")
    parts_tagged = isinstance(content, (list, tuple)) and any(isinstance(p, dict) and TAG_KEY in p for p in content)
    if TAG_KEY not in msg and not parts_tagged:
        return msg
    clean = {k: v for k, v in msg.items() if k != TAG_KEY}
    if parts_tagged and isinstance(content, (list, tuple)):
        clean["content"] = [strip_part(p) for p in content]
    return clean


def strip_tool(definition: Any) -> Any:
    return strip_part(definition)


def strip_messages(messages: Any, tagged: Optional[Sequence[int]], clean: Callable[[Any], Any] = strip_message) -> Any:
    """The messages (or input items) as the provider must see them; the same list when none is tagged.

    ``tagged`` are the indexes the estimate found tagged (then untagged messages
    cost nothing); None checks every message. ``clean`` rewrites one tagged message.
    """
    if messages is None:
        return None
    if tagged is None:
        tagged = [i for i, m in enumerate(messages) if has_tag(m)]
    if not tagged:
        return messages
    out = list(messages)
    for i in tagged:
        out[i] = clean(messages[i])
    return out


def strip_tools(tools: Any) -> Any:
    """Tool definitions (or legacy functions) without tags; the same list when none is tagged."""
    if isinstance(tools, (list, tuple)) and any((type(t) is dict or isinstance(t, Mapping)) and TAG_KEY in t for t in tools):
        return [strip_tool(t) for t in tools]
    return tools


def check_tags(messages: Any, tools: Sequence[Any] = ()) -> list[int]:
    """Validate every tag of a request now (raises TagError), without counting it; the indexes of tagged messages.

    The call path uses it when the estimate itself runs later (a tokenizer still loading, or
    more new text than the caller counts): a bad tag is the caller's mistake, and raises on the
    caller's call, as it would have; the indexes say which messages to strip, in the same pass.
    """
    tagged: list[int] = []
    for index, msg in enumerate(messages if isinstance(messages, (list, tuple)) else ()):
        if type(msg) is not dict and not isinstance(msg, Mapping):  # the exact type first: an ABC check costs ~10x
            continue
        if TAG_KEY in msg:
            read_tag(msg)
            tagged.append(index)
        content = msg.get("content")
        if type(content) is str:
            continue
        if isinstance(content, (list, tuple)):
            parts = [part for part in content if isinstance(part, Mapping) and TAG_KEY in part]
            for part in parts:
                read_tag(part)
            if parts and (not tagged or tagged[-1] != index):
                tagged.append(index)
    for definition in tools:
        if isinstance(definition, Mapping) and TAG_KEY in definition:
            read_tag(definition)
    return tagged


def has_tag(msg: Any) -> bool:
    """A message (or input item) that carries a tag, on itself or on one of its content parts."""
    if not isinstance(msg, dict):
        return False
    if TAG_KEY in msg:
        return True
    content = msg.get("content")
    return isinstance(content, (list, tuple)) and any(isinstance(p, dict) and TAG_KEY in p for p in content)
