"""tiktoken encodings, loaded once from LiteLLM's bundled files (see _offline.py)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, lru_cache

from .. import _offline  # noqa: F401  - sets TIKTOKEN_CACHE_DIR before tiktoken loads


@cache
def encoder(encoding_name: str) -> Callable[[str], list[int]]:
    """encode_ordinary of an encoding: special-token text in a prompt counts as plain text, as providers do."""
    import tiktoken

    return tiktoken.get_encoding(encoding_name).encode_ordinary


SHORT_TEXT = 64  # roles, names, recipients, separators: counted once, not once per message


@cache
def counter(encoding_name: str) -> Callable[[str], int]:
    """Token count of a text. Short framing strings recur in every message, so they are memoised;
    long texts are cached by the estimator (keyed by hash, holding no text)."""
    encode = encoder(encoding_name)

    @lru_cache(maxsize=4096)
    def short(text: str) -> int:
        return len(encode(text))

    def count(text: str) -> int:
        return short(text) if len(text) <= SHORT_TEXT else len(encode(text))

    return count
