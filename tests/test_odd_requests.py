"""Request shapes LiteLLM accepts but the counting rules cannot read: each costs only its own accuracy.

Issue 11: `cw.estimate` raised AttributeError/TypeError for ``tool_calls=[{"function": "x"}]`` or a
list/dict role, and `cw.completion` then published no estimate at all. Now such a message counts as
far as it can be read, with the warning ``unreadable_message``, and every other message keeps its
count; only a bad tag (the caller's mistake) raises. Labels the middleware derives from the request
(an unknown role, an ``mcp__server__tool`` name) are capped and sanitised before they are exported;
``cw_context_window`` is bounded so the exporter never meets an int it cannot encode.
"""

from __future__ import annotations

import json
import logging

import litellm
import pytest
from providers import CHAT, provider  # noqa: F401 - the fixture

import cw_middleware as cw
from cw_middleware._kernel.errors import ConfigError, TagError

SYSTEM = {"role": "system", "content": "You are a careful coding agent. " * 20}
USER = {"role": "user", "content": "Fix the failing test, please. " * 10}

ODD_MESSAGES = [
    {"role": "assistant", "content": None, "tool_calls": [{"function": "x"}]},
    {"role": ["user"], "content": "hi"},
    {"role": {"name": "user"}, "content": "hi"},
    {"role": "user", "content": {"text": "a dict, not a list"}},
    {"role": "user", "content": [{"type": "text", "text": 5}]},
    {"role": "user", "content": [5]},
    {"role": "assistant", "tool_calls": "not a list"},
    {"role": "assistant", "function_call": "x"},
]


@pytest.mark.parametrize("odd", ODD_MESSAGES, ids=range(len(ODD_MESSAGES)))
def test_an_odd_message_costs_only_its_own_count(runtime, odd):
    plain = cw.estimate(model="gpt-4o", messages=[SYSTEM, USER])
    with_odd = cw.estimate(model="gpt-4o", messages=[SYSTEM, odd, USER])
    assert "unreadable_message" in with_odd.warning_codes()
    assert "unreadable_message" not in plain.warning_codes()
    # The readable messages keep every token; the odd one adds its framing, at most a little text.
    assert with_odd.tokens("system_prompt") == plain.tokens("system_prompt") > 0
    assert plain.tokens("conversation") < with_odd.tokens("conversation") <= plain.tokens("conversation") + 12
    assert sum(b.tokens for b in with_odd.breakdown) == with_odd.input_tokens


@pytest.mark.parametrize("odd", ODD_MESSAGES, ids=range(len(ODD_MESSAGES)))
def test_a_call_with_an_odd_message_publishes_the_rest_of_its_breakdown(runtime, odd):
    bare = litellm.completion(model="gpt-4o", messages=[SYSTEM, odd, USER], mock_response="ok")
    resp = cw.completion(model="gpt-4o", messages=[SYSTEM, odd, USER], mock_response="ok")
    assert resp.choices[0].message.content == bare.choices[0].message.content
    snap = cw.snapshots()[-1]
    assert snap.input_tokens > 0 and snap.tokens("system_prompt") > 0
    assert "unreadable_message" in snap.warning_codes() and "estimate_failed" not in snap.warning_codes()


def test_odd_tools_and_schemas_cost_only_their_own_count(runtime):
    good = {"type": "function", "function": {"name": "run_tests", "description": "Run the suite."}}
    plain = cw.estimate(model="gpt-4o", messages=[USER], tools=[good])
    odd = cw.estimate(model="gpt-4o", messages=[USER], tools=[good, {"type": "function", "function": {"name": {"x": 1}}}])
    assert odd.tokens("tools") >= plain.tokens("tools") > 0
    schema = {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object", "x": {1, 2}}}}
    with_schema = cw.estimate(model="gpt-4o", messages=[USER], response_format=schema)
    assert "unreadable_message" in with_schema.warning_codes()
    assert with_schema.tokens("conversation") == plain.tokens("conversation")


def test_a_bad_tag_is_still_the_callers_mistake(runtime):
    tagged = {"role": "user", "content": [{"type": "text", "text": "x", "cw_tag": "memory"}]}
    with pytest.raises(TagError):
        cw.estimate(model="gpt-4o", messages=[tagged])
    odd_but_tagged = {"role": ["user"], "content": "x", "cw_tag": {"category": "nonsense"}}
    with pytest.raises(TagError):
        cw.estimate(model="gpt-4o", messages=[odd_but_tagged])


def test_a_tagged_odd_message_keeps_its_category_and_loses_its_tag_before_the_provider(runtime, monkeypatch):
    sent = []
    original = litellm.completion

    def spy(*args, **kwargs):
        sent.append(json.dumps(kwargs["messages"], default=str))
        return original(*args, **kwargs)

    monkeypatch.setattr("cw_middleware._capture.wrapper.original", lambda name: spy)
    odd = {"role": ["user"], "content": "remember this " * 20, "cw_tag": {"category": "memory", "source": "notes"}}
    cw.completion(model="gpt-4o", messages=[SYSTEM, odd], mock_response="ok")
    snap = cw.snapshots()[-1]
    assert snap.tokens("memory") > 0 and "unreadable_message" in snap.warning_codes()
    assert sent and "cw_tag" not in sent[0]


# ---------------------------------------------------------------- derived labels


def _sources(snap: cw.Snapshot) -> set[str]:
    return {d.source for d in snap.details}


def test_unknown_roles_are_exported_only_when_they_read_as_a_role_name(runtime):
    canary = "CANARY-role-text that is really a prompt\n" * 10
    snap = cw.estimate(model="gpt-4o", messages=[{"role": canary, "content": "x"}, {"role": "critic", "content": "y"}])
    assert "critic" in _sources(snap)
    assert "unknown_role" in _sources(snap)
    assert not any("CANARY" in s for s in _sources(snap))


def test_mcp_server_labels_from_tool_names_are_capped_and_sanitised(runtime):
    long_server = "s" * 500
    tools = [
        {"type": "function", "function": {"name": f"mcp__{long_server}__search"}},
        {"type": "function", "function": {"name": "mcp__git hub\n<x>__read"}},
        {"type": "function", "function": {"name": "mcp__github__read"}},
    ]
    sources = _sources(cw.estimate(model="gpt-4o", messages=[USER], tools=tools))
    assert "mcp:github" in sources
    assert f"mcp:{'s' * 64}" in sources
    assert "mcp:git_hub__x_" in sources
    assert all(len(s) <= 68 for s in sources)


# ---------------------------------------------------------------- the context window's range


@pytest.mark.parametrize("value", [2**64, 2**63, 2**31, "99999999999", "²"])
def test_a_window_beyond_the_range_is_refused_with_the_warning(runtime, value):
    snap = cw.estimate(model="gpt-4o", messages=[USER], cw_context_window=value)
    assert "invalid_context_window" in snap.warning_codes()
    assert snap.context_window_tokens == litellm.get_model_info("gpt-4o")["max_input_tokens"]


def test_the_largest_window_accepted_is_exported_without_an_sdk_error(tmp_path, caplog):
    from embedded_helpers import embedded_runtime

    path = tmp_path / "t.jsonl"
    with caplog.at_level(logging.WARNING), embedded_runtime(export=f"file:{path}"):
        cw.completion(model="gpt-4o", messages=[USER], mock_response="ok", cw_context_window=2**31 - 1)
        cw.completion(model="gpt-4o", messages=[USER], mock_response="ok", cw_context_window=2**64)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    lines = path.read_text()
    assert str(2**31 - 1) in lines and str(2**64) not in lines


def test_configured_windows_are_bounded_too():
    from cw_middleware._kernel.config import resolve

    assert resolve(environ={}, context_windows={"m": 2**31 - 1}).context_windows["m"] == 2**31 - 1
    with pytest.raises(ConfigError, match="2147483647"):
        resolve(environ={}, context_windows={"m": 2**64})


def _nested_schema(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"inner": schema}}
    return schema


def test_a_call_whose_estimate_fails_still_has_its_span_and_snapshots_with_the_providers_total(runtime, provider, telemetry):  # noqa: F811
    """Issue 36 item 6: a tool schema nested past Python's recursion limit sends fine, but the estimate cannot read
    it. The call still has its span and its snapshots, saying ``estimate_failed``, reconciled to the response's usage."""
    tool = {"type": "function", "function": {"name": "deep", "description": "d", "parameters": _nested_schema(400)}}
    with cw.stage("odd", "deep@1"):
        reply = cw.completion(
            model="openai/gpt-4o",
            messages=[{"role": "user", "content": "hi"}],
            tools=[tool],
            api_base=f"{provider.url}/v1",
            api_key="sk-test",
        )
    assert reply.choices[0].message.content == provider[CHAT].reply
    snaps = [s for s in cw.snapshots() if s.stage_id == "deep@1"]
    assert [s.count_method.value for s in snaps] == ["local_estimate", "response_usage_scaled_breakdown"]
    assert all("estimate_failed" in s.warning_codes() for s in snaps)
    assert snaps[-1].input_tokens == provider[CHAT].tokens
    assert sum(item.tokens for item in snaps[-1].breakdown) == provider[CHAT].tokens
    spans = [s for s in telemetry.spans.get_finished_spans() if s.attributes.get("agent.stage.id") == "deep@1"]
    assert any(s.attributes.get("gen_ai.operation.name") == "chat" for s in spans)


def test_a_circular_schema_mocked_call_gets_its_snapshot_too(runtime):
    schema: dict = {"type": "object", "properties": {}}
    schema["properties"]["self"] = schema  # a circular schema: no JSON of it exists
    tool = {"type": "function", "function": {"name": "loop", "parameters": schema}}
    with cw.stage("odd", "circular@1"):
        reply = cw.completion(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], tools=[tool], mock_response="ok")
    assert reply.choices[0].message.content == "ok"
    snaps = [s for s in cw.snapshots() if s.stage_id == "circular@1"]
    assert snaps and all("estimate_failed" in s.warning_codes() for s in snaps)
