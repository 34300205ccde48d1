"""Anthropic's counting rules checked against counts derived by hand from the rule and an o200k count."""

import math

import cw_middleware as cw
from cw_middleware._counting.rules import rules_for
from cw_middleware._counting.rules._tiktoken import counter


def test_text_counts_claude_pieces_per_o200k_token():
    count = counter("o200k_base")
    sonnet = rules_for("anthropic/claude-sonnet-4-5")
    # " goodbye" and " farewell" are one o200k token each; Claude's vocabulary keeps "goodbye"
    # whole and splits "farewell" in two (ctok's reconstruction): a flat ratio serves neither.
    assert count(" goodbye" * 10) == count(" farewell" * 10) == 10
    assert sonnet.text(" goodbye" * 10) == 10
    assert sonnet.text(" farewell" * 10) == 20
    # An underscore glued to a word ("_value") is a piece of its own: "input", "_", "value".
    assert count("input_value") == 2
    assert sonnet.text("input_value") == 3
    # The newer tokenizer (Opus 4.8) bills 1.35 times the pieces: ceil(20 * 1.35) = 27.
    assert rules_for("anthropic/claude-opus-4-8").text(" farewell" * 10) == math.ceil(20 * 1.35)


def test_text_splits_the_seams_o200k_glues():
    count = counter("o200k_base")
    sonnet = rules_for("anthropic/claude-sonnet-4-5")
    # o200k: "Answer", ":\n\n", "yes", ".\n"; Claude keeps both newlines apart from the punctuation.
    assert count("Answer:\n\nyes.\n") == 4
    assert sonnet.text("Answer:\n\nyes.\n") == 4 + 2
    # o200k: "What", " is", " ", "2", " +", " ", "2", "?"; Claude: " ", "+" after the digit.
    assert count("What is 2 + 2?") == 8
    assert sonnet.text("What is 2 + 2?") == 8 + 1
    # A newline after a word, and a space between two words, are glued the same way in both.
    assert sonnet.text("line one\nline two") == count("line one\nline two") == 5


def test_a_one_message_request_is_framed_by_seven_tokens():
    # 4 for the request (the reply's priming and the frame) and 3 for the turn, over the text's 9.
    snap = cw.estimate(model="anthropic/claude-sonnet-4-5", messages=[{"role": "user", "content": "What is 2 + 2?"}])
    assert snap.input_tokens == 7 + 9


def test_a_replayed_call_is_billed_as_an_invoke_element():
    sonnet = rules_for("anthropic/claude-sonnet-4-5")
    call = {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 2}'}}
    shown = '<invoke name="get_weather"><parameter name="city">Paris</parameter><parameter name="days">2</parameter></invoke>'
    assert sonnet.tool_calls([call]) == sonnet.text(shown) + sonnet.text("toolu_1")
    # Arguments that are not a JSON object are shown as they came.
    odd = {"id": "toolu_2", "function": {"name": "f", "arguments": "not json"}}
    assert sonnet.tool_calls([odd]) == sonnet.text('<invoke name="f">not json</invoke>') + sonnet.text("toolu_2")


def test_the_structured_output_schema_stays_an_o200k_count_at_the_json_ratio():
    sonnet = rules_for("anthropic/claude-sonnet-4-5")
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}
    count = counter("o200k_base")
    assert sonnet.response_format(fmt) == 120 + math.ceil(
        count('{"type": "object", "properties": {"answer": {"type": "string"}}}') * 1.18
    )
