"""The Anthropic Messages adapter reads a native request as the chat request LiteLLM's caller writes for it.

Each case is one request written twice, natively and OpenAI-style (as the accuracy scorer converts a
recorded Anthropic request, the form the Anthropic rules were calibrated on); the estimates must be
equal, part for part. No client and no server: the adapter and the estimator only.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import cw_middleware as cw
from cw_middleware._capture.apis import MESSAGES
from cw_middleware._counting.estimator import Estimator

MODEL = "claude-sonnet-4-5"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def _native(request: dict) -> dict:
    parsed = MESSAGES.parse((), {"model": MODEL, **request})
    parsed = replace(parsed, options={**parsed.options, "custom_llm_provider": "anthropic"})
    estimate = Estimator().estimate(parsed.model, parsed.messages, api=parsed.api, **parsed.options)
    return {(k[0].value, k[1]): v for k, v in estimate.by_source.items()}


def _chat(messages: list, **options) -> dict:
    estimate = Estimator().estimate(f"anthropic/{MODEL}", messages, **options)
    return {(k[0].value, k[1]): v for k, v in estimate.by_source.items()}


CASES = {
    "text blocks of a turn are one text": (
        {"system": [{"type": "text", "text": "Be terse."}, {"type": "text", "text": "Cite sources."}],
         "messages": [{"role": "user", "content": [{"type": "text", "text": "One."}, {"type": "text", "text": "Two."}]}]},
        ([{"role": "system", "content": "Be terse.\nCite sources."}, {"role": "user", "content": "One.\nTwo."}], {}),
    ),
    "tool use, then its results and a question": (
        {"messages": [
            {"role": "user", "content": "Weather in Lyon and Nice?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Lyon"}},
                {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {"city": "Nice"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "Rain."}]},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "Sun."},
                {"type": "text", "text": "Which is warmer?"},
            ]},
        ], "tools": [{"name": "weather", "description": "Weather now.", "input_schema": SCHEMA, "strict": True}],
           "tool_choice": {"type": "any"}},
        ([
            {"role": "user", "content": "Weather in Lyon and Nice?"},
            {"role": "assistant", "content": "Looking.", "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Lyon"}'}},
                {"id": "toolu_2", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Nice"}'}},
            ]},
            {"role": "tool", "tool_call_id": "toolu_1", "content": "Rain."},
            {"role": "tool", "tool_call_id": "toolu_2", "content": "Sun."},
            {"role": "user", "content": "Which is warmer?"},
        ], {"tools": [{"type": "function", "function": {"name": "weather", "parameters": SCHEMA, "description": "Weather now."}}],
            "tool_choice": "required"}),
    ),
    "structured output and thinking": (
        {"messages": [{"role": "user", "content": "City?"}], "output_format": {"type": "json_schema", "schema": SCHEMA},
         "thinking": {"type": "enabled", "budget_tokens": 2048}},
        ([{"role": "user", "content": "City?"}],
         {"response_format": {"type": "json_schema", "json_schema": {"name": "response", "schema": SCHEMA}},
          "thinking": {"type": "enabled", "budget_tokens": 2048}}),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_native_request_counts_as_its_chat_form(case):
    native, (messages, options) = CASES[case]
    assert _native(native) == _chat(messages, **options)


def test_a_tagged_block_keeps_its_own_count():
    request = {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi."}, cw.segment("Notes.", "memory", "n")]}]}
    counted = _native(request)
    assert counted[("memory", "n")] > 0 and counted[("conversation", "user")] > 0


def test_server_tools_are_left_out_with_a_warning_and_their_results_count_as_text():
    request = {
        "messages": [
            {"role": "user", "content": "Search."},
            {"role": "assistant", "content": [
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}},
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [{"title": "A page"}]},
            ]},
        ],
        "tools": [{"type": "web_search_20250305", "name": "web_search"}],
    }  # fmt: skip
    parsed = MESSAGES.parse((), {"model": MODEL, **request})
    assert parsed.options["tools"] == [] and "provider_tool_not_estimated" in {w.value for w in parsed.warnings}
    assert _native(request)[("conversation", "assistant")] > 0
