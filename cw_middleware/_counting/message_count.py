"""One message's tokens per (category, source): its text, content parts, tool calls and name, under its tags.

The estimator (estimator.py) counts each message it has not seen before with `MessageCounter`,
which asks the model's `CountingRules` for the pieces through a `TextCache` (the estimator's).
A tagged message or content part counts under its tag; untagged, system and developer messages
count as ``system_prompt``, the rest as ``conversation``. Images, audio and files are never
guessed from their bytes: the key that carries them is noted (``unseen``). A shape the rules
cannot read costs that message's accuracy, never the estimate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Optional, Union

from .._kernel.contract import Category, WarningCode
from .._kernel.errors import TagError
from .fingerprints import MIN_REPEAT_TOKENS, text_fingerprint
from .request_copies import AsDict, plain_text
from .rules import CountingRules
from .rules._tiktoken import NotReady, OverBudget, affordable, recording
from .tags import MESSAGE_ROLES, TAG_KEY, UNKNOWN_ROLE_LABEL, Tag, has_tag, read_tag, role_label

# Content part types that carry text the model reads as text.
_TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})
_DEFAULT_SOURCE = {"system": "system", "developer": "developer"}
_LONG_TEXT = 64 * 1024  # characters: a text this long is checked against the caller's budget before it is hashed

SourceKey = tuple[Category, str]
Segment = tuple[int, str, Category, int]  # (fingerprint, label, category, tokens) of one long text
_UNREADABLE: SourceKey = (Category.CONVERSATION, UNKNOWN_ROLE_LABEL)
_UNREADABLE_PART: SourceKey = (Category.OTHER, "")  # never exported: a marker inside _count_message


class MessageCount(NamedTuple):
    """One message's tokens per (category, source), its warnings, and the non-text parts it carries.

    ``calls`` and ``result_of`` say what the message does with tools: the (call id, tool name) of
    each tool call it makes (an assistant turn), the call id a tool result answers (``tool_call_id``,
    a Responses ``call_id``; a legacy ``function`` message names its function instead). The
    estimator matches a result to the call it answers (``tool``: the producing tool's name).
    Names and ids stay in memory: only names of the request's own tool definitions are exported.
    """

    entries: tuple[tuple[SourceKey, int], ...]
    warnings: frozenset[WarningCode]
    tagged: bool
    unseen: tuple[tuple[SourceKey, int], ...] = ()  # non-text parts per carrier key
    calls: tuple[tuple[str, str], ...] = ()  # (call id, tool name) of each tool call the message makes
    result_of: Optional[str] = None  # the call id a tool result answers
    tool: Optional[str] = None  # the producing tool, once the estimator matched ``result_of``
    moved: tuple[tuple[SourceKey, int], ...] = ()  # untagged result tokens moved to the tool's own source, by old key
    parts: tuple[
        MessageCount, ...
    ] = ()  # one entry answering several calls (Anthropic): its messages' counts, matched one by one
    # Its texts of at least MIN_REPEAT_TOKENS tokens: (fingerprint, label, category, tokens), in memory only
    # (fingerprints.py); the label names where the text sits (a tag's source, or the message's role), never what.
    texts: tuple[Segment, ...] = ()


_NO_WARNINGS: frozenset[WarningCode] = frozenset()
_OPAQUE = MessageCount((), frozenset({WarningCode.OPAQUE_CONTEXT_NOT_ESTIMATED}), False)
_UNREADABLE_WARNING = frozenset({WarningCode.UNREADABLE_MESSAGE})


class TokenizerFailed(Exception):
    """The rules' tokenizer failed on a plain string: no estimate stands, whatever the message's shape.

    Raised instead of the tokenizer's own error, whose message may quote the text.
    """


# An entry of the request as the chat message(s) to count: one, several (an Anthropic user turn holding
# tool results and text stands for a tool message per result and a user message), or None (opaque).
ReadMessage = Callable[[dict[str, Any]], Union[dict[str, Any], list[dict[str, Any]], None]]
CountText = Callable[[CountingRules, str], int]


class TextCache:
    """Token counts of texts, keyed on ``(rules, hash(text), len(text))``: content-addressed, holding no text.

    Two generations of at most ``max_texts`` counts each: when the young one is full it becomes
    the old one, and a count found in the old one moves back to the young one.
    """

    def __init__(self, max_texts: int) -> None:
        self.young: dict[tuple[str, int, int], int] = {}
        self.old: dict[tuple[str, int, int], int] = {}
        self._max = max_texts

    def count(self, rules: CountingRules, text: str) -> int:
        if len(text) > _LONG_TEXT and not affordable(len(text)):
            raise OverBudget()  # not even hashed on the caller's thread: the worker counts it
        key = (rules.name, hash(text), len(text))
        tokens = self.young.get(key)
        if tokens is None:
            tokens = self.old.get(key)
            if tokens is None:
                try:
                    tokens = rules.text(text)
                except NotReady:  # still loading: the call's estimate goes to the background
                    raise
                except Exception as exc:  # noqa: BLE001
                    raise TokenizerFailed(type(exc).__name__) from None
                if recording():  # a placeholder from a batch's dry run (rules/_tiktoken.py): not kept
                    return tokens
            if len(self.young) >= self._max:
                self.old, self.young = self.young, {}
            self.young[key] = tokens
        return tokens


class MessageCounter:
    """Counts one message at a time; ``text`` counts a text (the estimator's `TextCache`)."""

    def __init__(self, text: CountText, as_dict: AsDict) -> None:
        self._text = text
        self._as_dict = as_dict

    def count(self, rules: CountingRules, msg: Any, read_message: Optional[ReadMessage]) -> MessageCount:
        """One message's count; a shape the rules cannot read costs that message's accuracy, never the estimate.

        LiteLLM passes odd shapes on (a role that is a list, ``tool_calls=[{"function": "x"}]``):
        such a message counts its framing and plain-string content where it can, under its tag or
        ``conversation``/``unknown_role``, with the warning ``unreadable_message``. A bad tag is
        still the caller's mistake and raises.
        """
        try:
            return self._count_message(rules, msg, read_message)
        # The caller's mistake; a tokenizer that fails or is still loading (the call's estimate goes to the background).
        except (TagError, TokenizerFailed, NotReady):
            raise
        except Exception:  # noqa: BLE001
            return self._unreadable(rules, msg)

    def _unreadable(self, rules: CountingRules, msg: Any) -> MessageCount:
        msg = msg if isinstance(msg, dict) else {}
        tag = read_tag(msg) if TAG_KEY in msg else None  # a bad tag still raises: the caller's mistake
        key = (tag.category, tag.source or UNKNOWN_ROLE_LABEL) if tag is not None else _UNREADABLE
        # A plain message's framing must count: if it fails too, the rules are broken, not the message,
        # and the whole estimate fails (a breakdown of zeros would be a wrong number, not a degraded one).
        content = msg.get("content")
        tokens = rules.message_framing({"role": "user"}) + (self._text(rules, content) if type(content) is str else 0)
        return MessageCount(((key, tokens),), _UNREADABLE_WARNING, has_tag(msg))

    def _count_message(self, rules: CountingRules, raw: Any, read_message: Optional[ReadMessage] = None) -> MessageCount:
        msg = self._as_dict(raw)
        if read_message is not None:
            read = read_message(msg)
            if read is None:  # held or encrypted by the provider: nothing to count, and a warning
                return _OPAQUE
            if isinstance(read, list):  # one entry standing for several chat messages: their counts together
                return _together([self._count_message(rules, one) for one in read])
            msg = read
        warnings: set[WarningCode] = set()
        if not msg and type(raw) is not dict:  # a string, None, a number in the message list
            warnings.add(WarningCode.UNREADABLE_MESSAGE)
        role = msg.get("role") or "user"
        if type(role) is not str:  # a str Enum (smolagents' MessageRole.SYSTEM) counts as its value, as it is sent
            role = plain_text(role)
            if not isinstance(role, str):  # a list, a dict, a number: LiteLLM sends it on, we cannot read it
                warnings.add(WarningCode.UNREADABLE_MESSAGE)
                role = "user"
                label = UNKNOWN_ROLE_LABEL
            msg = {**msg, "role": role}
        tag = read_tag(msg) if TAG_KEY in msg else None
        if tag is not None:
            own: SourceKey = (tag.category, tag.source or role_label(role))
        elif role in _DEFAULT_SOURCE:
            own = (Category.SYSTEM_PROMPT, _DEFAULT_SOURCE[role])
        else:
            label = role if role in MESSAGE_ROLES else (UNKNOWN_ROLE_LABEL if warnings else role_label(role))
            own = (Category.CONVERSATION, label)
        # Most messages are one untagged string: they take the straight path, one entry, no dict.
        tokens = rules.message_framing(msg)
        name = msg.get("name")
        if name:
            tokens += self._text(rules, plain_text(name) if isinstance(name, str) else str(name))
        content = msg.get("content")
        parts: dict[SourceKey, int] = {}
        unseen: dict[SourceKey, int] = {}
        texts: list[Segment] = []
        tagged = tag is not None
        if isinstance(content, str):
            n = self._text(rules, content)
            tokens += n
            if n >= MIN_REPEAT_TOKENS:
                _segment(texts, content, own, tagged, role, n)
        elif isinstance(content, (list, tuple)):
            for part in content:
                tagged |= self._count_part(rules, part, own, parts, unseen, texts, tag is not None, role)
            tokens += parts.pop(own, 0)
            if unseen:
                warnings.add(WarningCode.NON_TEXT_CONTENT_NOT_ESTIMATED)
            if parts.pop(_UNREADABLE_PART, None) is not None:
                warnings.add(WarningCode.UNREADABLE_MESSAGE)
        elif content is not None:
            warnings.add(WarningCode.UNREADABLE_MESSAGE)
        calls = msg.get("tool_calls")
        made: tuple[tuple[str, str], ...] = ()
        if calls:
            readable = self._readable_calls(calls if isinstance(calls, (list, tuple)) else None, warnings)
            if readable:
                tokens += rules.tool_calls(readable)
                made = _calls_made(readable)
        function_call = msg.get("function_call")
        if function_call:
            readable = self._readable_calls([{"function": function_call}], warnings)
            if readable:
                tokens += rules.tool_calls(readable)
                made += _calls_made(readable)
        entries = ((own, tokens), *parts.items()) if parts else ((own, tokens),)
        result_of = _result_of(msg, role)
        return MessageCount(
            entries,
            frozenset(warnings) if warnings else _NO_WARNINGS,
            tagged,
            tuple(unseen.items()),
            made,
            result_of,
            texts=tuple(texts),
        )

    def _count_part(
        self,
        rules: CountingRules,
        part: Any,
        own: SourceKey,
        entries: dict[SourceKey, int],
        unseen: dict[SourceKey, int],
        texts: Optional[list[Segment]] = None,
        message_tagged: bool = False,
        role: str = "user",
    ) -> bool:
        if isinstance(part, str):
            n = self._text(rules, part)
            entries[own] = entries.get(own, 0) + n
            if texts is not None and n >= MIN_REPEAT_TOKENS:
                _segment(texts, part, own, message_tagged, role, n)
            return False
        raw, part = part, self._as_dict(part)
        if not part and type(raw) is not dict:
            entries[_UNREADABLE_PART] = 0  # a marker, popped by the caller: the part is not a part
            return False
        tag: Optional[Tag] = read_tag(part)
        key = (tag.category, tag.source or own[1]) if tag is not None else own
        text = part.get("text")
        if part.get("type", "text") in _TEXT_PART_TYPES:  # a part without a type is text
            if isinstance(text, str):
                n = self._text(rules, text)
                entries[key] = entries.get(key, 0) + n
                if texts is not None and n >= MIN_REPEAT_TOKENS:
                    _segment(texts, text, key, message_tagged or tag is not None, role, n)
            else:
                entries[_UNREADABLE_PART] = 0
        else:
            # Images, audio, files: never guessed from their bytes. The key that carries the part is
            # remembered: an authoritative total's surplus over the local count belongs to it.
            unseen[key] = unseen.get(key, 0) + 1
        return tag is not None

    def _readable_calls(self, calls: Optional[Sequence[Any]], warnings: set[WarningCode]) -> list[dict[str, Any]]:
        """Tool calls as the rules read them (dicts whose ``function`` is a dict); the rest is unreadable."""
        if calls is None:
            warnings.add(WarningCode.UNREADABLE_MESSAGE)
            return []
        as_dict = self._as_dict
        out = []
        for raw in calls:
            call = as_dict(raw)
            function = call.get("function")
            if function is None and call.get("type") == "custom":
                call = _custom_call(call)  # a custom tool's call reads as a function call whose arguments are its input
            elif function is not None and not isinstance(function, Mapping):
                function = as_dict(function) if hasattr(function, "model_dump") else None
                if function is None:
                    warnings.add(WarningCode.UNREADABLE_MESSAGE)
                    continue
                call = {**call, "function": function}
            if not call:
                warnings.add(WarningCode.UNREADABLE_MESSAGE)
                continue
            out.append(call)
        return out


def _segment(texts: list[Segment], text: str, key: SourceKey, tagged: bool, role: str, tokens: int) -> None:
    """Note a long text of the message: its fingerprint, where it sits (never what it says) and its tokens."""
    if recording():  # a batch's dry run: its counts are placeholders, and its texts are hashed for real later
        return
    label = f"{key[1]} ({key[0].value})" if tagged else f"message role {role if role in MESSAGE_ROLES else UNKNOWN_ROLE_LABEL}"
    texts.append((text_fingerprint(text), label, key[0], tokens))


def _custom_call(call: Mapping[str, Any]) -> dict[str, Any]:
    """A Chat Completions custom tool call (``{"type": "custom", "custom": {"name", "input"}}``) in the function form."""
    custom = call.get("custom")
    custom = custom if isinstance(custom, Mapping) else {}
    function = {"name": custom.get("name", ""), "arguments": custom.get("input", "")}
    return {**call, "type": "function", "function": function}


def _calls_made(calls: Sequence[Mapping[str, Any]]) -> tuple[tuple[str, str], ...]:
    """(call id, tool name) of readable tool calls; a legacy ``function_call`` has no id: its name stands for it."""
    out = []
    for call in calls:
        function = call.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        if isinstance(name, str) and name:
            call_id = call.get("id")
            out.append((call_id if isinstance(call_id, str) and call_id else _BY_NAME + name, name))
    return tuple(out)


def _result_of(msg: Mapping[str, Any], role: str) -> Optional[str]:
    """The call a tool result answers: its ``tool_call_id``; a legacy ``function`` message's function name."""
    if role == "tool":
        call_id = msg.get("tool_call_id")
        return call_id if isinstance(call_id, str) and call_id else None
    if role == "function":
        name = msg.get("name")
        return _BY_NAME + name if isinstance(name, str) and name else None
    return None


_BY_NAME = "\x00name:"  # a legacy function call and its result have no id: matched by the function's name


def _together(counts: Sequence[MessageCount]) -> MessageCount:
    """The counts of the chat messages one request entry stands for, as that entry's count."""
    entries: dict[SourceKey, int] = {}
    unseen: dict[SourceKey, int] = {}
    warnings: set[WarningCode] = set()
    for count in counts:
        for key, tokens in count.entries:
            entries[key] = entries.get(key, 0) + tokens
        for key, parts in count.unseen:
            unseen[key] = unseen.get(key, 0) + parts
        warnings |= count.warnings
    tagged = any(count.tagged for count in counts)
    texts = tuple(text for count in counts for text in count.texts)
    calls = tuple(call for count in counts for call in count.calls)
    answers = {count.result_of for count in counts if count.result_of is not None}
    if len(answers) > 1:  # one entry answering several calls (Anthropic: a user turn of tool_result blocks)
        return MessageCount(
            tuple(entries.items()), frozenset(warnings), tagged, tuple(unseen.items()), calls, parts=tuple(counts), texts=texts
        )
    result_of = answers.pop() if answers else None
    return MessageCount(tuple(entries.items()), frozenset(warnings), tagged, tuple(unseen.items()), calls, result_of, texts=texts)
