"""The official ``openai`` client's Responses API, observed: ``responses.create``, sync and async, streamed or not.

The real client against the local server's ``/v1/responses`` (tests/providers.py); the expected
numbers are the usage its ``response.completed`` reports, the expected events what the same
client yields without observation.
"""

from __future__ import annotations

import json

import openai
import openai.resources.responses
import pytest
from providers import CANARY, RESPONSES, provider  # noqa: F401 - the fixture

import cw_middleware as cw
from cw_middleware._kernel.contract import CountMethod

INPUT = [{"role": "user", "content": "Say hello."}]
METHODS = [(openai.resources.responses.Responses, "create"), (openai.resources.responses.AsyncResponses, "create")]


@pytest.fixture
def clean():
    before = {key: key[0].__dict__[key[1]] for key in METHODS}
    yield
    cw.uninstrument()
    for (cls, name), fn in before.items():
        setattr(cls, name, fn)


def _client(provider, cls=openai.OpenAI):  # noqa: F811
    return cls(base_url=f"{provider.url}/v1", api_key="sk-test", max_retries=0)


def _dump(obj) -> dict:
    out = obj.model_dump()
    out.pop("created_at", None)
    if isinstance(out.get("response"), dict):
        out["response"].pop("created_at", None)
    return out


def _final(snaps):
    return [s for s in snaps if s.count_method is CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN]


def test_create_answers_as_before_and_reconciles(runtime, provider, clean, telemetry):  # noqa: F811
    client = _client(provider)
    kwargs = {"model": "gpt-4o", "input": INPUT, "instructions": "You are terse."}
    expected = client.responses.create(**kwargs)
    cw.instrument()
    got = client.responses.create(**kwargs)

    assert type(got) is type(expected) and _dump(got) == _dump(expected)
    final = _final(cw.snapshots())[-1]
    assert final.input_tokens == provider[RESPONSES].tokens == sum(b.tokens for b in final.breakdown)
    assert final.tokens("system_prompt") > 0 and final.tokens("conversation") > 0
    (span,) = [s for s in telemetry.spans.get_finished_spans() if s.attributes.get("gen_ai.operation.name")]
    assert span.attributes["gen_ai.usage.cache_read.input_tokens"] == provider[RESPONSES].cached_tokens


def test_stream_yields_the_same_events_and_reconciles_on_completed(runtime, provider, clean):  # noqa: F811
    client = _client(provider)
    expected = [_dump(e) for e in client.responses.create(model="gpt-4o", input=INPUT, stream=True)]
    cw.instrument()
    got = [_dump(e) for e in client.responses.create(model="gpt-4o", input=INPUT, stream=True)]
    assert got == expected and got[-1]["type"] == "response.completed"
    assert "stream_options" not in provider.hits(RESPONSES)[-1].body  # a Responses stream always ends with its usage
    assert _final(cw.snapshots())[-1].input_tokens == provider[RESPONSES].tokens


async def test_async_create_and_stream(runtime, provider, clean):  # noqa: F811
    client = _client(provider, openai.AsyncOpenAI)
    cw.instrument()
    response = await client.responses.create(model="gpt-4o", input=INPUT)
    assert response.usage.input_tokens == provider[RESPONSES].tokens
    events = [e.type async for e in await client.responses.create(model="gpt-4o", input=INPUT, stream=True)]
    assert events[-1] == "response.completed"
    assert [s.input_tokens for s in _final(cw.snapshots())] == [provider[RESPONSES].tokens] * 2


def test_raw_response_parsed_is_observed(runtime, provider, clean):  # noqa: F811
    cw.instrument()
    raw = _client(provider).responses.with_raw_response.create(model="gpt-4o", input=INPUT)
    assert raw.parse().usage.input_tokens == provider[RESPONSES].tokens
    assert _final(cw.snapshots())[-1].input_tokens == provider[RESPONSES].tokens


def test_streaming_response_of_a_stream_parsed_is_observed(runtime, provider, clean):  # noqa: F811
    cw.instrument()
    with _client(provider).responses.with_streaming_response.create(model="gpt-4o", input=INPUT, stream=True) as response:
        kinds = [event.type for event in response.parse()]
    assert kinds[-1] == "response.completed"
    assert _final(cw.snapshots())[-1].input_tokens == provider[RESPONSES].tokens


def test_tagged_input_items_and_tools_go_out_clean(runtime, provider, clean):  # noqa: F811
    items = [
        cw.message("developer", "Follow AGENTS.md.", category="memory", source="AGENTS.md"),
        {"role": "user", "content": [cw.segment("Use the pdf skill.", "skills", "skill:pdf")]},
    ]
    tools = [cw.tool({"type": "function", "name": "lookup", "parameters": {"type": "object"}}, cw.ToolSource.mcp("docs"))]
    cw.wrap(_client(provider)).responses.create(model="gpt-4o", input=items, tools=tools)
    body = provider.hits(RESPONSES)[-1].body
    assert "cw_tag" not in json.dumps(body)
    assert body["input"][1]["content"][0]["type"] == "input_text"  # the Responses API's spelling
    final = _final(cw.snapshots())[-1]
    assert final.tokens("memory") > 0 and final.tokens("skills") > 0 and final.tokens("mcp_tools") > 0


def test_errors_are_the_same_and_their_body_stays_out(runtime, provider, clean, caplog):  # noqa: F811
    provider[RESPONSES].status = 400
    client = _client(provider)
    with pytest.raises(openai.BadRequestError) as plain:
        client.responses.create(model="gpt-4o", input=INPUT)
    cw.instrument()
    with pytest.raises(openai.BadRequestError) as observed:
        client.responses.create(model="gpt-4o", input=INPUT)
    assert str(observed.value) == str(plain.value)
    assert CANARY not in json.dumps([s.model_dump(mode="json") for s in cw.snapshots()]) and CANARY not in caplog.text
