"""The official ``openai`` client, observed: cw.instrument() and cw.wrap(client), Chat Completions.

The real client from PyPI against the local OpenAI-compatible server (tests/providers.py). Every
expected answer is what the same client returns without observation, every expected number one the
server reports (its prompt_tokens and cached_tokens).
"""

from __future__ import annotations

import json

import litellm
import openai
import openai.resources.chat.completions
import openai.resources.responses
import pytest
from opentelemetry import context as otel_context
from providers import CANARY, CHAT, provider  # noqa: F401 - the fixture

import cw_middleware as cw
from cw_middleware._capture.clients import patches as client_patches
from cw_middleware._kernel.contract import CountMethod, WarningCode

MESSAGES = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "Say hello."},
]
METHODS = [
    (openai.resources.chat.completions.Completions, "create"),
    (openai.resources.chat.completions.AsyncCompletions, "create"),
    (openai.resources.responses.Responses, "create"),
    (openai.resources.responses.AsyncResponses, "create"),
]


@pytest.fixture
def clean():
    """Every patched method as the test found it; fails if uninstrument() left a shell of ours."""
    before = {key: key[0].__dict__[key[1]] for key in METHODS}
    yield before
    cw.uninstrument()
    left = [key for key in METHODS if key[0].__dict__[key[1]] is not before[key]]
    for (cls, name), fn in before.items():
        setattr(cls, name, fn)
    assert not left, f"uninstrument() left shells on {left}"


def _client(provider, cls=openai.OpenAI):  # noqa: F811
    return cls(base_url=f"{provider.url}/v1", api_key="sk-test", max_retries=0)


def _dump(obj) -> dict:
    out = obj.model_dump()
    out.pop("created", None)  # the server's clock
    return out


def _final(snaps):
    return [s for s in snaps if s.count_method is CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN]


def _spans(telemetry):
    return [s for s in telemetry.spans.get_finished_spans() if s.attributes.get("gen_ai.operation.name")]


def _exported_text(telemetry) -> str:
    """Everything the telemetry holds, as one string: span names, attributes, events (and their attributes)."""
    parts = []
    for span in telemetry.spans.get_finished_spans():
        parts.append(span.name)
        parts.append(json.dumps(dict(span.attributes or {}), default=str))
        for event in span.events:
            parts.append(event.name + json.dumps(dict(event.attributes or {}), default=str))
        parts.append(str(span.status.description))
    return "\n".join(parts)


# ---------------------------------------------------------------- patch and restore


def test_instrument_patches_the_client_methods_and_uninstrument_restores_them(runtime, clean):
    cw.instrument()
    for (cls, name), fn in clean.items():
        assert cls.__dict__[name] is not fn
    patched = {key: key[0].__dict__[key[1]] for key in METHODS}
    cw.instrument()  # idempotent: the same shells
    assert {key: key[0].__dict__[key[1]] for key in METHODS} == patched
    cw.uninstrument()
    assert {key: key[0].__dict__[key[1]] for key in METHODS} == clean
    cw.uninstrument()
    assert {key: key[0].__dict__[key[1]] for key in METHODS} == clean


def test_a_patch_made_on_top_of_ours_is_left_in_place(runtime, clean, caplog):
    cw.instrument()
    cls = openai.resources.chat.completions.Completions
    ours = cls.__dict__["create"]

    def theirs(self, *args, **kwargs):
        return ours(self, *args, **kwargs)

    cls.create = theirs
    cw.uninstrument()
    assert cls.__dict__["create"] is theirs
    assert "patched again after instrument()" in caplog.text
    cls.create = ours  # the fixture's uninstrument() may now restore
    cw.uninstrument()


# ---------------------------------------------------------------- observed calls


def test_instrumented_call_answers_as_before_and_reconciles_to_the_servers_usage(runtime, provider, clean, telemetry):  # noqa: F811
    client = _client(provider)
    expected = client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert cw.snapshots() == []
    cw.instrument()
    with cw.stage("run-oa", "step@1"):
        got = client.chat.completions.create(model="gpt-4o", messages=MESSAGES)

    assert type(got) is type(expected) and _dump(got) == _dump(expected)
    snaps = cw.snapshots()
    assert [s.count_method for s in snaps] == [CountMethod.LOCAL_ESTIMATE, CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN]
    final = snaps[-1]
    assert (final.run_id, final.stage_id) == ("run-oa", "step@1")
    assert final.input_tokens == provider[CHAT].tokens == sum(b.tokens for b in final.breakdown)
    assert final.tokens("system_prompt") > 0 and final.tokens("conversation") > 0
    assert (final.provider, final.model) == ("openai_compatible", "gpt-4o")
    (span,) = _spans(telemetry)
    assert span.attributes["gen_ai.provider.name"] == "openai_compatible"
    assert span.attributes["gen_ai.request.model"] == "gpt-4o"
    assert span.attributes["gen_ai.usage.input_tokens"] == provider[CHAT].tokens
    assert span.attributes["gen_ai.usage.cache_read.input_tokens"] == provider[CHAT].cached_tokens


def test_stream_is_the_same_chunks_and_reconciles(runtime, provider, clean):  # noqa: F811
    client = _client(provider)
    expected = [_dump(c) for c in client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)]
    cw.instrument()
    stream = client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    assert type(stream) is openai.Stream
    got = [_dump(c) for c in stream]

    assert got == expected  # the usage chunk we asked for is swallowed
    plain_request, observed_request = (r.body for r in provider.hits(CHAT))
    assert "stream_options" not in plain_request
    assert observed_request["stream_options"] == {"include_usage": True}
    assert _final(cw.snapshots())[-1].input_tokens == provider[CHAT].tokens


def test_stream_read_with_next_is_observed_too(runtime, provider, clean):  # noqa: F811
    cw.instrument()
    stream = _client(provider).chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    chunks = []
    while True:
        try:
            chunks.append(next(stream))
        except StopIteration:
            break
    assert all(c.choices for c in chunks)
    assert _final(cw.snapshots())[-1].input_tokens == provider[CHAT].tokens


def test_caller_who_asks_for_usage_keeps_the_usage_chunk(runtime, provider, clean):  # noqa: F811
    cw.instrument()
    chunks = list(
        _client(provider).chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[-1].usage.prompt_tokens == provider[CHAT].tokens
    assert _final(cw.snapshots())[-1].input_tokens == provider[CHAT].tokens


async def test_async_calls_and_streams_are_observed(runtime, provider, clean):  # noqa: F811
    client = _client(provider, openai.AsyncOpenAI)
    plain = [_dump(c) async for c in await client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)]
    cw.instrument()
    response = await client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert response.usage.prompt_tokens == provider[CHAT].tokens
    stream = await client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    assert type(stream) is openai.AsyncStream
    assert [_dump(c) async for c in stream] == plain
    assert [s.input_tokens for s in _final(cw.snapshots())] == [provider[CHAT].tokens] * 2


def test_not_given_arguments_are_left_out_as_the_client_does(runtime, provider, clean):  # noqa: F811
    cw.instrument()
    _client(provider).chat.completions.create(
        model="gpt-4o", messages=MESSAGES, tools=openai.NOT_GIVEN, tool_choice=openai.omit, stream=openai.NOT_GIVEN
    )
    body = provider.hits(CHAT)[-1].body
    assert "tools" not in body and "tool_choice" not in body and "stream" not in body
    assert _final(cw.snapshots())[-1].input_tokens == provider[CHAT].tokens


def test_a_generator_of_messages_reaches_the_server_whole(runtime, provider, clean):  # noqa: F811
    cw.instrument()
    _client(provider).chat.completions.create(model="gpt-4o", messages=(m for m in MESSAGES))
    assert provider.hits(CHAT)[-1].body["messages"] == MESSAGES
    assert _final(cw.snapshots())[-1].tokens("system_prompt") > 0


@pytest.mark.parametrize("status", [400, 500])
def test_provider_errors_are_the_same_and_never_exported(runtime, provider, clean, telemetry, status, caplog):  # noqa: F811
    provider[CHAT].status = status
    client = _client(provider)
    with pytest.raises(openai.APIStatusError) as plain:
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    cw.instrument()
    with pytest.raises(openai.APIStatusError) as observed:
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)

    assert type(observed.value) is type(plain.value) and observed.value.status_code == status
    assert str(observed.value) == str(plain.value)
    assert [s.count_method for s in cw.snapshots()] == [CountMethod.LOCAL_ESTIMATE]
    (span,) = _spans(telemetry)
    assert span.status.status_code.name == "ERROR"
    assert CANARY not in _exported_text(telemetry) and CANARY not in caplog.text


def test_tags_are_stripped_before_the_client_sends_and_counted(runtime, provider, clean):  # noqa: F811
    messages = [
        cw.message("system", ["You are careful.", cw.segment("Always run the tests.", "memory", "AGENTS.md")]),
        cw.message("user", "Use the pdf skill.", category="skills", source="skill:pdf"),
    ]
    tools = [
        cw.tool(
            {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {}}}},
            source=cw.ToolSource.mcp("github"),
        )
    ]
    cw.instrument()
    _client(provider).chat.completions.create(model="gpt-4o", messages=messages, tools=tools, cw_context_window=50_000)

    raw = json.dumps(provider.hits(CHAT)[-1].body)
    assert "cw_tag" not in raw and "cw_context_window" not in raw
    final = _final(cw.snapshots())[-1]
    assert final.context_window_tokens == 50_000
    assert final.tokens("memory") > 0 and final.tokens("skills") > 0 and final.tokens("mcp_tools") > 0
    assert final.input_tokens == provider[CHAT].tokens


def test_a_bad_tag_is_the_callers_error_and_nothing_is_sent(runtime, provider, clean):  # noqa: F811
    cw.instrument()
    bad = [{"role": "user", "content": "x", "cw_tag": {"category": "nonsense"}}]
    with pytest.raises(cw.TagError):
        _client(provider).chat.completions.create(model="gpt-4o", messages=bad)
    assert provider.hits(CHAT) == []


# ---------------------------------------------------------------- raw responses


def test_with_raw_response_is_observed_when_parsed(runtime, provider, clean):  # noqa: F811
    cw.instrument()
    raw = _client(provider).chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    assert raw.headers["content-type"].startswith("application/json")
    assert _final(cw.snapshots()) == []  # not parsed yet
    response = raw.parse()
    assert response is raw.parse()  # the client's own cache still answers
    assert response.usage.prompt_tokens == provider[CHAT].tokens
    assert _final(cw.snapshots())[-1].input_tokens == provider[CHAT].tokens


def test_a_raw_stream_is_not_asked_for_usage_and_keeps_its_bytes(runtime, provider, clean):  # noqa: F811
    cw.instrument()
    with _client(provider).chat.completions.with_streaming_response.create(
        model="gpt-4o", messages=MESSAGES, stream=True
    ) as response:
        lines = [line for line in response.iter_lines() if line]
    assert "stream_options" not in provider.hits(CHAT)[-1].body
    assert lines[-1] == "data: [DONE]" and not any('"usage"' in line for line in lines)


def test_with_streaming_response_parsed_is_observed(runtime, provider, clean):  # noqa: F811
    cw.instrument()
    with _client(provider).chat.completions.with_streaming_response.create(model="gpt-4o", messages=MESSAGES) as response:
        parsed = response.parse()
    assert parsed.usage.prompt_tokens == provider[CHAT].tokens
    assert _final(cw.snapshots())[-1].input_tokens == provider[CHAT].tokens


# ---------------------------------------------------------------- observed once, or not at all


def test_litellm_through_the_instrumented_client_is_one_call(runtime, provider, clean, telemetry):  # noqa: F811
    cw.instrument()
    litellm.completion(model="openai/gpt-4o", messages=MESSAGES, api_base=f"{provider.url}/v1", api_key="sk-test")
    assert len(provider.hits(CHAT)) == 1
    assert [s.count_method for s in cw.snapshots()] == [
        CountMethod.LOCAL_ESTIMATE,
        CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN,
    ]
    (span,) = _spans(telemetry)
    assert span.attributes["gen_ai.provider.name"] == "openai"  # LiteLLM's call, named as LiteLLM names it


def test_a_call_under_the_suppress_instrumentation_key_is_not_observed(runtime, provider, clean):  # noqa: F811
    cw.instrument()
    token = otel_context.attach(otel_context.set_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY, True))
    try:
        _client(provider).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    finally:
        otel_context.detach(token)
    assert cw.snapshots() == [] and len(provider.hits(CHAT)) == 1


# ---------------------------------------------------------------- cw.wrap


def test_wrap_observes_a_copy_and_leaves_the_original_alone(runtime, provider, clean):  # noqa: F811
    original = _client(provider)
    before = dict(vars(original))
    observed = cw.wrap(original)

    assert isinstance(observed, openai.OpenAI) and observed is not original
    assert observed.base_url == original.base_url and observed.api_key == original.api_key
    original.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert cw.snapshots() == []
    assert {k: v for k, v in vars(original).items() if k in before} == before
    got = observed.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert got.usage.prompt_tokens == provider[CHAT].tokens
    assert _final(cw.snapshots())[-1].input_tokens == provider[CHAT].tokens
    assert openai.resources.chat.completions.Completions.__dict__["create"] is clean[METHODS[0]]  # no class patched


def test_wrap_keeps_observing_through_with_options(runtime, provider, clean):  # noqa: F811
    observed = cw.wrap(_client(provider)).with_options(timeout=30)
    observed.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert _final(cw.snapshots())[-1].input_tokens == provider[CHAT].tokens


def test_wrap_under_instrument_is_observed_once(runtime, provider, clean):  # noqa: F811
    cw.instrument()
    cw.wrap(_client(provider)).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert len(cw.snapshots()) == 2


def test_wrap_refuses_what_is_not_a_client():
    with pytest.raises(TypeError):
        cw.wrap(object())


def test_stream_usage_never_leaves_the_request_as_written(runtime, provider, clean):  # noqa: F811
    cw.instrument()
    list(_client(provider).chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True, cw_stream_usage="never"))
    assert "stream_options" not in provider.hits(CHAT)[-1].body
    snap = cw.snapshots()[-1]
    assert snap.count_method is CountMethod.LOCAL_ESTIMATE and WarningCode.USAGE_MISSING.value in snap.warning_codes()


def test_the_table_names_methods_the_installed_client_has():
    """Rows for another client version (openai 1.x's ``beta.chat``) may name a module this one lacks, never a
    class without its method (tests/test_client_coverage.py checks every row); today's create rows are here."""
    present = {(t.owner, t.method) for t in client_patches.TARGETS if t.sdk == "openai" and t.owner_class() is not None}
    assert {("Completions", "create"), ("Responses", "create"), ("Completions", "parse"), ("Responses", "parse")} <= present
