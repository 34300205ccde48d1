"""Issue 20 item 7: what is new in a request is counted on the caller's thread only up to a budget.

Past it (a megabyte of new text, or hundreds of messages never seen) the call goes on at once and
its estimate is made on the runtime's background-estimate worker. Each test holds that worker
with a job that waits on an event, so a call whose estimate went there returns with no snapshot
yet; the estimate then equals what the tokenizer says of the same text.
"""

from __future__ import annotations

import json
import random
import threading

import pytest
import tiktoken
from providers import CHAT, provider  # noqa: F401 - the fixture

import cw_middleware as cw

WORDS = "the model reads every token of the context window before it answers".split()


def _fresh_text(chars: int, seed: int) -> str:
    rng = random.Random(seed)
    return (f"{rng.random()} " + " ".join(rng.choices(WORDS, k=chars // 4)))[:chars]


@pytest.fixture
def held_worker(runtime):
    """The background-estimate worker busy until the test sets the event."""
    release = threading.Event()
    started = threading.Event()

    def hold() -> None:
        started.set()
        release.wait(60)

    assert runtime.background_estimates.submit(hold)
    assert started.wait(30)
    yield release
    release.set()


def _call(messages: list[dict[str, str]]) -> None:
    with cw.stage(run_id="big", stage_id="s"):
        response = cw.completion(model="gpt-4o", messages=messages, mock_response="fine")
    assert response.choices[0].message.content == "fine"  # the caller's answer, unchanged


def test_a_megabyte_of_new_text_is_counted_on_the_worker_and_the_call_goes_on(runtime, held_worker):
    text = _fresh_text(1024 * 1024, seed=1)
    _call([{"role": "user", "content": text}])
    assert runtime.snapshots(wait=0) == []  # returned, while its estimate waits for the worker
    held_worker.set()
    assert cw.flush(60)
    (snapshot,) = [s for s in runtime.snapshots() if s.count_method.value == "local_estimate"][:1]
    encoded = len(tiktoken.get_encoding("o200k_base").encode(text))
    assert encoded <= snapshot.input_tokens <= encoded + 16  # the text, plus a message's and the request's framing
    assert snapshot.tokens("conversation") >= encoded


def test_a_short_new_text_is_counted_at_once(runtime, held_worker):
    _call([{"role": "user", "content": _fresh_text(4000, seed=2)}])
    assert [s.count_method.value for s in runtime.snapshots(wait=0)][:1] == ["local_estimate"]  # before the worker is free


def test_hundreds_of_new_messages_are_counted_on_the_worker(runtime, held_worker):
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"step {i}"} for i in range(2000)]
    _call(messages)
    assert runtime.snapshots(wait=0) == []
    held_worker.set()
    assert cw.flush(60)
    estimated = [s for s in runtime.snapshots() if s.count_method.value == "local_estimate"]
    assert estimated and estimated[0].input_tokens == cw.estimate(model="gpt-4o", messages=messages).input_tokens
    # A turn later the conversation is known: one new message is counted at once.
    runtime_before = len(runtime.snapshots())
    _call([*messages, {"role": "assistant", "content": "done"}, {"role": "user", "content": "next"}])
    assert len(runtime.snapshots()) > runtime_before


def test_the_workers_estimate_waits_for_the_calls_in_flight(runtime, monkeypatch):
    """A count of megabytes beside a call still in LiteLLM would take half that call's GIL turns."""
    from cw_middleware._counting.rules import _tiktoken

    monkeypatch.setattr(_tiktoken, "MAX_HOLD_BACK", 60.0)  # the bound, out of the way: the wait is what is tested
    in_flight, finish = threading.Event(), threading.Event()

    def another_call() -> None:
        with _tiktoken.calls_in_flight():
            in_flight.set()
            finish.wait(60)

    other = threading.Thread(target=another_call)
    other.start()
    try:
        assert in_flight.wait(30)
        _call([{"role": "user", "content": _fresh_text(256 * 1024, seed=3)}])
        assert not runtime.background_estimates.wait_idle(1.0)  # still waiting: another call is in flight
        assert runtime.snapshots(wait=0) == []
    finally:
        finish.set()
        other.join(30)
    assert cw.flush(60)
    assert [s.count_method.value for s in runtime.snapshots()][:1] == ["local_estimate"]


def test_a_request_estimated_on_the_worker_reaches_the_provider_without_tags(runtime, provider):  # noqa: F811
    """The caller's tag check names the tagged messages: only they are copied without their tags."""
    memory = cw.message("system", [cw.segment("Notes from AGENTS.md.", "memory", "AGENTS.md")])
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"step {i}"} for i in range(600)]
    messages = [memory, *history, {"role": "user", "content": _fresh_text(256 * 1024, seed=4)}]
    with cw.stage(run_id="big", stage_id="tags"):
        cw.completion(model="openai/gpt-4o", messages=messages, api_base=f"{provider.url}/v1", api_key="sk-test")
    sent = provider.hits(CHAT)[-1].body["messages"]
    assert "cw_tag" not in json.dumps(sent)
    assert sent[0] == {"role": "system", "content": [{"type": "text", "text": "Notes from AGENTS.md."}]}
    assert sent[1:] == messages[1:]  # the untagged ones as the caller wrote them
    assert cw.flush(60)
    assert runtime.snapshots()[0].tokens("memory") > 0


@pytest.mark.parametrize("plain", [True, False], ids=["plain-data", "with-a-response-object"])
def test_the_worker_counts_the_request_as_it_was_sent_whatever_the_caller_edits_after(runtime, held_worker, plain):
    """The messages are copied before the call returns (serialised when they are plain data, frozen otherwise)."""
    import litellm

    first = {"role": "assistant", "content": "an earlier answer"}
    if not plain:  # a reply object appended to the history, as agents do: not plain data
        first = litellm.completion(model="gpt-4o", messages=[{"role": "user", "content": "q"}], mock_response="an earlier answer")
        first = first.choices[0].message
    messages = [first, *({"role": "user", "content": f"step {i}"} for i in range(1000))]
    sent = [m if isinstance(m, dict) else m.model_dump() for m in messages]
    sent = [dict(m) for m in sent]
    _call(messages)
    messages[1]["content"] = "edited after the call " * 500  # the caller's list, changed while the estimate waits
    messages.append({"role": "user", "content": "appended after the call " * 500})
    held_worker.set()
    assert cw.flush(60)
    (estimated,) = [s for s in runtime.snapshots() if s.count_method.value == "local_estimate"][:1]
    assert estimated.input_tokens == cw.estimate(model="gpt-4o", messages=sent).input_tokens


def test_a_bad_tag_in_a_request_estimated_on_the_worker_raises_on_the_callers_call(runtime, provider):  # noqa: F811
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"step {i}"} for i in range(600)]
    bad = {"role": "user", "content": "notes", "cw_tag": {"category": "not_a_category"}}
    with pytest.raises(cw.TagError):
        cw.completion(model="openai/gpt-4o", messages=[*history, bad], api_base=f"{provider.url}/v1", api_key="sk-test")
    assert provider.hits(CHAT) == []  # nothing was sent
