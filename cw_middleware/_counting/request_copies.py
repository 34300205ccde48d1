"""Value copies of a request: messages as dicts, frozen copies, and comparing a list with a frozen one.

The estimator's caches compare the caller's lists by value (a message edited in place is
recounted), so it keeps copies of what it counted. Response objects (a previous reply appended
to the history) are read as their ``model_dump()``, cached by identity (`DumpCache`). The copies
hold prompt text: in memory only, never exported.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from enum import Enum
from typing import Any

AsDict = Callable[[Any], dict[str, Any]]


def plain_text(value: Any) -> Any:
    """A str Enum as its value (what goes on the wire); any other str subclass as a plain str; the rest as is."""
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, str) and type(value) is not str:
        return str.__str__(value)
    return value


class DumpCache:
    """Messages as dicts: LiteLLM/pydantic objects (a previous response's message) are dumped, and cached.

    model_dump() of a response message re-done every turn would make the history's cost
    Python-bound. A bounded cache by identity, only for messages whose fields are all
    immutable values (plain replies), revalidated by the identity of every field: any
    reassignment is seen, and nothing nested can change in place. Replies with tool
    calls are dumped afresh each time. The dumps hold the replies' text: in memory only.
    """

    def __init__(self, max_size: int) -> None:
        self._max = max_size
        self._dumps: dict[int, tuple[Any, tuple[Any, ...], dict[str, Any]]] = {}

    def as_dict(self, obj: Any) -> dict[str, Any]:
        if isinstance(obj, dict):
            return obj
        try:
            dump = getattr(obj, "model_dump", None)
            if callable(dump):
                dumped = self._dumped(obj, dump)
                return dumped if isinstance(dumped, dict) else {}
            return dict(obj)
        except Exception:  # noqa: BLE001 - not a mapping (a string, None, an object that refuses): nothing to read
            return {}

    def _dumped(self, obj: Any, dump: Any) -> dict[str, Any]:
        try:
            values = tuple(vars(obj).values())
        except TypeError:
            return dump()  # type: ignore[no-any-return]
        if not all(type(v) in ATOMS for v in values):
            return dump()  # type: ignore[no-any-return]
        hit = self._dumps.get(id(obj))
        if hit is not None and hit[0] is obj and len(hit[1]) == len(values) and all(map(operator.is_, hit[1], values)):
            return hit[2]
        dumped = dump()
        if len(self._dumps) >= self._max:
            self._dumps.clear()
        self._dumps[id(obj)] = (obj, values, dumped)  # holds obj: its id cannot be reused meanwhile
        return dumped  # type: ignore[no-any-return]

    def __len__(self) -> int:
        return len(self._dumps)


ATOMS = (str, int, float, bool, type(None))


def freeze(obj: Any, as_dict: AsDict) -> Any:
    """A value copy of nested dicts and lists (strings are shared: they cannot change).

    Messages are frozen once, when first counted, so that a caller who later edits
    a message in place (say, truncating an old tool result) gets it recounted. A str
    Enum or other str subclass is frozen as the plain text it was counted as: the
    cached prefix then holds exactly what was counted, and equal text counts alike.
    """
    if type(obj) is dict:
        return {k: v if type(v) in ATOMS else freeze(v, as_dict) for k, v in obj.items()}
    if type(obj) is list:
        return [v if type(v) in ATOMS else freeze(v, as_dict) for v in obj]
    if type(obj) is tuple:  # tuple content parts are dicts too: copy them, or an edit in place goes unseen
        return tuple(v if type(v) in ATOMS else freeze(v, as_dict) for v in obj)
    if isinstance(obj, ATOMS):
        return plain_text(obj)
    if isinstance(obj, (dict, list)):
        return freeze(dict(obj) if isinstance(obj, dict) else list(obj), as_dict)
    return as_dict(obj) or obj


def common_prefix(frozen: list[Any], messages: list[Any], as_dict: AsDict) -> int:
    n = min(len(frozen), len(messages))
    # The common case (the conversation grew), compared in C; slices only where lengths differ.
    if (frozen if n == len(frozen) else frozen[:n]) == (messages if n == len(messages) else messages[:n]):
        return n
    # LiteLLM Message objects (a previous response's message) differ from their frozen dicts by
    # type only: compare their (cached) dumps.
    theirs = [m if type(m) is dict else as_dict(m) for m in messages[:n]]
    mine = frozen if n == len(frozen) else frozen[:n]
    if mine == theirs:
        return n
    # A branch or an edit: binary search for the first difference, each probe a C-level slice
    # comparison, so an unrelated cached conversation costs O(log n) probes, not a Python walk.
    lo, hi = 0, n  # mine[:lo] == theirs[:lo]; the prefix of length hi differs
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if mine[lo:mid] == theirs[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo + 1 if lo < n and mine[lo] == theirs[lo] else lo


_HEAD_CHARS = 4096  # of a first message's text, keyed: hashing all of a 50 MB text cost the caller ~15 ms


def head_key(msg: dict[str, Any]) -> int:
    """The bucket of conversations that start with this message; equal keys only narrow the prefix search."""
    role, content = plain_text(msg.get("role")), msg.get("content")
    try:
        if isinstance(content, str):
            return hash((role, content if len(content) <= _HEAD_CHARS else (len(content), content[:_HEAD_CHARS])))
        return hash((role, len(content or ())))
    except TypeError:  # an unhashable role, content without a length: the bucket only narrows the search
        return hash((type(role).__name__, type(content).__name__))
