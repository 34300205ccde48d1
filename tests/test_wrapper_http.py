"""The wrapper over real LiteLLM and real HTTP: a local OpenAI-compatible server on 127.0.0.1.

Every expected number here is one the server reports (its prompt_tokens and
cached_tokens), and every expected chunk is one plain `litellm.completion`
returns for the same request against the same server.
"""

from __future__ import annotations

import json

import litellm
import pytest
from providers import ANTHROPIC, CHAT, provider  # noqa: F401 - the fixture
from providers import MESSAGES as MESSAGES_API

import cw_middleware as cw
from cw_middleware._kernel.contract import CountMethod, WarningCode

MESSAGES = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "Say hello."},
]


def _kwargs(provider, **extra):  # noqa: F811
    return {"model": "openai/gpt-4o", "messages": MESSAGES, "api_base": f"{provider.url}/v1", "api_key": "sk-test", **extra}


def _chunks(stream) -> list[dict]:
    out = []
    for chunk in stream:
        dump = chunk.model_dump()
        dump.pop("created", None)  # the server's clock
        out.append(dump)
    return out


async def _achunks(stream) -> list[dict]:
    out = []
    async for chunk in stream:
        dump = chunk.model_dump()
        dump.pop("created", None)
        out.append(dump)
    return out


def _assert_reconciled(snap, total: int, categories=("system_prompt", "conversation")) -> None:
    assert snap.count_method is CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN
    assert snap.input_tokens == total
    assert sum(b.tokens for b in snap.breakdown) == total
    assert all(b.tokens >= 0 for b in snap.breakdown)
    assert all(snap.tokens(c) > 0 for c in categories)


def test_non_streamed_reconciles_to_prompt_tokens(runtime, provider, telemetry):  # noqa: F811
    expected = litellm.completion(**_kwargs(provider))
    response = cw.completion(**_kwargs(provider))

    assert type(response) is type(expected)
    assert response.choices[0].message.content == expected.choices[0].message.content
    assert response.usage.model_dump() == expected.usage.model_dump()
    snaps = cw.snapshots()
    assert [s.count_method for s in snaps] == [CountMethod.LOCAL_ESTIMATE, CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN]
    assert snaps[0].event_seq < snaps[1].event_seq
    _assert_reconciled(snaps[-1], provider[CHAT].tokens)
    assert WarningCode.USAGE_MISSING.value not in snaps[-1].warning_codes()


def test_cached_tokens_reach_the_call_span(runtime, provider, telemetry):  # noqa: F811
    provider[CHAT].tokens, provider[CHAT].cached_tokens = 5000, 4096
    cw.completion(**_kwargs(provider))

    (span,) = [s for s in telemetry.spans.get_finished_spans() if s.attributes.get("gen_ai.usage.input_tokens") is not None]
    assert span.attributes["gen_ai.usage.input_tokens"] == 5000  # cache reads are inside OpenAI's prompt_tokens
    assert span.attributes["gen_ai.usage.cache_read.input_tokens"] == 4096
    events = [e for e in span.events if e.name == "agent.context_window.snapshot"]
    assert events[-1].attributes["agent.context_window.input_tokens"] == 5000


def test_stream_sync_matches_plain_litellm_and_reconciles(runtime, provider):  # noqa: F811
    expected = _chunks(litellm.completion(**_kwargs(provider, stream=True)))
    got = _chunks(cw.completion(**_kwargs(provider, stream=True)))

    assert got == expected  # the usage-only chunk we asked for is swallowed
    plain_request, cw_request = (r.body for r in provider.hits(CHAT))
    assert "stream_options" not in plain_request
    assert cw_request["stream_options"] == {"include_usage": True}
    _assert_reconciled(cw.snapshots()[-1], provider[CHAT].tokens)


async def test_stream_async_matches_plain_litellm_and_reconciles(runtime, provider):  # noqa: F811
    expected = await _achunks(await litellm.acompletion(**_kwargs(provider, stream=True)))
    got = await _achunks(await cw.acompletion(**_kwargs(provider, stream=True)))

    assert got == expected
    assert provider.hits(CHAT)[-1].body["stream_options"] == {"include_usage": True}
    _assert_reconciled(cw.snapshots()[-1], provider[CHAT].tokens)


async def test_async_non_streamed(runtime, provider):  # noqa: F811
    response = await cw.acompletion(**_kwargs(provider))
    assert response.usage.prompt_tokens == provider[CHAT].tokens
    _assert_reconciled(cw.snapshots()[-1], provider[CHAT].tokens)


def test_caller_asked_for_usage_keeps_the_usage_chunk(runtime, provider):  # noqa: F811
    options = {"stream_options": {"include_usage": True}}
    expected = _chunks(litellm.completion(**_kwargs(provider, stream=True, **options)))
    got = _chunks(cw.completion(**_kwargs(provider, stream=True, **options)))

    assert got == expected
    assert got[-1]["usage"]["prompt_tokens"] == provider[CHAT].tokens  # their usage chunk is theirs
    _assert_reconciled(cw.snapshots()[-1], provider[CHAT].tokens)


def test_caller_who_turns_usage_off_keeps_their_stream_options(runtime, provider):  # noqa: F811
    """The off switch README documents: your own stream_options go out as you wrote them."""
    options = {"stream_options": {"include_usage": False}}
    expected = _chunks(litellm.completion(**_kwargs(provider, stream=True, **options)))
    got = _chunks(cw.completion(**_kwargs(provider, stream=True, **options)))

    assert got == expected
    assert provider.hits(CHAT)[-1].body["stream_options"] == {"include_usage": False}
    snap = cw.snapshots()[-1]
    assert snap.count_method is CountMethod.LOCAL_ESTIMATE and WarningCode.USAGE_MISSING.value in snap.warning_codes()


def test_stream_abandoned_early_does_not_reconcile(runtime, provider):  # noqa: F811
    stream = cw.completion(**_kwargs(provider, stream=True))
    next(iter(stream))
    assert [s.count_method for s in cw.snapshots()] == [CountMethod.LOCAL_ESTIMATE]


def test_tags_and_options_never_reach_the_provider(runtime, provider):  # noqa: F811
    messages = [
        cw.message("system", ["You are careful.", cw.segment("Always run the tests.", "memory", "AGENTS.md")]),
        cw.message("user", "Use the pdf skill.", category="skills", source="skill:pdf"),
    ]
    tools = [
        cw.tool(
            {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {}}}},
            source=cw.ToolSource.mcp("github"),
        ),
    ]
    cw.completion(**_kwargs(provider, messages=messages, tools=tools, cw_context_window=50_000, cw_provider_count="never"))

    (request,) = provider.hits(CHAT)
    raw = json.dumps(request.body)
    assert "cw_tag" not in raw and "cw_context_window" not in raw and "cw_provider_count" not in raw
    assert request.body["messages"][0]["content"][1] == {"type": "text", "text": "Always run the tests."}
    assert request.body["tools"][0]["function"]["name"] == "search"
    assert "cw_tag" in messages[1]  # the caller's objects are left as they were
    snap = cw.snapshots()[-1]
    _assert_reconciled(snap, provider[CHAT].tokens, ("system_prompt", "memory", "skills", "mcp_tools"))
    assert snap.context_window_tokens == 50_000
    assert {(d.category.value, d.source) for d in snap.details} >= {
        ("memory", "AGENTS.md"),
        ("skills", "skill:pdf"),
        ("mcp_tools", "mcp:github"),
    }


def test_mock_response_keeps_the_local_estimate(runtime, provider):  # noqa: F811
    response = cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="ok")
    assert response.choices[0].message.content == "ok"
    snaps = cw.snapshots()
    assert [s.count_method for s in snaps] == [CountMethod.LOCAL_ESTIMATE, CountMethod.LOCAL_ESTIMATE]
    assert snaps[-1].input_tokens == snaps[0].input_tokens != response.usage.prompt_tokens
    assert WarningCode.MOCK_USAGE_NOT_RECONCILED.value in snaps[-1].warning_codes()
    assert provider.requests == []


@pytest.mark.parametrize("stream", [False, True])
def test_mock_response_streamed_or_not(runtime, stream):
    response = cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="fine thanks", stream=stream)
    if stream:
        assert "".join(c.choices[0].delta.content or "" for c in response if c.choices) == "fine thanks"
    snap = cw.snapshots()[-1]
    assert snap.count_method is CountMethod.LOCAL_ESTIMATE
    assert WarningCode.MOCK_USAGE_NOT_RECONCILED.value in snap.warning_codes()


def test_local_estimate_matches_tiktoken_framing(runtime, provider):  # noqa: F811
    """The exact path for OpenAI models: independent tiktoken count with OpenAI's documented chat framing."""
    import tiktoken

    enc = tiktoken.get_encoding("o200k_base")
    expected = 3 + sum(3 + len(enc.encode(m["role"])) + len(enc.encode(m["content"])) for m in MESSAGES)
    cw.completion(**_kwargs(provider))
    assert cw.snapshots()[0].input_tokens == expected


def test_anthropic_usage_counts_cache_reads_and_writes(runtime, provider, monkeypatch):  # noqa: F811
    """Anthropic's input_tokens excludes the cache: the context is input + cache writes + cache reads."""
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    route = provider[MESSAGES_API]
    response = cw.completion(
        model="anthropic/claude-3-5-sonnet-20241022",
        messages=MESSAGES,
        max_tokens=50,
        api_base=provider.url,
        api_key="sk-ant-test",
    )
    assert response.choices[0].message.content == route.reply
    assert cw.flush(5)
    by_method = {s.count_method: s for s in cw.snapshots()}
    _assert_reconciled(
        by_method[CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN], route.tokens + route.cache_write_tokens + route.cached_tokens
    )
    # auto: Anthropic's tokenizer is approximate here and credentials exist, so the count endpoint was asked too
    counted = by_method[CountMethod.PROVIDER_API_SCALED_BREAKDOWN]
    assert counted.input_tokens == sum(b.tokens for b in counted.breakdown) == provider[ANTHROPIC].tokens
    (request,) = provider.hits(MESSAGES_API)
    assert request.body["system"] and "cw_tag" not in json.dumps(request.body)
