"""A mocked stream costs LiteLLM no more token counting under cw than bare (issue 22 gap 2).

Asked for its usage (``stream_options.include_usage``), LiteLLM's stream wrapper assembles the
whole response twice at the end, once for the usage chunk and once more when the stream stops,
and with ``mock_response`` each assembly counts the whole prompt with ``token_counter``: under
cw a mocked stream cost twice bare's counting, ~60 % of its time at ~50k tokens. These tests
count LiteLLM's ``token_counter`` calls (calls, not time) on real LiteLLM, bare and through cw,
and check that the caller's chunks are bare LiteLLM's.
"""

from __future__ import annotations

import sys
from collections import Counter

import litellm
import litellm.utils
import pytest

import cw_middleware as cw

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello. " * 40}]
STREAM = {"model": "gpt-4o", "messages": MESSAGES, "mock_response": "one two three", "stream": True}


@pytest.fixture
def token_counts(monkeypatch):
    """LiteLLM's token_counter calls, by what was counted ('prompt' or 'text'), wherever LiteLLM imported it."""
    counts: Counter[str] = Counter()
    real = litellm.utils.token_counter

    def counting(*args, **kwargs):
        counts["prompt" if kwargs.get("messages") is not None else "text"] += 1
        return real(*args, **kwargs)

    for module in list(sys.modules.values()):
        if module is not None and getattr(module, "token_counter", None) is real:
            monkeypatch.setattr(module, "token_counter", counting)
    assert litellm.utils.token_counter is counting
    return counts


def _chunks(stream) -> list[tuple]:
    return [(tuple(c.delta.content for c in chunk.choices), getattr(chunk, "usage", None) is not None) for chunk in stream]


async def _achunks(stream) -> list[tuple]:
    return [(tuple(c.delta.content for c in chunk.choices), getattr(chunk, "usage", None) is not None) async for chunk in stream]


def _sync(token_counts, complete, **extra) -> tuple[Counter, list]:
    token_counts.clear()
    chunks = _chunks(complete(**STREAM, **extra))
    return Counter(token_counts), chunks


async def _async(token_counts, acomplete, **extra) -> tuple[Counter, list]:
    token_counts.clear()
    chunks = await _achunks(await acomplete(**STREAM, **extra))
    return Counter(token_counts), chunks


def test_a_mocked_stream_counts_the_prompt_as_often_as_bare_litellm(runtime, token_counts):
    _sync(token_counts, litellm.completion)  # warm-up: LiteLLM's lazy imports
    bare_counts, bare_chunks = _sync(token_counts, litellm.completion)
    ours_counts, ours_chunks = _sync(token_counts, cw.completion)
    assert bare_counts["prompt"] >= 1  # the seam sees LiteLLM's counting
    assert ours_counts["prompt"] <= bare_counts["prompt"] and sum(ours_counts.values()) <= sum(bare_counts.values())
    assert ours_chunks == bare_chunks


async def test_an_async_mocked_stream_counts_as_often_as_bare_litellm(runtime, token_counts):
    await _async(token_counts, litellm.acompletion)
    bare_counts, bare_chunks = await _async(token_counts, litellm.acompletion)
    ours_counts, ours_chunks = await _async(token_counts, cw.acompletion)
    assert bare_counts["prompt"] >= 1
    assert ours_counts["prompt"] <= bare_counts["prompt"] and sum(ours_counts.values()) <= sum(bare_counts.values())
    assert ours_chunks == bare_chunks


async def test_through_instrument_too(runtime, token_counts):
    plain, aplain = litellm.completion, litellm.acompletion
    _sync(token_counts, plain)
    bare_counts, bare_chunks = _sync(token_counts, plain)
    abare_counts, abare_chunks = await _async(token_counts, aplain)
    cw.instrument()
    try:
        ours_counts, ours_chunks = _sync(token_counts, litellm.completion)
        aours_counts, aours_chunks = await _async(token_counts, litellm.acompletion)
    finally:
        cw.uninstrument()
    assert litellm.completion is plain
    assert ours_counts["prompt"] <= bare_counts["prompt"] and aours_counts["prompt"] <= abare_counts["prompt"]
    assert (ours_chunks, aours_chunks) == (bare_chunks, abare_chunks)


def test_a_stream_whose_caller_asked_for_usage_is_counted_as_bare_counts_it(runtime, token_counts):
    """The caller's own include_usage goes through: LiteLLM counts what it counts for them bare, no more."""
    asked = {"stream_options": {"include_usage": True}}
    _sync(token_counts, litellm.completion, **asked)
    bare_counts, bare_chunks = _sync(token_counts, litellm.completion, **asked)
    ours_counts, ours_chunks = _sync(token_counts, cw.completion, **asked)
    assert ours_counts["prompt"] <= bare_counts["prompt"]
    assert ours_chunks == bare_chunks and bare_chunks[-1][1]  # their usage chunk, as they asked
