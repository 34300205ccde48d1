"""The official ``anthropic`` client, observed: ``messages.create`` and ``messages.stream``, sync and async.

The real client from PyPI (the ``anthropic`` extra) against the local server's Anthropic Messages
route (tests/providers.py: JSON, SSE with ``message_start`` / ``message_delta`` usage, a tool call
then the answer, 400 and 500, cache reads and writes). Every expected answer is what the same
client returns without observation; every expected number is the server's usage (input +
cache writes + cache reads); the native request counts as the same request sent through LiteLLM.
"""

from __future__ import annotations

import gc
import json

import pytest

anthropic = pytest.importorskip("anthropic")
messages_module = pytest.importorskip("anthropic.resources.messages")
from providers import ANTHROPIC, CANARY, provider  # noqa: E402, F401 - the fixture
from providers import MESSAGES as MESSAGES_API  # noqa: E402

import cw_middleware as cw  # noqa: E402
from cw_middleware._kernel.contract import CountMethod  # noqa: E402

MODEL = "claude-sonnet-4-5"
TURN = [{"role": "user", "content": "Where is parcel 7?"}]
TOOL = {
    "name": "track_parcel",
    "description": "Where a parcel is now.",
    "input_schema": {"type": "object", "properties": {"parcel_id": {"type": "string"}}, "required": ["parcel_id"]},
}
METHODS = [
    (messages_module.Messages, "create"),
    (messages_module.AsyncMessages, "create"),
    (messages_module.Messages, "stream"),
    (messages_module.AsyncMessages, "stream"),
]


@pytest.fixture
def clean(monkeypatch):
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    before = {key: key[0].__dict__[key[1]] for key in METHODS}
    yield before
    cw.uninstrument()
    left = [key for key in METHODS if key[0].__dict__[key[1]] is not before[key]]
    for (cls, name), fn in before.items():
        setattr(cls, name, fn)
    assert not left, f"uninstrument() left shells on {left}"


def _client(provider, cls=None):  # noqa: F811
    return (cls or anthropic.Anthropic)(base_url=provider.url, api_key="sk-ant-test", max_retries=0)


def _served(provider) -> int:  # noqa: F811
    """The input the server reports: uncached input + cache writes + cache reads."""
    route = provider[MESSAGES_API]
    return route.tokens + route.cache_write_tokens + route.cached_tokens


def _final(snaps):
    return [s for s in snaps if s.count_method is CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN]


def _breakdown(snap) -> dict[str, int]:
    return {b.category.value: b.tokens for b in snap.breakdown}


def _spans(telemetry):
    return [s for s in telemetry.spans.get_finished_spans() if s.attributes.get("gen_ai.operation.name")]


def _exported(telemetry) -> str:
    parts = []
    for span in telemetry.spans.get_finished_spans():
        parts += [span.name, json.dumps(dict(span.attributes or {}), default=str), str(span.status.description)]
        parts += [e.name + json.dumps(dict(e.attributes or {}), default=str) for e in span.events]
    return "\n".join(parts)


# ---------------------------------------------------------------- patch and restore


def test_instrument_patches_create_and_stream_and_uninstrument_restores(runtime, clean):
    cw.instrument()
    assert all(cls.__dict__[name] is not clean[(cls, name)] for cls, name in METHODS)
    cw.uninstrument()
    assert all(cls.__dict__[name] is clean[(cls, name)] for cls, name in METHODS)


# ---------------------------------------------------------------- messages.create


def test_create_answers_as_before_and_reconciles_to_the_servers_usage(runtime, provider, clean, telemetry):  # noqa: F811
    client = _client(provider)
    kwargs = {"model": MODEL, "max_tokens": 64, "system": "You are terse.", "messages": TURN, "cw_provider_count": "never"}
    expected = client.messages.create(**{k: v for k, v in kwargs.items() if not k.startswith("cw_")})
    cw.instrument()
    with cw.stage("run-an", "step@1"):
        got = client.messages.create(**kwargs)

    assert type(got) is type(expected) and got.model_dump() == expected.model_dump()
    final = _final(cw.snapshots())[-1]
    assert (final.run_id, final.stage_id, final.provider, final.model) == ("run-an", "step@1", "anthropic", MODEL)
    assert final.input_tokens == _served(provider) == sum(b.tokens for b in final.breakdown)
    assert final.tokens("system_prompt") > 0 and final.tokens("conversation") > 0
    (span,) = _spans(telemetry)
    assert span.attributes["gen_ai.provider.name"] == "anthropic"
    assert span.attributes["gen_ai.usage.input_tokens"] == _served(provider)
    assert span.attributes["gen_ai.usage.output_tokens"] == provider[MESSAGES_API].completion_tokens
    assert span.attributes["gen_ai.usage.cache_read.input_tokens"] == provider[MESSAGES_API].cached_tokens


@pytest.mark.parametrize("delta_input", [False, True], ids=["start-usage", "delta-usage"])
def test_create_stream_yields_the_same_events_and_reconciles(runtime, provider, clean, telemetry, delta_input):  # noqa: F811
    provider[MESSAGES_API].delta_input = delta_input
    client = _client(provider)
    kwargs = {"model": MODEL, "max_tokens": 64, "messages": TURN, "stream": True}
    expected = [e.model_dump() for e in client.messages.create(**kwargs)]
    cw.instrument()
    stream = client.messages.create(**kwargs, cw_provider_count="never")
    assert type(stream) is anthropic.Stream
    assert [e.model_dump() for e in stream] == expected
    assert _final(cw.snapshots())[-1].input_tokens == _served(provider)
    (span,) = _spans(telemetry)
    assert span.attributes["gen_ai.usage.output_tokens"] == provider[MESSAGES_API].completion_tokens  # from message_delta


def test_messages_stream_helper_gives_the_same_text_and_final_message(runtime, provider, clean):  # noqa: F811
    client = _client(provider)
    kwargs = {"model": MODEL, "max_tokens": 64, "messages": TURN}
    with client.messages.stream(**kwargs) as stream:
        plain_text, plain_final = "".join(stream.text_stream), stream.get_final_message().model_dump()
    cw.instrument()
    with client.messages.stream(**kwargs, cw_provider_count="never") as stream:
        text, final_message = "".join(stream.text_stream), stream.get_final_message().model_dump()
    assert (text, final_message) == (plain_text, plain_final)
    assert _final(cw.snapshots())[-1].input_tokens == _served(provider)


async def test_async_create_stream_and_helper(runtime, provider, clean):  # noqa: F811
    client = _client(provider, anthropic.AsyncAnthropic)
    cw.instrument()
    message = await client.messages.create(model=MODEL, max_tokens=64, messages=TURN, cw_provider_count="never")
    assert message.usage.input_tokens == provider[MESSAGES_API].tokens
    events = [e.type async for e in await client.messages.create(model=MODEL, max_tokens=64, messages=TURN, stream=True)]
    assert events[0] == "message_start" and events[-1] == "message_stop"
    async with client.messages.stream(model=MODEL, max_tokens=64, messages=TURN) as stream:
        text = "".join([t async for t in stream.text_stream])
    assert text.strip() == provider[MESSAGES_API].reply
    assert [s.input_tokens for s in _final(cw.snapshots())] == [_served(provider)] * 3


@pytest.mark.parametrize("status", [400, 500])
def test_errors_are_the_same_and_never_exported(runtime, provider, clean, telemetry, caplog, status):  # noqa: F811
    provider[MESSAGES_API].status = status
    client = _client(provider)
    with pytest.raises(anthropic.APIStatusError) as plain:
        client.messages.create(model=MODEL, max_tokens=64, messages=TURN)
    cw.instrument()
    with pytest.raises(anthropic.APIStatusError) as observed:
        client.messages.create(model=MODEL, max_tokens=64, messages=TURN, cw_provider_count="never")
    with pytest.raises(anthropic.APIStatusError) as streamed:
        with client.messages.stream(model=MODEL, max_tokens=64, messages=TURN, cw_provider_count="never") as stream:
            list(stream)
    for got in (observed.value, streamed.value):
        assert type(got) is type(plain.value) and got.status_code == status and str(got) == str(plain.value)
    assert [s.count_method for s in cw.snapshots()] == [CountMethod.LOCAL_ESTIMATE] * 2
    assert [s.status.status_code.name for s in _spans(telemetry)] == ["ERROR"] * 2
    assert CANARY not in _exported(telemetry) and CANARY not in caplog.text


# ---------------------------------------------------------------- tools, tags, caching


def test_tool_call_then_answer_is_two_reconciled_calls(runtime, provider, clean):  # noqa: F811
    provider[MESSAGES_API].answer_tools = True
    client = cw.wrap(_client(provider))
    first = client.messages.create(model=MODEL, max_tokens=64, messages=TURN, tools=[TOOL], cw_provider_count="never")
    (call,) = [b for b in first.content if b.type == "tool_use"]
    history = [
        *TURN,
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "In Lyon."}]},
    ]
    second = client.messages.create(model=MODEL, max_tokens=64, messages=history, tools=[TOOL], cw_provider_count="never")
    assert second.content[0].type == "text"
    finals = _final(cw.snapshots())
    assert [s.input_tokens for s in finals] == [_served(provider)] * 2
    assert all(s.tokens("tools") > 0 and s.tokens("conversation") > 0 for s in finals)
    local = [s for s in cw.snapshots() if s.count_method is CountMethod.LOCAL_ESTIMATE]
    assert local[1].tokens("conversation") > local[0].tokens("conversation")  # the call and its result count


def test_tags_anywhere_in_a_messages_request_are_stripped_and_counted(runtime, provider, clean):  # noqa: F811
    system = [{"type": "text", "text": "You ship parcels."}, cw.segment("Never guess a location.", "memory", "AGENTS.md")]
    skill = cw.segment("Skill: tracking codes.", "skills", "skill:t")
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [skill]}
    messages = [
        cw.message("user", "Where is parcel 7?", category="memory", source="notes"),
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "track_parcel", "input": {}}]},
        {"role": "user", "content": [result]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_2", "name": "track_parcel", "input": {}}]},
        cw.message("tool", "In Lyon.", tool_call_id="toolu_2", category="skills", source="skill:t"),
    ]
    tools = [cw.tool(TOOL, cw.ToolSource.mcp("parcels"))]
    cw.wrap(_client(provider)).messages.create(
        model=MODEL, max_tokens=64, system=system, messages=messages, tools=tools, cw_provider_count="never"
    )
    body = provider.hits(MESSAGES_API)[-1].body
    assert "cw_tag" not in json.dumps(body)
    assert body["system"][1] == {"type": "text", "text": "Never guess a location."}
    assert body["messages"][2]["content"][0]["content"] == [{"type": "text", "text": "Skill: tracking codes."}]
    assert body["messages"][4] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "In Lyon."}],
    }
    assert body["tools"] == [TOOL]
    final = _final(cw.snapshots())[-1]
    assert final.tokens("memory") > 0 and final.tokens("skills") > 0 and final.tokens("mcp_tools") > 0
    assert final.input_tokens == _served(provider)


def test_a_cache_breakpoint_reconciles_prefix_and_rest_apart(runtime, provider, clean):  # noqa: F811
    route = provider[MESSAGES_API]
    route.tokens, route.cache_write_tokens, route.cached_tokens = 1234, 40, 900  # after, written, read
    system = [{"type": "text", "text": "You are a meticulous assistant. " * 40, "cache_control": {"type": "ephemeral"}}]
    cw.wrap(_client(provider)).messages.create(
        model=MODEL, max_tokens=64, system=system, messages=[{"role": "user", "content": "Where? " * 20}], tools=[TOOL]
    )
    parts = _breakdown(_final(cw.snapshots())[-1])
    assert parts["system_prompt"] + parts["tools"] == 40 + 900  # exactly the cached prefix
    assert parts["conversation"] + parts["other"] == 1234
    assert parts["system_prompt"] > 0 and parts["conversation"] > 0


def test_provider_count_goes_to_the_clients_endpoint_with_its_key_and_the_clean_request(runtime, provider, clean):  # noqa: F811
    messages = [cw.message("user", "Where is parcel 7?", category="memory", source="notes")]
    cw.wrap(_client(provider)).messages.create(
        model=MODEL, max_tokens=64, system="Be terse.", messages=messages, tools=[TOOL], cw_provider_count="always"
    )
    (count,) = provider.wait_for_hits(ANTHROPIC, 1)
    assert count.headers["x-api-key"] == "sk-ant-test"
    assert count.body["model"] == MODEL and count.body["system"] == "Be terse." and count.body["tools"] == [TOOL]
    assert "cw_tag" not in json.dumps(count.body) and "max_tokens" not in count.body
    cw.flush()
    counted = [s for s in cw.snapshots() if s.count_method is CountMethod.PROVIDER_API_SCALED_BREAKDOWN]
    assert counted and counted[-1].input_tokens == provider[ANTHROPIC].tokens


# ---------------------------------------------------------------- the same count as through LiteLLM


def test_a_native_request_counts_as_the_same_request_through_litellm(runtime, provider, clean):  # noqa: F811
    """One conversation written twice: OpenAI-style for LiteLLM's Anthropic path, natively for the client."""
    text = "You are a meticulous assistant for a shipping company. " * 10
    chat_tool = {"type": "function", "function": {k if k != "input_schema" else "parameters": v for k, v in TOOL.items()}}
    chat = [
        {"role": "system", "content": [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]},
        {"role": "user", "content": "Where is parcel 7?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "track_parcel", "arguments": '{"parcel_id": "7"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "In Lyon, since Tuesday."},
        {"role": "user", "content": "And parcel 8?"},
    ]
    native = [
        {"role": "user", "content": "Where is parcel 7?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "track_parcel", "input": {"parcel_id": "7"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "In Lyon, since Tuesday."},
                {"type": "text", "text": "And parcel 8?"},
            ],
        },
    ]
    thinking = {"type": "enabled", "budget_tokens": 1024}
    common = {"max_tokens": 2048, "thinking": thinking, "cw_provider_count": "never"}
    cw.completion(model=f"anthropic/{MODEL}", messages=chat, tools=[chat_tool], api_base=provider.url, api_key="k", **common)
    via_litellm = cw.snapshots()
    cw.wrap(_client(provider)).messages.create(model=MODEL, system=chat[0]["content"], messages=native, tools=[TOOL], **common)
    via_client = cw.snapshots()[len(via_litellm) :]

    assert [s.count_method for s in via_client] == [s.count_method for s in via_litellm]
    for litellm_snap, client_snap in zip(via_litellm, via_client):
        assert _breakdown(client_snap) == _breakdown(litellm_snap)
        assert client_snap.input_tokens == litellm_snap.input_tokens


# ---------------------------------------------------------------- cw.wrap


def test_wrap_observes_a_copy_and_leaves_the_original_alone(runtime, provider, clean):  # noqa: F811
    original = _client(provider)
    observed = cw.wrap(original)
    assert isinstance(observed, anthropic.Anthropic) and observed is not original
    original.messages.create(model=MODEL, max_tokens=64, messages=TURN)
    assert cw.snapshots() == []
    with observed.messages.stream(model=MODEL, max_tokens=64, messages=TURN, cw_provider_count="never") as stream:
        list(stream)
    assert _final(cw.snapshots())[-1].input_tokens == _served(provider)
    assert all(cls.__dict__[name] is clean[(cls, name)] for cls, name in METHODS)  # no class patched


def test_a_stream_manager_never_entered_ends_its_call_without_usage(runtime, provider, clean):  # noqa: F811
    manager = cw.wrap(_client(provider)).messages.stream(model=MODEL, max_tokens=64, messages=TURN, cw_provider_count="never")
    del manager
    gc.collect()
    assert provider.hits(MESSAGES_API) == []
    snap = cw.snapshots()[-1]
    assert snap.count_method is CountMethod.LOCAL_ESTIMATE and "usage_missing" in snap.warning_codes()
