"""Asking a stream for its usage never fails a call LiteLLM would complete (issue 11, item 3).

A local OpenAI-compatible server stands in for an endpoint that refuses ``stream_options`` (older
Azure api-versions answered 400 "Unrecognized request argument supplied: stream_options"; strict
OpenAI-compatible servers answer 422). Every expected chunk is one bare `litellm.completion`
returns from the same server.
"""

from __future__ import annotations

import logging

import litellm
import pytest
from providers import CANARY, CHAT, provider  # noqa: F401 - the fixture

import cw_middleware as cw
from cw_middleware._capture.apis import chat
from cw_middleware._kernel.config import resolve

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello."}]


@pytest.fixture(autouse=True)
def _forget_refusals():
    chat.refusing_endpoints().clear()
    yield
    chat.refusing_endpoints().clear()


def _kwargs(provider, **extra):  # noqa: F811
    return {"model": "openai/gpt-4o", "messages": MESSAGES, "api_base": f"{provider.url}/v1", "api_key": "sk-test", **extra}


def _chunks(stream) -> list[tuple]:
    return [tuple((c.delta.content, c.finish_reason) for c in chunk.choices) for chunk in stream]


@pytest.mark.parametrize("status", [400, 422])
def test_a_refused_stream_options_is_dropped_and_the_stream_completes(runtime, provider, status, caplog):  # noqa: F811
    provider[CHAT].rejects, provider[CHAT].reject_status = ("stream_options",), status
    expected = _chunks(litellm.completion(**_kwargs(provider, stream=True)))
    with caplog.at_level(logging.WARNING, logger="cw_middleware"):
        got = _chunks(cw.completion(**_kwargs(provider, stream=True)))
    assert got == expected and got
    first, second = (r.body for r in provider.hits(CHAT)[1:])
    assert first["stream_options"] == {"include_usage": True} and "stream_options" not in second
    snap = cw.snapshots()[-1]
    assert snap.count_method.value == "local_estimate" and "usage_missing" in snap.warning_codes()
    assert not any(CANARY in r.getMessage() for r in caplog.records)
    # The endpoint is remembered: the next stream goes out as written, in one request.
    before = len(provider.hits(CHAT))
    assert _chunks(cw.completion(**_kwargs(provider, stream=True))) == expected
    assert len(provider.hits(CHAT)) == before + 1 and "stream_options" not in provider.hits(CHAT)[-1].body


async def test_async_streams_are_retried_too(runtime, provider):  # noqa: F811
    provider[CHAT].rejects = ("stream_options",)

    async def chunks(stream):
        return [tuple((c.delta.content, c.finish_reason) for c in chunk.choices) async for chunk in stream]

    expected = await chunks(await litellm.acompletion(**_kwargs(provider, stream=True)))
    assert await chunks(await cw.acompletion(**_kwargs(provider, stream=True))) == expected


def test_an_error_that_does_not_name_the_field_is_the_callers(runtime, provider):  # noqa: F811
    provider[CHAT].status = 400
    with pytest.raises(litellm.BadRequestError):
        litellm.completion(**_kwargs(provider, stream=True))
    with pytest.raises(litellm.BadRequestError):
        cw.completion(**_kwargs(provider, stream=True))
    assert len(provider.hits(CHAT)) == 2  # no retry: one request each


def test_the_callers_own_stream_options_are_never_retried(runtime, provider):  # noqa: F811
    provider[CHAT].rejects = ("stream_options",)
    with pytest.raises(litellm.BadRequestError):
        cw.completion(**_kwargs(provider, stream=True, stream_options={"include_usage": True}))
    assert len(provider.hits(CHAT)) == 1


@pytest.mark.parametrize("how", ["argument", "configured"])
def test_stream_usage_never_sends_the_request_as_written(runtime, provider, how):  # noqa: F811
    if how == "configured":
        runtime.config = resolve(export="none", environ={"CW_STREAM_USAGE": "never"})
        extra = {}
    else:
        extra = {"cw_stream_usage": "never"}
    expected = _chunks(litellm.completion(**_kwargs(provider, stream=True)))
    assert _chunks(cw.completion(**_kwargs(provider, stream=True, **extra))) == expected
    assert "stream_options" not in provider.hits(CHAT)[-1].body and "cw_stream_usage" not in provider.hits(CHAT)[-1].body
    assert "usage_missing" in cw.snapshots()[-1].warning_codes()


@pytest.mark.parametrize(
    ("version", "asked"),
    [
        ("2024-02-01", False),
        ("2024-06-01", False),
        ("2024-05-01-preview", False),
        ("2024-08-01-preview", True),
        ("2024-10-21", True),
    ],
)
def test_azure_api_versions_before_stream_options_are_not_asked(version, asked):
    assert chat.asks_stream_usage("azure", {"api_version": version}) is asked


def test_azure_default_api_version_is_asked(monkeypatch):
    monkeypatch.delenv("AZURE_API_VERSION", raising=False)
    assert chat.asks_stream_usage("azure", {}) is True
    monkeypatch.setenv("AZURE_API_VERSION", "2023-05-15")
    assert chat.asks_stream_usage("azure", {}) is False


def test_the_refusal_memory_is_bounded():
    for i in range(chat.MAX_REFUSING_ENDPOINTS + 50):
        chat.remember_refusal("openai", {"api_base": f"http://h{i}"})
    assert len(chat.refusing_endpoints()) == chat.MAX_REFUSING_ENDPOINTS
    assert not chat.asks_stream_usage("openai", {"api_base": f"http://h{chat.MAX_REFUSING_ENDPOINTS + 49}"})
    assert chat.asks_stream_usage("openai", {"api_base": "http://h0"})  # the oldest forgotten first


def test_a_bad_stream_usage_setting_is_a_config_error():
    with pytest.raises(cw.ConfigError):
        resolve(environ={"CW_STREAM_USAGE": "sometimes"})
