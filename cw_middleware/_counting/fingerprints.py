"""In-process fingerprints of a request's parts: "the same as", never "equal to this text".

Two uses, both of the suggestions (issue 39):

* a segment's fingerprint (`text_fingerprint`): a message's text or a content part of at least
  `MIN_REPEAT_TOKENS` tokens, its whitespace normalised, so the same file or tool result sent twice
  in one request is found (``repeated_content``);
* a message's fingerprint (`message_fingerprint`) and a tool set's, chained in request order, so a
  stage's call whose prefix equals the previous call's is found (``cache_miss``), and a call whose
  request begins with the whole previous request is estimated from that call's provider total
  (``anchored_estimate``: `PrefixChain.extends`, read by _snapshots/ledger.py).

Each is a keyed 64-bit blake2b: the key is drawn once per process, so a fingerprint compares parts
of this process's requests and says nothing about any text outside it (no one can test a guess
against an exported one). Only `exported` (twelve hex digits of a segment's) leaves the process.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import msgspec

MIN_REPEAT_TOKENS = 200  # a segment shorter than this is not worth a suggestion (nor a hash)
_KEY = os.urandom(16)


def _jsonable(obj: Any) -> Any:
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump(exclude_none=True)
    if isinstance(obj, (tuple, set, frozenset)):
        return list(obj)
    return repr(obj)  # hashed, never kept


_ENCODER = msgspec.json.Encoder(enc_hook=_jsonable, order="sorted")


def _digest(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8, key=_KEY).digest(), "big")


def text_fingerprint(text: str) -> int:
    """A segment's fingerprint: the same for the same text, whatever its runs of whitespace."""
    return _digest(" ".join(text.split()).encode("utf-8", "surrogatepass"))


def message_fingerprint(frozen: Any) -> int:
    """A message's (or a tool set's) fingerprint from its value copy: equal content, equal fingerprint."""
    try:
        data = _ENCODER.encode(frozen)
    except (TypeError, ValueError, UnicodeEncodeError, OverflowError):
        data = repr(frozen).encode("utf-8", "surrogatepass")
    return _digest(data)


def chained(previous: int, fingerprint: int) -> int:
    """The fingerprint of a prefix one part longer (in memory only: ints hash alike in every process)."""
    return hash((previous, fingerprint))


def exported(fingerprint: int) -> str:
    """The opaque short form a snapshot carries: twelve hex digits."""
    return f"{fingerprint:016x}"[:12]


class PrefixChain:
    """A request's prefix as fingerprints: its tool set's, then each message's chained, with cumulative local tokens.

    ``fps`` and ``tokens`` are the estimator's conversation lists (append-only), read up to ``n``: a request
    shares them with the next request of its conversation rather than copying them.
    """

    __slots__ = ("fps", "head", "head_tokens", "n", "tokens")

    def __init__(self, head: int, head_tokens: int, fps: list[int], tokens: list[int], n: int) -> None:
        self.head, self.head_tokens, self.fps, self.tokens, self.n = head, head_tokens, fps, tokens, n

    def extends(self, other: PrefixChain) -> bool:
        """Whether this request begins with the whole of ``other``: the same tools, then all its messages alike."""
        k = other.n
        if self.head != other.head or k > self.n:
            return False
        return not k or self.fps[k - 1] == other.fps[k - 1]  # chained: the last equal means all equal

    def common_tokens(self, other: PrefixChain) -> int:
        """The local tokens of the longest prefix both requests send alike: the tools, then whole messages."""
        if self.head != other.head:
            return 0  # the tools come first: a changed tool set changes every prefix
        k = min(self.n, other.n)
        mine, theirs = self.fps, other.fps
        if k and mine[k - 1] == theirs[k - 1]:
            equal = k
        else:  # chained: equal at i means equal up to i, so the first difference is found by bisection
            lo, hi = 0, k  # the first lo messages agree; the first hi do not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if mine[mid - 1] == theirs[mid - 1]:
                    lo = mid
                else:
                    hi = mid
            equal = lo
        return self.head_tokens + (self.tokens[equal - 1] if equal else 0)
