"""Differential property test: random LiteLLM-shaped requests through cw and through bare LiteLLM.

For every request (well-formed or odd: roles that are lists, tool calls whose function is a string,
content parts without text, tools without names, streams), with ``mock_response``:

* `cw.completion` ends the way `litellm.completion` ends: the same reply (chunk for chunk for a
  stream) or the same exception type;
* every snapshot it publishes has non-negative categories that sum to ``input_tokens``;
* `cw.estimate` never raises (a bad tag is the only caller mistake, and none is generated here).

Cost: ``CW_FUZZ_EXAMPLES`` examples (default 120, ~10 s), with no per-example deadline (a loaded
machine made the first one flaky); no example database is written.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import litellm
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cw_middleware as cw

EXAMPLES = int(os.environ.get("CW_FUZZ_EXAMPLES", "120"))
MODELS = ["gpt-4o", "gpt-4", "openai/gpt-4o-mini", "claude-sonnet-4-5", "gemini/gemini-1.5-pro", "o3-mini"]

text = st.text(min_size=0, max_size=40)
odd_value = st.one_of(st.none(), st.integers(-5, 5), st.lists(text, max_size=2), st.dictionaries(text, text, max_size=2))
role = st.one_of(
    st.sampled_from(["system", "developer", "user", "assistant", "tool", "function"]),
    st.sampled_from(["critic", "", "a b c", "x" * 100]),
    odd_value,
)
part = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": text}),
    st.fixed_dictionaries(
        {"type": st.just("image_url"), "image_url": st.fixed_dictionaries({"url": st.just("data:image/png;base64,AAAA")})}
    ),
    st.fixed_dictionaries({"type": st.just("text"), "text": odd_value}),
    text,
    odd_value,
)
function = st.one_of(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["search", "mcp__github__read", "mcp__"]), "arguments": st.one_of(text, odd_value)}
    ),
    text,
    odd_value,
)
tool_call = st.one_of(
    st.fixed_dictionaries({"id": text, "type": st.just("function"), "function": function}),
    st.fixed_dictionaries({"function": function}),
    odd_value,
)
message = st.fixed_dictionaries(
    {"role": role},
    optional={
        "content": st.one_of(text, st.none(), st.lists(part, max_size=3), odd_value),
        "name": st.one_of(text, odd_value),
        "tool_calls": st.one_of(st.lists(tool_call, max_size=2), odd_value),
        "tool_call_id": text,
        "function_call": function,
    },
)
schema = st.one_of(
    st.fixed_dictionaries(
        {"type": st.just("object"), "properties": st.dictionaries(st.sampled_from(["q", "n"]), st.just({"type": "string"}))}
    ),
    odd_value,
)
tool = st.one_of(
    st.fixed_dictionaries(
        {
            "type": st.just("function"),
            "function": st.fixed_dictionaries(
                {"name": st.sampled_from(["search", "mcp__github__read", "mcp__" + "s" * 80 + "__x", "run tests"])},
                optional={"description": text, "parameters": schema},
            ),
        }
    ),
    st.fixed_dictionaries({"type": st.just("function"), "function": odd_value}),
    odd_value,
)
request = st.fixed_dictionaries(
    {"model": st.sampled_from(MODELS), "messages": st.lists(message, min_size=1, max_size=5)},
    optional={
        "tools": st.lists(tool, max_size=3),
        "tool_choice": st.one_of(st.sampled_from(["auto", "none", "required"]), odd_value),
        "response_format": st.one_of(
            st.just({"type": "json_object"}),
            st.fixed_dictionaries(
                {"type": st.just("json_schema"), "json_schema": st.fixed_dictionaries({"name": st.just("r"), "schema": schema})}
            ),
            odd_value,
        ),
        "stream": st.booleans(),
        "temperature": st.floats(0, 1),
    },
)


def _outcome(fn: Any, req: dict[str, Any]) -> tuple[str, Any]:
    """How a call ends: ("ok", the reply's text or the stream's chunk texts) or ("raise", the exception type)."""
    try:
        resp = fn(**copy.deepcopy(req), mock_response="Done.")
        if req.get("stream"):
            return "ok", [tuple((c.delta.content, c.finish_reason) for c in chunk.choices) for chunk in resp]
        return "ok", (type(resp).__name__, [(c.message.content, c.finish_reason) for c in resp.choices])
    except Exception as exc:  # noqa: BLE001 - the outcome under comparison
        return "raise", type(exc).__name__


@settings(
    max_examples=EXAMPLES,
    deadline=None,  # a hang is caught by the suite timeout; a busy CI machine must not make an example "flaky"
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
@given(req=request)
def test_cw_ends_every_request_the_way_litellm_does(runtime, req):
    bare = _outcome(litellm.completion, req)
    before = len(cw.snapshots())
    ours = _outcome(cw.completion, req)
    assert ours == bare
    for snap in cw.snapshots()[before:]:
        assert all(b.tokens >= 0 for b in snap.breakdown)
        assert sum(b.tokens for b in snap.breakdown) == snap.input_tokens
        assert "estimate_failed" not in snap.warning_codes()
    estimated = cw.estimate(**copy.deepcopy({k: v for k, v in req.items() if k != "stream"}))
    assert all(b.tokens >= 0 for b in estimated.breakdown)
    assert sum(b.tokens for b in estimated.breakdown) == estimated.input_tokens
    assert "estimate_failed" not in estimated.warning_codes()


@pytest.mark.parametrize("bad_tag", ["memory", {"source": "x"}, {"category": "nonsense"}, {"category": 3}])
def test_estimate_raises_only_for_a_bad_tag(runtime, bad_tag):
    with pytest.raises(cw.TagError):
        cw.estimate(model="gpt-4o", messages=[{"role": "user", "content": "x", "cw_tag": bad_tag}])
