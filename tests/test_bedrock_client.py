"""Amazon Bedrock Runtime through ``boto3``, observed: ``converse`` and ``converse_stream``, by instrument() and wrap().

The real boto3 from PyPI (the ``bedrock`` extra), SigV4-signing its requests, against the local server's
Converse routes (tests/providers.py: JSON, and the AWS event stream's binary frames for a stream).
Every expected answer is what the same client returns without observation; every expected number is
the server's ``usage`` (``inputTokens`` + ``cacheReadInputTokens`` + ``cacheWriteInputTokens``).
"""

from __future__ import annotations

import json

import pytest

boto3 = pytest.importorskip("boto3")
import botocore.client  # noqa: E402
from providers import CANARY, CONVERSE, provider  # noqa: E402, F401 - the fixture

import cw_middleware as cw  # noqa: E402
from cw_middleware._kernel.contract import CountMethod, WarningCode  # noqa: E402

CLAUDE = "anthropic.claude-3-5-sonnet-20240620-v1:0"
NOVA = "amazon.nova-lite-v1:0"
QUESTION = [{"role": "user", "content": [{"text": "Where is parcel 7?"}]}]
LOOKUP = {
    "toolSpec": {
        "name": "lookup_parcel",
        "description": "Where a parcel is now.",
        "inputSchema": {"json": {"type": "object", "properties": {"parcel_id": {"type": "string"}}}},
    }
}


@pytest.fixture
def restored():
    before = botocore.client.BaseClient.__dict__["_make_api_call"]
    yield
    cw.uninstrument()
    assert botocore.client.BaseClient.__dict__["_make_api_call"] is before, "uninstrument() left its shell"


def _client(provider):  # noqa: F811
    return boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=provider.url,
        aws_access_key_id="AKIDLOCALTEST",
        aws_secret_access_key="local-secret",
    )


def _served(provider) -> int:  # noqa: F811
    route = provider[CONVERSE]
    return route.tokens + route.cached_tokens + route.cache_write_tokens


def _stage(run: str) -> list:
    return [s for s in cw.snapshots() if s.run_id == run]


def _final(snaps):
    return [s for s in snaps if s.count_method is CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN]


def _tokens(snap) -> dict[str, int]:
    return {item.category.value: item.tokens for item in snap.breakdown if item.tokens}


def _same(answer: dict) -> dict:
    return {k: v for k, v in answer.items() if k != "ResponseMetadata"}


@pytest.mark.parametrize("how", ["instrument", "wrap"])
def test_converse_answers_as_before_and_reconciles_to_the_servers_usage(runtime, provider, restored, how):  # noqa: F811
    client = _client(provider)
    bare = client.converse(modelId=CLAUDE, messages=QUESTION)
    observed = cw.wrap(client) if how == "wrap" else client
    if how == "instrument":
        cw.instrument()
    with cw.stage("bedrock", how):
        answer = observed.converse(modelId=CLAUDE, messages=QUESTION)
    assert _same(answer) == _same(bare)
    snaps = _stage("bedrock")
    assert snaps[0].count_method is CountMethod.LOCAL_ESTIMATE and snaps[0].provider == "bedrock"
    final = _final(snaps)
    assert [s.input_tokens for s in final] == [_served(provider)]
    assert sum(_tokens(final[0]).values()) == _served(provider) and final[0].context_window_tokens
    if how == "wrap":  # the original client is left as it was
        client.converse(modelId=CLAUDE, messages=QUESTION)
        assert len(_stage("bedrock")) == len(snaps)


def test_a_stream_yields_the_same_events_and_reconciles_on_its_metadata(runtime, provider, restored):  # noqa: F811
    client = _client(provider)
    bare = list(client.converse_stream(modelId=CLAUDE, messages=QUESTION)["stream"])
    cw.instrument()
    with cw.stage("bedrock-stream", "s@1"):
        response = client.converse_stream(modelId=CLAUDE, messages=QUESTION)
        stream = response["stream"]
        got = list(stream)
    assert got == bare and type(response["stream"]).__name__ == "EventStream" and response["stream"] is stream
    assert [s.input_tokens for s in _final(_stage("bedrock-stream"))] == [_served(provider)]


def test_other_operations_and_other_services_go_straight_through(runtime, provider, restored):  # noqa: F811
    cw.instrument()
    client = _client(provider)
    with cw.stage("bedrock-other", "s@1"), pytest.raises(botocore.exceptions.ClientError):
        client.apply_guardrail(guardrailIdentifier="g", guardrailVersion="1", source="INPUT", content=[])
    assert _stage("bedrock-other") == []


def test_tags_count_where_they_say_and_never_reach_botocore(runtime, provider, restored):  # noqa: F811
    cw.instrument()
    memory = cw.message("user", "The parcel depot closes at 18:00 on weekdays.", category="memory", source="notes.md")
    skill = cw.segment("Skill: answer in one short sentence.", "skills", "skill:brief")
    messages = [memory, {"role": "user", "content": [skill, {"text": "Where is parcel 7?"}]}]
    tools = {"tools": [cw.tool(LOOKUP, cw.ToolSource.mcp("parcels")), {"toolSpec": dict(LOOKUP["toolSpec"], name="other")}]}
    system = [{"text": "You track parcels."}, {"cachePoint": {"type": "default"}}]
    client = _client(provider)
    with cw.stage("bedrock-tags", "s@1"):
        client.converse(modelId=CLAUDE, system=system, messages=messages, toolConfig=tools)
    local = _stage("bedrock-tags")[0]
    assert {"system_prompt", "memory", "skills", "conversation", "mcp_tools", "tools"} <= set(_tokens(local))
    assert any(d.source == "mcp:parcels" for d in local.details) and any(d.source == "skill:brief" for d in local.details)
    sent = provider.hits(CONVERSE)[-1].body
    assert "cw_tag" not in json.dumps(sent)
    assert sent["messages"][0] == {"role": "user", "content": [{"text": memory["content"]}]}
    assert sent["messages"][1]["content"][0] == {"text": skill["text"]}
    final = _final(_stage("bedrock-tags"))[0]
    route = provider[CONVERSE]
    # The cache point after the system prompt: what precedes it (tools, then system) is what the cache read and wrote.
    prefix = sum(v for k, v in _tokens(final).items() if k in ("tools", "mcp_tools", "system_prompt"))
    assert prefix == route.cached_tokens + route.cache_write_tokens


def test_a_tool_call_then_its_result_is_two_reconciled_calls_with_the_tool_counted(runtime, provider, restored):  # noqa: F811
    provider[CONVERSE].answer_tools = True
    cw.instrument()
    client = _client(provider)
    with cw.stage("bedrock-tools", "s@1"):
        first = client.converse(modelId=CLAUDE, messages=QUESTION, toolConfig={"tools": [LOOKUP]})
        use = first["output"]["message"]["content"][0]["toolUse"]
        result = {"toolResult": {"toolUseId": use["toolUseId"], "content": [{"json": {"where": "depot"}}]}}
        history = [*QUESTION, first["output"]["message"], {"role": "user", "content": [result]}]
        client.converse(modelId=CLAUDE, messages=history, toolConfig={"tools": [LOOKUP]})
    final = _final(_stage("bedrock-tools"))
    assert [s.input_tokens for s in final] == [_served(provider)] * 2
    row = {r.name: r for r in final[-1].tools}["lookup_parcel"]
    assert row.invocations >= 1 and row.result_tokens > 0


def test_a_family_without_rules_gets_an_honest_estimate_that_says_so(runtime, provider, restored):  # noqa: F811
    cw.instrument()
    client = _client(provider)
    with cw.stage("bedrock-nova", "s@1"):
        client.converse(modelId=NOVA, messages=QUESTION)
    local = _stage("bedrock-nova")[0]
    assert WarningCode.APPROXIMATE_TOKENIZER.value in local.warning_codes() and local.input_tokens > 0
    assert [s.input_tokens for s in _final(_stage("bedrock-nova"))] == [_served(provider)]


@pytest.mark.parametrize("status", [400, 500])
def test_errors_are_botocores_own_and_never_exported(runtime, provider, restored, telemetry, status):  # noqa: F811
    provider[CONVERSE].status = status
    client = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=provider.url,
        aws_access_key_id="AKIDLOCALTEST",
        aws_secret_access_key="local-secret",
        config=botocore.client.Config(retries={"max_attempts": 1}),
    )
    with pytest.raises(botocore.exceptions.ClientError) as bare:
        client.converse(modelId=CLAUDE, messages=QUESTION)
    cw.instrument()
    with pytest.raises(botocore.exceptions.ClientError) as observed, cw.stage("bedrock-errors", str(status)):
        client.converse(modelId=CLAUDE, messages=QUESTION)
    assert (
        observed.value.response["ResponseMetadata"]["HTTPStatusCode"] == bare.value.response["ResponseMetadata"]["HTTPStatusCode"]
    )
    assert _stage("bedrock-errors")
    exported = json.dumps([dict(s.attributes or {}) for s in telemetry.spans.get_finished_spans()], default=str)
    assert CANARY not in exported
