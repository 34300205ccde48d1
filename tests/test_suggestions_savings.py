"""Suggestions with savings (issue 39): content sent twice, a prefix the provider's cache did not serve, a run's sum.

Real LiteLLM calls (mocked, or to the local Anthropic stand-in reporting chosen usage) exported to a file and
read back. Expected tokens are the tokenizer's own count of the duplicated text (o200k_base for gpt-4o, the
estimator's), and expected money LiteLLM's own prices (``litellm.model_cost``).
"""

from __future__ import annotations

import litellm
import tiktoken
from embedded_helpers import embedded_runtime
from providers import MESSAGES as MESSAGES_API
from providers import provider  # noqa: F401 - the fixture

import cw_middleware as cw

CANARY = "CANARY-REPEATED-61d4"
# ~2,000 tokens of a tool result, the canary inside: its fingerprint may leave the process, never it.
RESULT = f"{CANARY} " + " ".join(f"line {i}: def handler_{i}(request): return respond(request, {i})" for i in range(110))
FILE = f"{CANARY} file " + " ".join(f"config_{i} = load('section {i}')" for i in range(60))
SYSTEM = "You are a coding agent. Follow the repository's conventions. " * 120  # a long, stable prefix


def _tokens(text: str) -> int:
    return len(tiktoken.get_encoding("o200k_base").encode(text))


def _call(i: str) -> dict:
    return {"id": i, "type": "function", "function": {"name": "read_file", "arguments": "{}"}}


def _answer(path, stage_id: str, requests: list[list[dict]]):
    with embedded_runtime(export=f"file:{path}") as runtime:
        with cw.stage("savings", stage_id):
            for messages in requests:
                cw.completion(model="gpt-4o", messages=messages, mock_response="ok")
        assert runtime.flush(10)
    return cw.reader(f"file:{path}").context_window("savings", stage_id)


def _of(answer, kind: str) -> list:
    return [s for s in answer.suggestions if s.kind.value == kind]


def test_a_tool_result_sent_twice_in_a_request_is_named_with_its_tokens(tmp_path):
    path = tmp_path / "t.jsonl"
    start = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "read it"}]
    once = [*start, {"role": "assistant", "content": None, "tool_calls": [_call("c1")]}]
    once.append({"role": "tool", "tool_call_id": "c1", "content": RESULT})
    twice = [*once, {"role": "assistant", "content": None, "tool_calls": [_call("c2")]}]
    twice.append({"role": "tool", "tool_call_id": "c2", "content": RESULT})
    answer = _answer(path, "tool@1", [once, twice])
    tokens = _tokens(RESULT)
    assert 1_500 < tokens < 2_600
    (repeated,) = _of(answer, "repeated_content")
    assert repeated.target == "message role tool"
    assert repeated.tokens_per_request == tokens and repeated.tokens_in_stage == tokens  # the first call had one copy
    (item,) = answer.repeated
    assert (item.copies, item.requests, len(item.fingerprint)) == (2, 1, 12)
    assert repeated.cost_in_stage == round(tokens * litellm.model_cost["gpt-4o"]["input_cost_per_token"], 10)
    assert "2 copies" in repeated.message and CANARY not in repeated.message
    exported = path.read_text()
    assert CANARY not in exported and RESULT[200:240] not in exported


def test_a_file_added_again_in_a_later_call_counts_in_each_request_that_repeats_it(tmp_path):
    path = tmp_path / "t.jsonl"
    first = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": FILE}]
    again = [{"type": "text", "text": "Here it is again:"}, {"type": "text", "text": FILE}]  # a segment of its own
    second = [*first, {"role": "assistant", "content": "Read."}, {"role": "user", "content": again}]
    third = [*second, {"role": "assistant", "content": "Still read."}, {"role": "user", "content": "next"}]
    answer = _answer(path, "file@1", [first, second, third])
    tokens = _tokens(FILE)
    (repeated,) = _of(answer, "repeated_content")
    # The second copy is a content part of a later user message: the saving is the file's own tokens.
    assert repeated.target == "message role user"
    assert repeated.tokens_per_request == tokens and repeated.tokens_in_stage == 2 * tokens  # calls 2 and 3
    # The same saving cw.estimate sees: the request without the copy is that many tokens (and a message) lighter.
    with_copy = cw.estimate(model="gpt-4o", messages=second).input_tokens
    without = cw.estimate(model="gpt-4o", messages=[*second[:3], {"role": "user", "content": again[:1]}])
    assert with_copy - without.input_tokens == tokens
    assert CANARY not in path.read_text()


def test_nothing_repeated_no_suggestion(tmp_path):
    path = tmp_path / "t.jsonl"
    first = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": FILE}]
    second = [*first, {"role": "assistant", "content": "Read."}, {"role": "user", "content": RESULT}]
    answer = _answer(path, "none@1", [first, second])  # history carried along is not a repeat
    assert not _of(answer, "repeated_content") and answer.repeated == []
    assert not _of(answer, "cache_miss")  # a mock reports no cached tokens: nothing to say


# ---------------------------------------------------------------- cache misses, on the Anthropic stand-in


def _anthropic_stage(path, stage_id: str, provider, cached: int):  # noqa: F811
    route = provider[MESSAGES_API]
    route.tokens, route.cache_write_tokens, route.cached_tokens = 3000 - cached, 0, cached
    history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "step 1"}]
    kwargs = {"max_tokens": 50, "api_base": provider.url, "api_key": "sk-ant-test", "cw_provider_count": "never"}
    with embedded_runtime(export=f"file:{path}") as runtime:
        with cw.stage("cache", stage_id):
            cw.completion(model="anthropic/claude-sonnet-4-5", messages=history, **kwargs)
            history += [{"role": "assistant", "content": "done"}, {"role": "user", "content": "step 2"}]
            cw.completion(model="anthropic/claude-sonnet-4-5", messages=history, **kwargs)
        assert runtime.flush(10)
    return cw.reader(f"file:{path}").context_window("cache", stage_id)


def test_a_repeated_prefix_the_cache_did_not_serve_is_priced_at_the_cached_discount(tmp_path, provider, monkeypatch):  # noqa: F811
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    answer = _anthropic_stage(tmp_path / "t.jsonl", "miss@1", provider, cached=0)
    (miss,) = _of(answer, "cache_miss")
    prices = litellm.model_cost["claude-sonnet-4-5"]
    discount = prices["input_cost_per_token"] - prices["cache_read_input_token_cost"]
    assert answer.cache_miss is not None and answer.cache_miss.calls == 1  # the first call had nothing to repeat
    assert miss.tokens_per_request == miss.tokens_in_stage == answer.cache_miss.prefix_tokens
    assert 1024 <= miss.tokens_in_stage < answer.input_tokens  # the system prompt and step 1, not step 2
    assert miss.cost_in_stage == round(miss.tokens_in_stage * discount, 10)
    assert miss.target == answer.model and "cache_control" in miss.message


def test_a_prefix_the_cache_served_is_no_miss(tmp_path, provider, monkeypatch):  # noqa: F811
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    answer = _anthropic_stage(tmp_path / "t.jsonl", "hit@1", provider, cached=2_800)
    assert answer.cached_tokens == 2_800
    assert not _of(answer, "cache_miss") and answer.cache_miss is None


# ---------------------------------------------------------------- a run sums its stages'

GITHUB = cw.ToolSource.mcp("github")
MCP_TOOLS = [
    cw.tool({"type": "function", "function": {"name": f"gh_{i}", "description": "GitHub API " * 30, "parameters": {}}}, GITHUB)
    for i in range(3)
]


def test_a_run_sums_its_stages_suggestions_per_kind_and_target(tmp_path, capsys):
    from cw_middleware._cli import main as cli

    path = tmp_path / "t.jsonl"
    with embedded_runtime(export=f"file:{path}") as runtime:
        for stage_id, calls in (("plan@1", 1), ("code@1", 2)):
            with cw.stage("summed", stage_id):
                for i in range(calls):
                    messages = [{"role": "user", "content": f"step {i}"}]
                    cw.completion(model="gpt-4o", messages=messages, tools=MCP_TOOLS, mock_response="ok")
        assert runtime.flush(10)
    reader = cw.reader(f"file:{path}")
    stages = [reader.context_window("summed", s) for s in ("plan@1", "code@1")]
    own = [next(s for s in a.suggestions if s.target == "mcp:github") for a in stages]
    report = reader.summary("summed")
    (summed,) = [s for s in report.suggestions if (s.kind.value, s.target) == ("unused_tools", "mcp:github")]
    assert summed.tokens_in_stage == sum(s.tokens_in_stage for s in own)
    assert summed.tokens_per_request == max(s.tokens_per_request for s in own)
    assert summed.cost_in_stage == round(sum(s.cost_in_stage for s in own), 10)
    assert "in 2 stages" in summed.message
    assert report.model_dump(mode="json")["suggestions"][0]["target"] == "mcp:github"
    assert cli.main(["summary", "summed", "--backend", f"file:{path}"]) == 0
    out = capsys.readouterr().out
    assert "Suggestions (largest saving first):" in out and summed.message in out
