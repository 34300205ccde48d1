"""Attribution rules and the incremental estimator."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import litellm
import tiktoken
from providers import provider  # noqa: F401 - the fixture

import cw_middleware as cw
import cw_middleware._counting.estimator as estimator_module
from cw_middleware._counting.estimator import Estimator
from cw_middleware._counting.rules import PromptAdditions
from cw_middleware._kernel.contract import Category, WarningCode

ENC = tiktoken.get_encoding("o200k_base")


def n(text: str) -> int:
    return len(ENC.encode_ordinary(text))


def fn_tool(name: str, description: str = "does a thing") -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }


def test_untagged_roles_follow_the_default_rules(runtime):
    base = [{"role": "user", "content": "hi"}]
    snap0 = cw.estimate(model="gpt-4o", messages=base)
    with_system = cw.estimate(model="gpt-4o", messages=[{"role": "system", "content": "Be terse and exact."}, *base])
    with_dev = cw.estimate(model="gpt-4o", messages=[{"role": "developer", "content": "Be terse and exact."}, *base])
    assert snap0.tokens("system_prompt") == 0 and snap0.tokens("conversation") > 0
    assert with_system.tokens("system_prompt") > n("Be terse and exact.")  # text plus its framing
    assert with_dev.tokens("system_prompt") == with_system.tokens("system_prompt")
    assert with_system.tokens("conversation") == snap0.tokens("conversation")
    assert snap0.tokens("other") > 0  # reply priming: owned by no message


def test_tagged_segments_go_to_their_category_whatever_the_role(runtime):
    memory = "- always run the tests before committing\n" * 20
    plain = cw.estimate(model="gpt-4o", messages=[cw.message("system", [cw.segment("You are an agent.", "system_prompt")])])
    tagged = cw.estimate(
        model="gpt-4o",
        messages=[
            cw.message("system", [cw.segment("You are an agent.", "system_prompt"), cw.segment(memory, "memory", "AGENTS.md")]),
        ],
    )
    assert tagged.tokens("memory") == n(memory)
    assert tagged.tokens("system_prompt") == plain.tokens("system_prompt")
    assert {(d.category, d.source) for d in tagged.details} >= {(Category.MEMORY, "AGENTS.md")}
    user_memory = cw.estimate(model="gpt-4o", messages=[cw.message("user", memory, category="memory", source="notes.md")])
    assert user_memory.tokens("conversation") == 0
    assert user_memory.tokens("memory") >= n(memory)


def test_activated_skill_in_a_tool_result_counts_as_skills(runtime):
    skill = "# Skill: pdf\nUse pdftotext; never guess from an image.\n" * 10
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "load_skill", "arguments": '{"name": "pdf"}'}}],
    }
    as_conversation = cw.estimate(model="gpt-4o", messages=[call, {"role": "tool", "tool_call_id": "c1", "content": skill}])
    as_skill = cw.estimate(
        model="gpt-4o", messages=[call, cw.message("tool", skill, category="skills", source="skill:pdf", tool_call_id="c1")]
    )
    assert as_skill.input_tokens == as_conversation.input_tokens  # same tokens, other bucket
    assert as_skill.tokens("skills") >= n(skill)
    assert as_conversation.tokens("conversation") - as_skill.tokens("conversation") == as_skill.tokens("skills")


def test_tools_are_attributed_by_source_and_guesses_are_flagged(runtime):
    msgs = [{"role": "user", "content": "hi"}]
    native = cw.estimate(model="gpt-4o", messages=msgs, tools=[fn_tool("search")])
    assert native.tokens("tools") > 0 and native.tokens("mcp_tools") == 0
    assert WarningCode.TOOL_SOURCE_INFERRED.value not in native.warning_codes()
    mcp = cw.estimate(
        model="gpt-4o", messages=msgs, tools=[fn_tool("search"), cw.tool(fn_tool("create_issue"), cw.ToolSource.mcp("github"))]
    )
    assert mcp.tokens("mcp_tools") > 0
    assert any(d.source == "mcp:github" for d in mcp.details)
    skill = cw.estimate(model="gpt-4o", messages=msgs, tools=[cw.tool(fn_tool("load"), cw.ToolSource.skill("loader"))])
    assert skill.tokens("skills") > 0
    guessed = cw.estimate(model="gpt-4o", messages=msgs, tools=[fn_tool("mcp__fs__read_file")])
    assert guessed.tokens("mcp_tools") > 0
    assert WarningCode.TOOL_SOURCE_INFERRED.value in guessed.warning_codes()


def test_images_are_never_estimated_from_their_bytes(runtime):
    small = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 10}}
    large = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 100_000}}
    a = cw.estimate(model="gpt-4o", messages=[{"role": "user", "content": [{"type": "text", "text": "look"}, small]}])
    b = cw.estimate(model="gpt-4o", messages=[{"role": "user", "content": [{"type": "text", "text": "look"}, large]}])
    assert a.input_tokens == b.input_tokens
    assert WarningCode.NON_TEXT_CONTENT_NOT_ESTIMATED.value in a.warning_codes()


def test_categories_always_sum_to_the_total(runtime):
    snap = cw.estimate(
        model="gpt-4o",
        messages=[
            cw.message("system", [cw.segment("sys", "system_prompt"), cw.segment("mem", "memory", "m")]),
            {"role": "user", "content": "question"},
        ],
        tools=[fn_tool("a"), cw.tool(fn_tool("b"), cw.ToolSource.mcp("s"))],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "r", "schema": {"type": "object", "properties": {"x": {"type": "string"}}}},
        },
    )
    assert sum(b.tokens for b in snap.breakdown) == snap.input_tokens
    assert [b.category for b in snap.breakdown] == list(Category)
    assert snap.context_window_tokens == 128000
    assert snap.usage_percent == round(100 * snap.input_tokens / 128000, 4)


def test_unknown_model_has_no_window_and_says_so(runtime):
    snap = cw.estimate(model="acme/frontier-9000", messages=[{"role": "user", "content": "hi"}])
    assert snap.context_window_tokens is None and snap.usage_percent is None
    assert WarningCode.UNKNOWN_CONTEXT_WINDOW.value in snap.warning_codes()
    assert WarningCode.APPROXIMATE_TOKENIZER.value in snap.warning_codes()
    override = cw.estimate(model="acme/frontier-9000", messages=[{"role": "user", "content": "hi"}], cw_context_window=1000)
    assert override.context_window_tokens == 1000
    assert WarningCode.UNKNOWN_CONTEXT_WINDOW.value not in override.warning_codes()


# ---------------------------------------------------------------- incremental behaviour


@dataclass
class CountingRules(PromptAdditions):
    """A CountingRules that records which texts it was asked to count (it adds nothing else to a prompt)."""

    name: str = "test:words"
    provider: str = "test"
    exact: bool = True
    seen: list[str] = field(default_factory=list)

    def text(self, text: str) -> int:
        self.seen.append(text)
        return len(text.split())

    def message_framing(self, message):
        return 1

    def tool_calls(self, tool_calls):
        return 2 * len(tool_calls)

    def tool_definition(self, tool):
        return 5

    def tools_overhead(self, tools, tool_choice):
        return 1 if tools else 0

    def response_format(self, response_format):
        return 0

    def request_overhead(self, n_messages):
        return 0


def use_rules(monkeypatch, rules: CountingRules) -> None:
    monkeypatch.setattr(estimator_module, "rules_for", lambda model, provider_name=None, api="chat": rules)


def conversation(rng: random.Random, turns: int) -> list[dict[str, Any]]:
    words = "alpha beta gamma delta epsilon zeta eta theta".split()
    msgs = [{"role": "system", "content": "system " + " ".join(rng.choice(words) for _ in range(20))}]
    for t in range(turns):
        msgs.append({"role": "user", "content": f"turn {t} " + " ".join(rng.choice(words) for _ in range(rng.randint(1, 30)))})
        msgs.append(
            {"role": "assistant", "content": f"answer {t} " + " ".join(rng.choice(words) for _ in range(rng.randint(1, 30)))}
        )
    return msgs


def test_each_new_text_is_counted_once_even_from_fresh_dicts(monkeypatch):
    rules = CountingRules()
    use_rules(monkeypatch, rules)
    est = Estimator()
    msgs = conversation(random.Random(1), 30)
    for upto in range(1, len(msgs) + 1):
        fresh = [dict(m) for m in msgs[:upto]]  # an agent rebuilding its list every turn
        est.estimate("m", fresh)
    assert sorted(rules.seen) == sorted(m["content"] for m in msgs)


def test_incremental_results_equal_a_from_scratch_count(monkeypatch):
    rules = CountingRules()
    use_rules(monkeypatch, rules)
    rng = random.Random(5)
    warm = Estimator()
    for _ in range(40):
        msgs = conversation(rng, rng.randint(1, 12))
        for upto in range(1, len(msgs) + 1):
            request = [dict(m) for m in msgs[:upto]]
            if rng.random() < 0.2 and upto > 2:  # an edit of an earlier message: a branch
                i = rng.randrange(1, upto)
                request[i] = {**request[i], "content": request[i]["content"] + " edited"}
            assert warm.estimate("m", request).by_source == Estimator().estimate("m", request).by_source


def test_a_message_edited_in_place_is_recounted(monkeypatch):
    rules = CountingRules()
    use_rules(monkeypatch, rules)
    est = Estimator()
    msgs = [{"role": "system", "content": "one two three"}, {"role": "tool", "content": "a b c d e f g h"}]
    before = est.estimate("m", msgs).total
    msgs[1]["content"] = "truncated"  # compaction that rewrites an old tool result in place
    after = est.estimate("m", msgs).total
    assert before - after == 7


def test_the_prefix_check_sees_what_comparing_each_message_sees(monkeypatch):
    # The per-call check reads the counted copies as one flat list of keys and values: every case
    # where that list could agree while the messages differ, or differ while they agree, must give
    # what a from-scratch count gives.
    rules = CountingRules()
    use_rules(monkeypatch, rules)
    est = Estimator()

    def same_as_scratch(request):
        assert est.estimate("m", request).by_source == Estimator().estimate("m", request).by_source

    parts = [{"type": "text", "text": "one two three"}, {"type": "text", "text": "four five"}]
    base = [
        {"role": "system", "content": "rules here", "name": "ann lee"},
        {"role": "user", "content": parts},
        {"role": "user", "content": "b c"},
    ]
    same_as_scratch(base)
    # a key and value moved across a message boundary, out of the system prompt: the flat lists are equal,
    # the key counts not
    moved = [{"role": "system", "content": "rules here"}, {"name": "ann lee", "role": "user", "content": parts}, base[2]]
    same_as_scratch(moved)
    # the same messages with their keys in another order
    same_as_scratch([{"content": m["content"], "role": m["role"], **({"name": m["name"]} if "name" in m else {})} for m in base])
    # a nested part edited in place: the copies hold their own parts
    same_as_scratch(base)
    parts[1]["text"] = "four five six seven"
    same_as_scratch(base)
    # a response object in the history (no flat list for the caller's side), then plain dicts again
    reply = litellm.ModelResponse(choices=[{"message": {"role": "assistant", "content": "done and dusted"}}]).choices[0].message
    same_as_scratch([*base, reply])
    same_as_scratch([*base, {"role": "assistant", "content": "done and dusted"}])


def test_caches_are_bounded(monkeypatch):
    rules = CountingRules()
    use_rules(monkeypatch, rules)
    est = Estimator(max_text_cache=50, max_conversations=4)
    for i in range(30):
        est.estimate("m", [{"role": "system", "content": f"system {i}"}, {"role": "user", "content": f"user {i}"}])
    assert est._n_conversations <= 4
    assert sum(len(b) for b in est._conversations.values()) <= 4
    assert len(est._texts.young) <= 50 and len(est._texts.old) <= 50


def test_tagged_messages_are_found_through_the_prefix_cache():
    from cw_middleware._counting.tags import TAG_KEY, strip_messages

    est = Estimator()
    msgs = [cw.message("system", [cw.segment("rules", "system_prompt")]), {"role": "user", "content": "a"}]
    first = est.estimate("gpt-4o", msgs)
    grown = msgs + [{"role": "assistant", "content": "b"}, cw.message("tool", "skill text", category="skills", tool_call_id="x")]
    second = est.estimate("gpt-4o", [dict(m) for m in grown])
    branch = est.estimate("gpt-4o", [dict(m) for m in grown[:3]] + [{"role": "user", "content": "other"}])
    assert (first.tagged_messages, second.tagged_messages, branch.tagged_messages) == ((0,), (0, 3), (0,))
    clean = strip_messages(grown, second.tagged_messages)
    assert (
        not any(
            TAG_KEY in m or any(TAG_KEY in p for p in m["content"] if isinstance(p, dict))
            for m in clean
            if isinstance(m, dict) and isinstance(m.get("content"), list)
        )
        and TAG_KEY not in clean[3]
    )
    assert clean[1] is grown[1]  # untagged messages are passed through, not copied


def test_tools_edited_in_place_are_recounted(runtime):
    tool = fn_tool("search", "short")
    tools = [tool]
    before = cw.estimate(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], tools=tools)
    tool["function"]["description"] = "a much longer description of what the tool does " * 20
    after = cw.estimate(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], tools=tools)
    assert after.tokens("tools") - before.tokens("tools") >= n("a much longer description of what the tool does " * 20) - 2


def test_alternating_tool_sets_are_both_cached(monkeypatch):
    rules = CountingRules()
    use_rules(monkeypatch, rules)
    est = Estimator()
    main_tools, sub_tools = [fn_tool(f"main_{i}") for i in range(5)], [fn_tool("sub")]
    calls = []
    monkeypatch.setattr(rules, "tool_definition", lambda tool: calls.append(tool) or 5)
    for _ in range(3):
        est.estimate("m", [{"role": "user", "content": "a"}], tools=main_tools)
        est.estimate("m", [{"role": "user", "content": "b"}], tools=sub_tools)
    assert len(calls) == 6  # each definition counted once, not once per switch


def test_legacy_functions_keep_their_tags_and_lose_them_before_the_provider(runtime):
    from cw_middleware._counting.tags import TAG_KEY, strip_tools

    fn = fn_tool("search")["function"]
    tagged = cw.tool(fn, source=cw.ToolSource.mcp("github"))
    snap = cw.estimate(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], functions=[tagged])
    assert snap.tokens("mcp_tools") > 0  # attributed by its tag, not as a native tool
    assert all(TAG_KEY not in f for f in strip_tools([tagged]))


def test_tuple_content_tags_are_counted_and_stripped(runtime):
    from cw_middleware._counting.tags import TAG_KEY, strip_messages

    msg = {"role": "system", "content": (cw.segment("rules", "system_prompt"), cw.segment("memo " * 30, "memory", "AGENTS.md"))}
    snap = cw.estimate(model="gpt-4o", messages=[msg])
    assert snap.tokens("memory") >= 30
    (clean,) = strip_messages([msg], None)
    assert all(TAG_KEY not in part for part in clean["content"])


def test_response_message_objects_in_the_history_are_counted_once_and_edits_seen(monkeypatch):
    import litellm

    rules = CountingRules()
    use_rules(monkeypatch, rules)
    est = Estimator()
    history: list[Any] = [{"role": "system", "content": "be brief"}]
    replies = []
    for t in range(5):
        history.append({"role": "user", "content": f"question {t}"})
        reply = litellm.completion(model="gpt-4o", messages=[{"role": "user", "content": "x"}], mock_response=f"answer {t}")
        replies.append(reply.choices[0].message)
        history.append(replies[-1])  # a Message object, as agents append it
        est.estimate("m", list(history))
    assert sorted(rules.seen) == sorted(["be brief"] + [f"question {t}" for t in range(5)] + [f"answer {t}" for t in range(5)])
    replies[1].content = "a rewritten answer"  # reassigned on the object itself
    assert est.estimate("m", list(history)).by_source == Estimator().estimate("m", list(history)).by_source


def test_reply_objects_with_tool_calls_edited_in_place_are_recounted(monkeypatch):
    import litellm

    rules = CountingRules()
    use_rules(monkeypatch, rules)
    est = Estimator()
    reply = (
        litellm.completion(
            model="gpt-4o",
            messages=[{"role": "user", "content": "x"}],
            mock_tool_calls=[{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        )
        .choices[0]
        .message
    )
    history = [{"role": "user", "content": "go"}, reply]
    est.estimate("m", list(history))
    reply.tool_calls[0].function.arguments = '{"much": "longer arguments"}'  # nested, in place
    reply.content = None
    assert est.estimate("m", list(history)).by_source == Estimator().estimate("m", list(history)).by_source


def test_tuple_content_edited_in_place_is_recounted(monkeypatch):
    rules = CountingRules()
    use_rules(monkeypatch, rules)
    est = Estimator()
    part = {"type": "text", "text": "one two three four five"}
    msgs = [{"role": "tool", "content": (part,)}]
    before = est.estimate("m", msgs).total
    part["text"] = "one"
    assert before - est.estimate("m", msgs).total == 4


def test_a_count_stopped_before_its_first_message_leaves_one_empty_conversation_not_one_a_call(monkeypatch):
    """While a tokenizer loads, each call's estimate stops at its first message (`Later`); the conversation
    it opened is taken up again by the next, so the counted conversations stay in the cache."""
    from cw_middleware._counting.rules._tiktoken import NotReady

    rules = CountingRules()
    use_rules(monkeypatch, rules)
    est = Estimator(max_conversations=4)
    other = [{"role": "system", "content": "another agent"}, {"role": "user", "content": "x"}]
    est.estimate("m", other)
    loading = [True]
    counted = rules.text
    monkeypatch.setattr(rules, "text", lambda text: (_ for _ in ()).throw(NotReady("enc")) if loading[0] else counted(text))
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]
    for _ in range(6):
        try:
            est.estimate("m", [dict(m) for m in msgs], now=True)
        except estimator_module.Later:
            pass
    assert sorted(len(c.frozen) for b in est._conversations.values() for c in b) == [0, 2]
    loading[0] = False
    assert est.estimate("m", [dict(m) for m in msgs]).by_source == Estimator().estimate("m", msgs).by_source
    assert sorted(len(c.frozen) for b in est._conversations.values() for c in b) == [2, 2]  # the other agent's is kept


def test_a_custom_tool_call_in_chat_history_counts_as_the_call_it_is():
    # Chat Completions spells a custom (free-form) tool's call {"type": "custom", "custom": {"name", "input"}}.
    custom = {"id": "c1", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin Patch\n*** End Patch"}}
    same = {"id": "c1", "type": "function", "function": {"name": "apply_patch", "arguments": "*** Begin Patch\n*** End Patch"}}
    tool = {"type": "custom", "custom": {"name": "apply_patch", "description": "Apply a patch to the working tree."}}

    def history(call: dict) -> list:
        return [
            {"role": "user", "content": "Fix the failing test."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "Patch applied."},
        ]

    snap = cw.estimate(model="openai/gpt-4.1", messages=history(custom), tools=[tool])
    assert snap.input_tokens == cw.estimate(model="openai/gpt-4.1", messages=history(same), tools=[tool]).input_tokens
    (row,) = snap.tools
    assert (row.name, row.invocations) == ("apply_patch", 1) and row.result_tokens > 0
    assert "tool:apply_patch" in {d.source for d in snap.details}
    assert "unreadable_message" not in snap.warning_codes()
