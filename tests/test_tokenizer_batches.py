"""A request's new texts go to tiktoken together (rules/_tiktoken.py, `batched`), counted as if each were alone.

tiktoken releases the GIL for every text it encodes; a thread that counts hundreds of texts one by
one beside a busy thread waits for the GIL once per text. These tests hold the mechanism (how many
times tiktoken is called) and its exactness (each text's count is tiktoken's own for that text).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import tiktoken

from cw_middleware._counting.estimator import Estimator
from cw_middleware._counting.rules import _tiktoken, rules_for
from cw_middleware._counting.rules.anthropic import claude_pieces

ORACLE = tiktoken.get_encoding("o200k_base")  # tiktoken itself, not the package's copy

TRICKY = [
    "",
    " ",
    "trailing spaces   ",
    "two lines\n\n",
    "  \n indented after a line end",
    "a special token's text <|endoftext|> inside a prompt counts as plain text",
    "<|endofprompt|> another special token's text",
    "a lone surrogate \ud800 in the middle",
    "日本語のテキストと emoji 🙂 mixed",
    "x" * 300,
    "word " * 400,
    "ends with an apostrophe's",
]


class CountingEncoding:
    """The loaded o200k_base encoding, counting the calls that encode (each one releases the GIL)."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.calls = 0

    def encode_ordinary(self, text: str) -> list[int]:
        self.calls += 1
        return self._real.encode_ordinary(text)  # type: ignore[no-any-return]

    def encode(self, text: str, **kwargs: Any) -> list[int]:
        self.calls += 1
        return self._real.encode(text, **kwargs)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@pytest.fixture
def counted(monkeypatch):
    """Fresh tokenizer state whose o200k_base counts its calls; rules made afresh on it, and again after."""
    state = _tiktoken._Tokenizers()
    encoding = state.encodings["o200k_base"] = CountingEncoding(_tiktoken.encoding("o200k_base"))
    monkeypatch.setattr(_tiktoken, "_state", lambda: state)
    rules_for.cache_clear()
    yield encoding
    rules_for.cache_clear()


def _counts_in_a_batch(count, texts: list[str]) -> list[int]:
    with _tiktoken.batched(lambda: [count(text) for text in texts]):
        return [count(text) for text in texts]


def test_each_text_of_a_batch_counts_as_tiktoken_counts_it_alone(counted, monkeypatch):
    monkeypatch.setattr(_tiktoken, "BATCH_CHARS", 500)  # several tiktoken calls, and texts longer than one
    count = _tiktoken.counter("o200k_base")
    texts = TRICKY + [f"message {i}: " + "lorem ipsum " * (i % 7) for i in range(40)]
    assert _counts_in_a_batch(count, texts) == [len(ORACLE.encode(t, disallowed_special=())) for t in texts]
    # 40 short-enough texts and the tricky ones in a handful of calls, not one call a text
    assert counted.calls < 20


def test_a_weighted_count_is_the_same_in_a_batch(counted):
    pieces = claude_pieces()
    count = _tiktoken.counter("o200k_base", claude_pieces, "claude_pieces")
    expected = [sum(pieces[token] for token in ORACLE.encode(t, disallowed_special=())) for t in TRICKY]
    assert _counts_in_a_batch(count, TRICKY) == expected


def _conversation(n: int) -> list[dict[str, Any]]:
    rng = random.Random(3)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    return [
        {"role": "user" if i % 2 else "assistant", "content": f"turn {i} " + " ".join(rng.choices(words, k=20))} for i in range(n)
    ]


def _tools(n: int) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": f"does thing number {i} with care and some detail",
                "parameters": {"type": "object", "properties": {"q": {"type": "string", "description": "a query"}}},
            },
        }
        for i in range(n)
    ]


def test_an_estimate_off_the_callers_thread_encodes_its_new_texts_together(counted):
    messages, tools = _conversation(120), _tools(20)

    one_by_one = Estimator().estimate("gpt-4o", messages, tools=tools, now=True)  # a caller's: within its budget
    calls_one_by_one, counted.calls = counted.calls, 0
    together = Estimator().estimate("gpt-4o", messages, tools=tools)  # the background worker's, cw.estimate's

    assert calls_one_by_one >= 120  # a call a message at least: what a busy thread beside it turns into waits
    assert counted.calls <= 4  # the messages' texts in one call, the tools' in another (or a few)
    assert together.by_source == one_by_one.by_source
    assert together.total == one_by_one.total


def test_a_batch_keeps_no_placeholder_in_the_caches(counted):
    messages = _conversation(30)
    est = Estimator()
    first = est.estimate("gpt-4o", messages)
    grown = est.estimate("gpt-4o", messages + [{"role": "user", "content": "one more question"}])
    # counted again from the caches the batch filled: a placeholder kept there would show as a smaller total
    assert est.estimate("gpt-4o", messages).total == first.total
    assert grown.total > first.total
    assert Estimator().estimate("gpt-4o", messages, now=True).total == first.total
