"""tiktoken encodings, loaded once from LiteLLM's bundled files (see _offline.py).

tiktoken's own constructors (``tiktoken_ext.openai_public``) hold each encoding's
split pattern and special tokens and fetch the ranks by URL through tiktoken's
cache, which only ``TIKTOKEN_CACHE_DIR`` can point at LiteLLM's copies. Instead the
constructor runs with a loader that reads LiteLLM's file (verifying tiktoken's
expected hash): tiktoken's constants, LiteLLM's bytes, no environment variable and
no network. Without LiteLLM's file, tiktoken's normal loading applies.
"""

from __future__ import annotations

import base64
import hashlib
import types
from collections.abc import Callable
from functools import cache, lru_cache
from typing import Any

from .._offline import encoding_file, encoding_url

loaded_from: dict[str, str] = {}  # encoding name -> the file its ranks were read from


def _ranks_from_litellm(name: str) -> Callable[..., dict[bytes, int]]:
    def load(blobpath: str, expected_hash: Any = None) -> dict[bytes, int]:
        path = encoding_file(name) if blobpath == encoding_url(name) else None
        if path is None:
            raise FileNotFoundError(blobpath)
        data = path.read_bytes()
        if expected_hash and hashlib.sha256(data).hexdigest() != expected_hash:
            raise ValueError(f"LiteLLM's copy of {name} does not match tiktoken's hash")
        loaded_from[name] = str(path)
        # The .tiktoken format: one "base64(token) rank" pair a line.
        return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in data.splitlines() if line)}

    return load


@cache
def encoding(encoding_name: str) -> Any:
    import tiktoken
    from tiktoken_ext import openai_public

    constructor = getattr(openai_public, encoding_name, None)
    if isinstance(constructor, types.FunctionType) and encoding_file(encoding_name) is not None:
        # The same constructor over a copy of its globals, so only this call reads LiteLLM's file.
        scoped = types.FunctionType(
            constructor.__code__, {**constructor.__globals__, "load_tiktoken_bpe": _ranks_from_litellm(encoding_name)}
        )
        try:
            return tiktoken.Encoding(**scoped())
        except (OSError, ValueError, KeyError, TypeError):
            loaded_from.pop(encoding_name, None)
    return tiktoken.get_encoding(encoding_name)


@cache
def encoder(encoding_name: str) -> Callable[[str], list[int]]:
    """encode_ordinary of an encoding: special-token text in a prompt counts as plain text, as providers do."""
    return encoding(encoding_name).encode_ordinary  # type: ignore[no-any-return]


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
