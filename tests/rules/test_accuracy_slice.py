"""A pinned slice of real recorded requests: the estimate must stay within per-record tolerances.

The records are loaded at test time from the ground-truth file named by CW_ACCURACY_DATA,
with the scorer named by CW_ACCURACY_SCORER (neither ships with the repository, and the
tests never look beside the checkout for them: skipped, saying why, when they are not named).

Tolerances are absolute percentage errors, set just above today's error: OpenAI
records are exact or within a token or two; Anthropic and Gemini are approximations, pinned
a few points above their current error so a change to framing, scales, tool prompts or
declaration rendering shows up here. The slice spans every provider, API, tools / structured
output / tool-call history, and model generation the rules distinguish.
"""

import inspect
import json
import os
import runpy
from pathlib import Path

import pytest

import cw_middleware

# The data set and scorer are not part of the repository: named by path, or the slice skips.
DEV = Path(os.environ.get("CW_ACCURACY_DATA") or "/nonexistent/gt_dev.jsonl")
SCORER = Path(os.environ.get("CW_ACCURACY_SCORER") or "/nonexistent/accuracy.py")

# id -> tolerance (absolute percentage error, %)
SLICE = {
    # OpenAI chat completions: plain, history, tools, tool-call history, structured output
    "openai-chat_completions-02f9f2438918": 0.5,  # gpt-4 (cl100k)
    "openai-chat_completions-ca3c1f6b3407": 7.5,  # gpt-3.5-turbo
    "openai-chat_completions-9e7377e743e6": 0.5,  # gpt-4.1-mini
    "openai-chat_completions-12f22bc714be": 0.5,  # gpt-4o, a tool without description
    "openai-chat_completions-48f6d7db80a8": 2.5,  # gpt-4o-mini, a parallel call without tools
    "openai-chat_completions-cafd40b655ff": 2.5,  # gpt-4o-mini tools after a gpt-5 request with the same tools
    "openai-chat_completions-46b57c6ef0af": 1.0,  # gpt-4.1-mini, multi-turn
    "openai-chat_completions-9c6a99355400": 0.5,  # structured output with minimum/maximum
    "openai-chat_completions-0b137a202376": 0.5,  # gpt-5.4-mini tools (harmony preamble)
    "openai-chat_completions-f0e17ce88da0": 1.0,  # o3-mini tools (no harmony preamble)
    "openai-chat_completions-26194c4b9e9c": 1.0,  # gpt-4o-mini tools
    "openai-chat_completions-eebd39c5836d": 1.5,  # a forced function
    "openai-chat_completions-778e127181dd": 2.0,  # tool-call history
    "openai-chat_completions-b8afaf8cf22f": 2.0,  # a parallel call and its results
    "openai-chat_completions-2ef507ad1d59": 1.5,  # a parallel call of three, results with names
    "openai-chat_completions-f17d3556341a": 0.5,  # a parallel call's web-page results (64k tokens), shown escaped
    "openai-chat_completions-1a259f1778f5": 1.0,  # tools + structured output
    "openai-chat_completions-81037bed6569": 2.0,  # tools + schema + history
    "openai-chat_completions-680db78f8ff6": 0.5,  # two functions opening on bare properties
    "openai-chat_completions-a4156d79ef0c": 0.5,  # multi-line docstring descriptions (Args:/Returns:)
    "openai-chat_completions-4f44dd2310eb": 1.0,  # 21 tools, indented docstrings, bare first properties
    # OpenAI responses (scored natively when the scorer can, as litellm.responses() arguments)
    "openai-responses-5a2c39710131": 0.5,  # structured output
    "openai-responses-5ae0e4d308ad": 1.0,  # tools, long instructions
    "openai-responses-d32304899a60": 2.0,  # tool-call history
    "openai-responses-4186fc25bba7": 0.5,  # tools without instructions: no message opened for them
    "openai-responses-7b9c05ff223f": 2.0,  # the parameters schema's title shown
    "openai-responses-d4229e499d03": 1.5,  # a nested $ref object, not indented
    "openai-responses-08bd5dd388f8": 4.0,  # gpt-5.4 additional_tools item
    "openai-responses-871a9dcdf229": 2.0,  # gpt-5.4 call into a namespace (its address in the call and result)
    # Anthropic
    "anthropic-count_tokens-a249c13eb2fe": 3,  # one short message
    "anthropic-messages-c3cb451c69ea": 10,  # claude-3-5-sonnet, short
    "anthropic-messages-d40e88eea8e0": 5,  # structured output
    "anthropic-messages-aa1d3019ae15": 4,  # haiku 4.5 tools (4.5 tool prompt)
    "anthropic-messages-d5777e9e1bad": 8,  # claude-3-5-sonnet tools
    "anthropic-messages-14e085f74899": 7,  # sonnet 4 tools with history
    "anthropic-messages-17e0aaf57ab2": 4,  # tools + structured output
    "anthropic-messages-f00b9eabecc6": 4,  # tools + schema + history
    "anthropic-messages-a5f355f05b45": 3,  # extended thinking (hidden instruction)
    "anthropic-messages-c1bfbec9f0db": 3,  # sonnet 4.5, tool_choice any (larger tool prompt)
    "anthropic-count_tokens-4f6db21c7292": 3,  # opus 4.6, adaptive thinking + tool_choice any
    # Gemini
    "gemini-generate_content-5adfad6d3b15": 7,  # 2.5 plain text
    "gemini-generate_content-643c4a3bc151": 5,  # 2.5 long text
    "gemini-generate_content-b54567c22a0c": 3,  # 2.5 text with long digit runs (each digit a piece)
    "gemini-generate_content-bd62cc86d012": 13,  # 2.0 with responseSchema (not billed)
    "gemini-generate_content-9f47f74c6b4a": 4,  # 2.0 declaration: text values only
    "gemini-generate_content-e0714436676b": 11,  # 2.0 two declarations
    "gemini-generate_content-2447773db65b": 10,  # 2.0 call + response history
    "gemini-generate_content-8e4ad2cc38f4": 3,  # 2.5 very long declaration (JSON)
    "gemini-generate_content-18a009f70130": 3,  # 2.5 declaration (compact JSON and its wrapper: 1.4%)
    "gemini-generate_content-a62c240124b5": 2,  # 2.5 declaration + call (exact)
    "gemini-generate_content-9d3aef845c53": 15,  # 3-flash declaration
    "gemini-generate_content-f67a3fba71ee": 13,  # 3-pro declaration + schema
    "gemini-generate_content-75621352543f": 11,  # Vertex AI 3-flash declaration: text values, no markers (19 tokens: 2 under)
    "gemini-generate_content-4c91fd6699be": 6,  # Vertex AI 3-flash call + response history (short pieces, no scale)
    "gemini-generate_content-7b88925bec11": 10,  # Vertex AI 2.5-pro declaration
}


@pytest.fixture(scope="module")
def records():
    if not DEV.exists() or not SCORER.exists():
        pytest.skip(
            "the recorded accuracy data is not part of the repository: set CW_ACCURACY_DATA and "
            f"CW_ACCURACY_SCORER to the data set and scorer (now {DEV}, {SCORER})"
        )
    wanted = {}
    for line in DEV.open():
        r = json.loads(line)
        if r["id"] in SLICE:
            wanted[r["id"]] = r
    convert = runpy.run_path(str(SCORER))["to_kwargs"]
    native = "responses_api" in inspect.signature(convert).parameters

    def to_kwargs(record):  # Responses-API records as litellm.responses() arguments where the scorer offers them
        return convert(record, True) if native else convert(record)

    return wanted, to_kwargs


def test_slice_size():
    assert 20 <= len(SLICE) <= 60


@pytest.mark.parametrize("record_id", sorted(SLICE))
def test_estimate_within_tolerance(records, record_id):
    wanted, to_kwargs = records
    if record_id not in wanted:
        pytest.skip("record not in this data set version")
    r = wanted[record_id]
    est = cw_middleware.estimate(**to_kwargs(r)).input_tokens
    rep = r["reported_input_tokens"]
    assert abs(est - rep) / rep * 100 <= SLICE[record_id], (est, rep)


def test_tool_counts_do_not_leak_between_layouts(records):
    """The same tools sent to a harmony model and then a chat model are counted for each."""
    wanted, to_kwargs = records
    r = wanted.get("openai-chat_completions-cafd40b655ff")
    if r is None:
        pytest.skip("record not in this data set version")
    kwargs = to_kwargs(r)
    cw_middleware.estimate(**{**kwargs, "model": "openai/gpt-5-mini"})
    est = cw_middleware.estimate(**kwargs).input_tokens
    rep = r["reported_input_tokens"]
    assert abs(est - rep) / rep * 100 <= SLICE[r["id"]], (est, rep)
