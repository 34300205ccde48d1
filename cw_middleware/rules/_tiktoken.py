"""tiktoken encodings, loaded once from LiteLLM's bundled files (see _offline.py)."""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

from .. import _offline  # noqa: F401  - sets TIKTOKEN_CACHE_DIR before tiktoken loads


@lru_cache(maxsize=None)
def encoder(encoding_name: str) -> Callable[[str], list[int]]:
    """encode_ordinary of an encoding: special-token text in a prompt counts as plain text, as providers do."""
    import tiktoken

    return tiktoken.get_encoding(encoding_name).encode_ordinary


def counter(encoding_name: str) -> Callable[[str], int]:
    encode = encoder(encoding_name)
    return lambda text: len(encode(text))
