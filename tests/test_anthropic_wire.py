"""What LiteLLM puts on Anthropic's wire decides what is billed: checked against a local Messages stub.

The estimator's Anthropic rules assume how LiteLLM sends a request; these tests send the
request through real LiteLLM to a local server speaking Anthropic's Messages API and look
at what arrived, so a LiteLLM change that breaks an assumption fails here.
"""

from __future__ import annotations

import pytest
from providers import MESSAGES as MESSAGES_API
from providers import provider  # noqa: F401 - the fixture

import cw_middleware as cw

SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "parcel",
        "schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "eta_days": {"type": "integer"}},
            "required": ["city", "eta_days"],
        },
    },
}
MESSAGES = [{"role": "user", "content": "Where is parcel 7?"}]


def _send(provider, model: str, monkeypatch, **extra):  # noqa: F811
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    cw.completion(
        model=model,
        messages=MESSAGES,
        max_tokens=50,
        api_base=provider.url,
        api_key="sk-ant-test",
        cw_provider_count="never",
        **extra,
    )
    return provider.hits(MESSAGES_API)[-1].body


def _response_format_tokens(model: str) -> int:
    snap = cw.estimate(model=model, messages=MESSAGES, response_format=SCHEMA)
    return {(d.category.value, d.source): d.tokens for d in snap.details}[("other", "response_format")]


def test_structured_output_before_4_5_goes_as_a_forced_tool_and_is_counted_so(runtime, provider, monkeypatch):  # noqa: F811
    body = _send(provider, "anthropic/claude-3-5-haiku-20241022", monkeypatch, response_format=SCHEMA)
    assert [t["name"] for t in body["tools"]] == ["json_tool_call"]
    assert body["tool_choice"]["type"] == "tool"
    assert "output_format" not in body
    # Counted as what was sent: the any/tool prompt (355 on Haiku 3.5, Anthropic's table) plus the tool.
    assert _response_format_tokens("anthropic/claude-3-5-haiku-20241022") > 355


def test_structured_output_from_4_5_goes_native_and_is_counted_so(runtime, provider, monkeypatch):  # noqa: F811
    body = _send(provider, "anthropic/claude-sonnet-4-5", monkeypatch, response_format=SCHEMA)
    assert "output_format" in body or "output_config" in body
    assert not body.get("tools")
    assert _response_format_tokens("anthropic/claude-sonnet-4-5") < 300  # an instruction block and the schema


def test_thinking_reaches_the_provider_as_given(runtime, provider, monkeypatch):  # noqa: F811
    thinking = {"type": "enabled", "budget_tokens": 1024}
    body = _send(provider, "anthropic/claude-sonnet-4-5", monkeypatch, thinking=thinking)
    assert body["thinking"] == thinking
    snap = next(s for s in cw.snapshots())
    assert {(d.category.value, d.source) for d in snap.details} >= {("other", "thinking")}


def _thinking_detail(snap=None) -> int | None:
    snap = snap or cw.snapshots()[-1]
    return {(d.category.value, d.source): d.tokens for d in snap.details}.get(("other", "thinking"))


def test_reasoning_effort_goes_as_enabled_thinking_and_is_counted_as_thinking(runtime, provider, monkeypatch):  # noqa: F811
    body = _send(provider, "anthropic/claude-sonnet-4-5", monkeypatch, reasoning_effort="low")
    assert body["thinking"]["type"] == "enabled"
    assert _thinking_detail() is not None  # the call's snapshot (reconciled to the stub's usage) has it
    # Locally: the hidden extended-thinking instruction (measured 28-29 tokens on reported usage), in `other`,
    # the same as for the thinking LiteLLM sent.
    local = cw.estimate(model="anthropic/claude-sonnet-4-5", messages=MESSAGES, reasoning_effort="low")
    tokens = _thinking_detail(local)
    assert tokens is not None and 20 <= tokens <= 40
    as_sent = cw.estimate(model="anthropic/claude-sonnet-4-5", messages=MESSAGES, thinking=body["thinking"])
    assert local.input_tokens == as_sent.input_tokens


def test_reasoning_effort_on_an_adaptive_model_adds_no_thinking_instruction(runtime, provider, monkeypatch):  # noqa: F811
    body = _send(provider, "anthropic/claude-opus-4-6", monkeypatch, reasoning_effort="high")
    assert body["thinking"]["type"] == "adaptive"
    assert _thinking_detail() is None


def test_reasoning_effort_none_adds_no_thinking_instruction(runtime, provider, monkeypatch):  # noqa: F811
    import litellm

    try:  # LiteLLM 1.83.7 itself fails on reasoning_effort="none" (it sets thinking=None, then reads it as a dict)
        litellm.completion(
            model="anthropic/claude-sonnet-4-5",
            messages=MESSAGES,
            max_tokens=50,
            api_base=provider.url,
            api_key="sk-ant-test",
            reasoning_effort="none",
        )
    except litellm.APIConnectionError as exc:
        pytest.skip(f"this LiteLLM fails reasoning_effort='none' without cw too: {type(exc).__name__}")
    body = _send(provider, "anthropic/claude-sonnet-4-5", monkeypatch, reasoning_effort="none")
    assert "thinking" not in body
    assert _thinking_detail() is None
