"""Defects found by running agent frameworks on the wrapper (issue 8), each against a local provider.

Every expected chunk is one plain LiteLLM returns for the same request against the
same server; every expected total is one the server reports.
"""

from __future__ import annotations

import logging
from enum import Enum

import litellm
import pytest
from litellm.litellm_core_utils.streaming_handler import CustomStreamWrapper
from providers import CHAT, RESPONSES, provider  # noqa: F401 - the fixture

import cw_middleware as cw
from cw_middleware._kernel.contract import CountMethod, WarningCode

MESSAGES = [{"role": "system", "content": "You are a terse assistant."}, {"role": "user", "content": "Say hello."}]


def _kwargs(provider, **extra):  # noqa: F811
    return {"model": "openai/gpt-4o", "messages": MESSAGES, "api_base": f"{provider.url}/v1", "api_key": "sk-test", **extra}


def _chunks(stream) -> list[dict]:
    return [{k: v for k, v in c.model_dump().items() if k != "created"} for c in stream]


async def _achunks(stream) -> list[dict]:
    return [{k: v for k, v in c.model_dump().items() if k != "created"} async for c in stream]


def _reconciled(provider) -> None:  # noqa: F811
    last = cw.snapshots()[-1]
    assert last.count_method is CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN
    assert last.input_tokens == provider[CHAT].tokens


# ---------------------------------------------------------------- the usage chunk we asked for


@pytest.fixture
def usage_chunk_with_one_empty_choice(monkeypatch):
    """LiteLLM 1.83 (inside our supported range) ends a stream asked for usage with a usage chunk that
    carries one empty choice; newer releases send none when the caller asked. Make this LiteLLM do so."""
    if not hasattr(CustomStreamWrapper, "_new_usage_chunk"):
        pytest.skip("this LiteLLM builds its usage chunk elsewhere")
    monkeypatch.setattr(CustomStreamWrapper, "_new_usage_chunk", lambda self: self.model_response_creator())


def test_our_usage_chunk_with_one_empty_choice_never_reaches_the_caller(runtime, provider, usage_chunk_with_one_empty_choice):  # noqa: F811
    asked = _chunks(litellm.completion(**_kwargs(provider, stream=True, stream_options={"include_usage": True})))
    assert len(asked[-1]["choices"]) == 1 and asked[-1]["usage"]["prompt_tokens"] == provider[CHAT].tokens  # the shape
    expected = _chunks(litellm.completion(**_kwargs(provider, stream=True)))
    got = _chunks(cw.completion(**_kwargs(provider, stream=True)))
    assert len(got) == len(expected) and got == expected
    assert provider.hits(CHAT)[-1].body["stream_options"] == {"include_usage": True}
    _reconciled(provider)


async def test_async_stream_too(runtime, provider, usage_chunk_with_one_empty_choice):  # noqa: F811
    expected = await _achunks(await litellm.acompletion(**_kwargs(provider, stream=True)))
    got = await _achunks(await cw.acompletion(**_kwargs(provider, stream=True)))
    assert got == expected
    _reconciled(provider)


def test_stream_options_none_counts_as_not_given(runtime, provider):  # noqa: F811
    """The OpenAI Agents SDK passes stream_options=None: usage is asked for, and hidden from the caller."""
    expected = _chunks(litellm.completion(**_kwargs(provider, stream=True, stream_options=None)))
    got = _chunks(cw.completion(**_kwargs(provider, stream=True, stream_options=None)))
    assert got == expected
    assert provider.hits(CHAT)[-1].body["stream_options"] == {"include_usage": True}
    _reconciled(provider)
    assert WarningCode.USAGE_MISSING.value not in cw.snapshots()[-1].warning_codes()


# ---------------------------------------------------------------- roles as str Enums


class MessageRole(str, Enum):  # noqa: UP042 - smolagents defines it so; a StrEnum would hide the defect
    SYSTEM = "system"
    USER = "user"


def _enum_messages():
    return [
        {"role": MessageRole.SYSTEM, "content": "You are a terse assistant."},
        {"role": MessageRole.USER, "content": "Say hello."},
    ]


def _attribution(snap) -> set[tuple[str, str, int]]:
    return {(d.category.value, d.source, d.tokens) for d in snap.details}


@pytest.mark.parametrize("enum_first", [True, False])
def test_str_enum_roles_count_as_their_value_and_never_leak_through_the_cache(runtime, enum_first):
    requests = [_enum_messages(), [dict(m) for m in MESSAGES]]
    if not enum_first:
        requests.reverse()
    first, second = (cw.estimate(model="gpt-4o", messages=m) for m in requests)
    for snap in (first, second):
        assert snap.tokens("system_prompt") > 0
        assert {d.source for d in snap.details} == {"system", "user", "framing"}
    assert _attribution(first) == _attribution(second)
    assert first.input_tokens == second.input_tokens


def test_str_enum_roles_through_the_call(runtime, provider):  # noqa: F811
    cw.completion(**_kwargs(provider, messages=_enum_messages()))
    assert provider.hits(CHAT)[-1].body["messages"][0]["role"] == "system"
    snap = cw.snapshots()[-1]
    assert snap.tokens("system_prompt") > 0 and "MessageRole" not in snap.model_dump_json()


# ---------------------------------------------------------------- a shim, and a fault inside the middleware


@pytest.mark.parametrize("name", ["completion", "acompletion"])
async def test_a_users_shim_does_not_recurse(runtime, provider, monkeypatch, name):  # noqa: F811
    plain = getattr(litellm, name)
    expected = plain(**_kwargs(provider))
    expected = await expected if name == "acompletion" else expected
    monkeypatch.setattr(litellm, name, getattr(cw, name))  # the shim of issue 8: litellm.completion = cw.completion
    for fn in (getattr(litellm, name), getattr(cw, name)):
        got = fn(**_kwargs(provider))
        got = await got if name == "acompletion" else got
        assert got.choices[0].message.content == expected.choices[0].message.content
        assert got.usage.model_dump() == expected.usage.model_dump()
    snaps = cw.snapshots()
    assert [s.count_method for s in snaps] == [CountMethod.LOCAL_ESTIMATE, CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN] * 2
    assert len(provider.hits(CHAT)) == 3


def test_a_responses_shim_does_not_recurse(runtime, provider, monkeypatch):  # noqa: F811
    kwargs = {"model": "openai/gpt-4o", "input": "Say hello.", "api_base": f"{provider.url}/v1", "api_key": "sk-test"}
    monkeypatch.setattr(litellm, "responses", cw.responses)
    assert litellm.responses(**kwargs).usage.input_tokens == provider[RESPONSES].tokens
    assert [s.count_method for s in cw.snapshots()] == [CountMethod.LOCAL_ESTIMATE, CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN]


def test_a_fault_inside_the_estimate_still_publishes_saying_so_and_logs_once(runtime, provider, telemetry, monkeypatch, caplog):  # noqa: F811
    """Every call that was made has its span and its snapshots (issue 36 item 6), ``estimate_failed`` on them."""

    def fault(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(runtime.estimator, "estimate", fault)
    with caplog.at_level(logging.WARNING, logger="cw_middleware"):
        for _ in range(20):
            response = cw.completion(**_kwargs(provider))
            assert response.usage.prompt_tokens == provider[CHAT].tokens
    snaps = cw.snapshots()
    assert snaps and all("estimate_failed" in s.warning_codes() for s in snaps)
    final = [s for s in snaps if s.count_method.value == "response_usage_scaled_breakdown"]
    assert [s.input_tokens for s in final] == [provider[CHAT].tokens] * 20
    assert len([s for s in telemetry.spans.get_finished_spans() if s.attributes.get("gen_ai.operation.name")]) == 20
    ours = [r for r in caplog.records if r.name == "cw_middleware"]
    assert len(ours) == 1 and "RecursionError" in ours[0].getMessage()
    assert len(provider.hits(CHAT)) == 20


def test_an_entry_point_reached_again_inside_our_call_is_part_of_it(runtime, monkeypatch):
    """LiteLLM calling one of its instrumented entry points itself (the Responses bridge, the Router)."""
    from cw_middleware._capture import litellm_originals as _litellm

    real, reached = litellm.completion, []

    def litellm_inside(*args, **kwargs):
        reached.append(kwargs.get("stream_options"))
        return cw.completion(*args, **kwargs) if len(reached) == 1 else real(*args, **kwargs)

    monkeypatch.setitem(_litellm.patches().originals, "completion", litellm_inside)
    response = cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="once", cw_context_window=9000)
    assert response.choices[0].message.content == "once" and len(reached) == 2
    assert [s.count_method for s in cw.snapshots()] == [CountMethod.LOCAL_ESTIMATE] * 2  # one call observed, not two
    assert cw.snapshots()[-1].context_window_tokens == 9000
