"""The official ``google-genai`` client, observed: ``models.generate_content[_stream]``, ``client.aio``, chats.

The real client from PyPI (the ``google`` extra) against the local server's Gemini routes
(tests/providers.py: ``generateContent``, ``streamGenerateContent?alt=sse``, ``countTokens``). Every
expected answer is what the same client returns without observation; every expected number is the
server's ``usageMetadata`` (``promptTokenCount`` + ``toolUsePromptTokenCount``).
"""

from __future__ import annotations

import json

import pytest

genai = pytest.importorskip("google.genai")
from google.genai import types  # noqa: E402
from providers import CANARY, GEMINI, GENERATE, provider  # noqa: E402, F401 - the fixture

import cw_middleware as cw  # noqa: E402
from cw_middleware._capture.clients.patches import TARGETS  # noqa: E402
from cw_middleware._kernel.contract import CountMethod  # noqa: E402

MODEL = "gemini-2.5-flash"
LOOKUP = {
    "name": "lookup_parcel",
    "description": "Where a parcel is now.",
    "parameters": {"type": "object", "properties": {"parcel_id": {"type": "string"}}, "required": ["parcel_id"]},
}


@pytest.fixture
def restored():
    rows = [(t.owner_class(), t.method) for t in TARGETS if t.sdk == "google.genai"]
    before = {key: key[0].__dict__[key[1]] for key in rows}
    yield
    cw.uninstrument()
    left = [key for key in rows if key[0].__dict__[key[1]] is not before[key]]
    assert not left, f"uninstrument() left shells on {left}"


def _client(provider):  # noqa: F811
    return genai.Client(api_key="gm-test", http_options=types.HttpOptions(base_url=provider.url))


def _served(provider) -> int:  # noqa: F811
    route = provider[GENERATE]
    return route.tokens + route.tool_use_tokens


def _stage(run: str) -> list:
    return [s for s in cw.snapshots() if s.run_id == run]


def _final(snaps):
    return [s for s in snaps if s.count_method is CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN]


def _tokens(snap) -> dict[str, int]:
    return {item.category.value: item.tokens for item in snap.breakdown if item.tokens}


@pytest.mark.parametrize("how", ["instrument", "wrap"])
def test_generate_content_answers_as_before_and_reconciles_to_the_servers_usage(runtime, provider, restored, how):  # noqa: F811
    plain = _client(provider)  # held: a google-genai client closes its connection when collected
    bare = plain.models.generate_content(model=MODEL, contents="Where is parcel 7?")
    client = _client(provider)
    observed = cw.wrap(client) if how == "wrap" else client
    if how == "instrument":
        cw.instrument()
    with cw.stage("genai", how):
        answer = observed.models.generate_content(model=MODEL, contents="Where is parcel 7?")
    assert answer.model_dump(exclude={"sdk_http_response"}) == bare.model_dump(exclude={"sdk_http_response"})
    snaps = _stage("genai")
    assert snaps[0].count_method is CountMethod.LOCAL_ESTIMATE and snaps[0].provider == "gemini"
    final = _final(snaps)
    assert [s.input_tokens for s in final] == [_served(provider)]
    assert sum(_tokens(final[0]).values()) == _served(provider)
    assert final[0].model == MODEL and final[0].context_window_tokens
    if how == "wrap":  # the original client is left as it was
        client.models.generate_content(model=MODEL, contents="again")
        assert len(_stage("genai")) == len(snaps)


def test_a_stream_yields_the_same_chunks_and_reconciles_on_its_last(runtime, provider, restored):  # noqa: F811
    client = _client(provider)
    bare = [c.text for c in client.models.generate_content_stream(model=MODEL, contents="hi")]
    cw.instrument()
    with cw.stage("genai-stream", "s@1"):
        got = [c.text for c in client.models.generate_content_stream(model=MODEL, contents="hi")]
    assert got == bare and len(got) > 1
    assert [s.input_tokens for s in _final(_stage("genai-stream"))] == [_served(provider)]


async def test_the_async_client_and_its_stream(runtime, provider, restored):  # noqa: F811
    client = _client(provider)
    bare = (await client.aio.models.generate_content(model=MODEL, contents="hi")).text
    observed = cw.wrap(client)
    with cw.stage("genai-async", "s@1"):
        assert (await observed.aio.models.generate_content(model=MODEL, contents="hi")).text == bare
        chunks = [c.text async for c in await observed.aio.models.generate_content_stream(model=MODEL, contents="hi")]
    assert "".join(chunks) == bare
    assert [s.input_tokens for s in _final(_stage("genai-async"))] == [_served(provider)] * 2


def test_a_chat_sends_through_the_observed_models(runtime, provider, restored):  # noqa: F811
    cw.instrument()
    client = _client(provider)
    chat = client.chats.create(model=MODEL)
    with cw.stage("genai-chat", "s@1"):
        chat.send_message("first")
        chat.send_message("second")
    final = _final(_stage("genai-chat"))
    assert len(final) == 2
    second = [s for s in _stage("genai-chat") if s.count_method is CountMethod.LOCAL_ESTIMATE][1]
    assert _tokens(second)["conversation"] > 0  # the history (first turn, its answer, the second) is conversation


def test_tags_on_native_shapes_count_where_they_say_and_never_reach_the_server(runtime, provider, restored):  # noqa: F811
    cw.instrument()
    memory = cw.message("user", "The parcel depot closes at 18:00 on weekdays.", category="memory", source="notes.md")
    segment = cw.segment("Skill: answer in one short sentence.", "skills", "skill:brief")
    config = {
        "system_instruction": "You track parcels.",
        "tools": [cw.tool(LOOKUP, cw.ToolSource.mcp("parcels")), {"function_declarations": [dict(LOOKUP, name="other_tool")]}],
    }
    contents = [memory, {"role": "user", "parts": [segment, {"text": "Where is parcel 7?"}]}]
    client = _client(provider)
    with cw.stage("genai-tags", "s@1"):
        client.models.generate_content(model=MODEL, contents=contents, config=config)
    local = _stage("genai-tags")[0]
    tokens = _tokens(local)
    assert {"system_prompt", "memory", "skills", "conversation", "mcp_tools", "tools"} <= set(tokens)
    assert any(d.source == "notes.md" for d in local.details) and any(d.source == "mcp:parcels" for d in local.details)
    sent = provider.hits(GENERATE)[-1].body
    assert "cw_tag" not in json.dumps(sent)
    assert sent["contents"][0] == {"role": "user", "parts": [{"text": memory["content"]}]}
    assert [d["name"] for t in sent["tools"] for d in t["functionDeclarations"]] == ["lookup_parcel", "other_tool"]


def test_a_function_call_then_its_answer_is_two_reconciled_calls_with_the_tool_counted(runtime, provider, restored):  # noqa: F811
    provider[GENERATE].answer_tools = True
    cw.instrument()
    client = _client(provider)
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[types.FunctionDeclaration(**LOOKUP)])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    question = types.Content(role="user", parts=[types.Part(text="Where is parcel 7?")])
    with cw.stage("genai-tools", "s@1"):
        first = client.models.generate_content(model=MODEL, contents=[question], config=config)
        call = first.candidates[0].content
        answer = types.Content(
            role="user", parts=[types.Part.from_function_response(name="lookup_parcel", response={"where": "depot"})]
        )
        client.models.generate_content(model=MODEL, contents=[question, call, answer], config=config)
    final = _final(_stage("genai-tools"))
    assert [s.input_tokens for s in final] == [_served(provider)] * 2
    rows = {row.name: row for row in final[-1].tools}
    assert rows["lookup_parcel"].invocations >= 1 and rows["lookup_parcel"].result_tokens > 0


@pytest.mark.parametrize("status", [400, 500])
def test_errors_are_the_clients_own_and_never_exported(runtime, provider, restored, telemetry, status):  # noqa: F811
    provider[GENERATE].status = status
    client = _client(provider)
    with pytest.raises(genai.errors.APIError) as bare:
        client.models.generate_content(model=MODEL, contents="hi")
    cw.instrument()
    with pytest.raises(type(bare.value)) as observed, cw.stage("genai-errors", str(status)):
        client.models.generate_content(model=MODEL, contents="hi")
    assert observed.value.code == bare.value.code == status
    assert _stage("genai-errors")  # the call has its snapshot
    exported = json.dumps([dict(s.attributes or {}) for s in telemetry.spans.get_finished_spans()], default=str)
    assert CANARY not in exported


def test_the_provider_count_goes_to_gemini_count_tokens_with_the_clean_native_request(runtime, provider, restored):  # noqa: F811
    cw.instrument()
    memory = cw.message("user", "The depot closes at 18:00.", category="memory", source="notes.md")
    client = _client(provider)
    with cw.stage("genai-count", "s@1"):
        client.models.generate_content(model=MODEL, contents=[memory, "Where is parcel 7?"], cw_provider_count="always")
    (count,) = provider.wait_for_hits(GEMINI, 1)
    assert count.headers["x-goog-api-key"] == "gm-test"
    request = count.body["generateContentRequest"]
    assert "cw_tag" not in json.dumps(request)
    assert request["contents"][0]["parts"] == [{"text": memory["content"]}]
    cw.flush()
    counted = [s for s in _stage("genai-count") if s.count_method is CountMethod.PROVIDER_API_SCALED_BREAKDOWN]
    assert counted and counted[-1].input_tokens == provider[GEMINI].tokens
