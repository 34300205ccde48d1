"""The live estimate anchored on what the provider already said (issue 36 item 9), through real LiteLLM.

A local OpenAI-compatible stand-in reports ``usage.prompt_tokens`` it computes itself from the request it
receives, independently of cw: each message's o200k_base tokens, plus one token in twenty of them, plus 4,
and 3 for the request. cw's rules for gpt-4o count each message's tokens plus 4, and 3 for the request: the two
differ by a known amount per message, so the plain local estimate of a long system prompt is a few percent off.

In a growing conversation each call's request is the previous one's plus a turn: its ``local_estimate``
snapshot is then the previous call's provider total plus the local count of the new turn, within 0.5 % of the
stand-in's count where the plain estimate is not, with the warning ``anchored_estimate``. An edited history,
another model, a compaction, a changed tool set or a previous call without a provider total (a mock) fall
back to the plain estimate, without the warning.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import tiktoken

import cw_middleware as cw
from cw_middleware._kernel.contract import WARNING_MESSAGES, WarningCode

ANCHOR = WarningCode.ANCHORED_ESTIMATE.value
MODEL = "openai/gpt-4o"
# ~2,600 tokens of system prompt: one token in twenty is ~130 tokens the local rules do not see (~5 %).
SYSTEM = {"role": "system", "content": "".join(f"Rule {i}: keep the build green and every test fast. " for i in range(200))}
REPLY = "Done: I read the file and changed the one line that mattered, nothing else."
TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file.", "parameters": {"type": "object"}}}]


class StandIn:
    """A chat-completions endpoint that counts each request's input tokens itself (see the module docstring)."""

    def __init__(self) -> None:
        self.counts: list[int] = []  # prompt_tokens reported, one a request, in order
        self._enc = tiktoken.get_encoding("o200k_base")
        self._lock = threading.Lock()
        self.url = ""

    def count(self, request: dict[str, Any]) -> int:
        total = 3
        for message in request.get("messages", []):
            n = len(self._enc.encode(message.get("content") or ""))
            total += n + n // 20 + 4
        return total

    def handler(self) -> type[BaseHTTPRequestHandler]:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                tokens = stand_in.count(request)
                with stand_in._lock:
                    stand_in.counts.append(tokens)
                body = {
                    "id": "chatcmpl-anchor",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": "gpt-4o-2024-08-06",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": REPLY},
                            "logprobs": None,
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": tokens, "completion_tokens": 9, "total_tokens": tokens + 9},
                }
                payload = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    fake = StandIn()
    server = _Server(("127.0.0.1", 0), fake.handler())
    fake.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=2)


def _user(i: int) -> dict[str, str]:
    return {"role": "user", "content": f"Turn {i}: open src/module_{i}.py, find the failing assertion and fix it, then say done."}


def _conversation(turns: int) -> list[dict[str, str]]:
    """The system prompt, then ``turns`` user turns, each answered but the last."""
    messages = [SYSTEM]
    for i in range(turns):
        if i:
            messages.append({"role": "assistant", "content": REPLY})
        messages.append(_user(i))
    return messages


def _call(stand_in: StandIn, stage: str, messages: list, model: str = MODEL, **kwargs: Any):
    """One real call into ``stage``: (its local_estimate snapshot, its reconciled one or None, the stand-in's count)."""
    before = len(stand_in.counts)
    with cw.stage("anchored", stage):
        cw.completion(model=model, messages=messages, api_base=stand_in.url, api_key="sk-test", **kwargs)
    ours = [s for s in cw.snapshots() if s.stage_id == stage][-2:]
    local, final = ours
    assert local.count_method.value == "local_estimate"
    if final.count_method.value != "response_usage_scaled_breakdown":
        return final, None, None  # a mock: its local estimate, published again at its end
    return local, final, stand_in.counts[before]


def _plain(messages: list, model: str = MODEL, **kwargs: Any) -> int:
    return cw.estimate(model=model, messages=messages, **kwargs).input_tokens


def _plain_system(messages: list) -> int:
    return cw.estimate(model=MODEL, messages=messages).tokens("system_prompt")


def _within(a: int, b: int, share: float = 0.005) -> bool:
    return abs(a - b) <= share * b


def _sums(snapshot) -> bool:
    return sum(b.tokens for b in snapshot.breakdown) == snapshot.input_tokens


def test_a_growing_conversation_is_estimated_from_the_previous_calls_provider_total(runtime, stand_in):
    previous = None  # (the previous call's provider total, its plain local estimate)
    for turns in range(1, 7):
        messages = _conversation(turns)
        local, final, count = _call(stand_in, "grow@1", messages)
        plain = _plain(messages)
        assert final is not None and final.input_tokens == count  # the reconciled snapshot is the provider's number
        assert ANCHOR not in final.warning_codes()
        assert not _within(plain, count)  # the plain estimate misses by the system prompt's unseen tokens
        assert _sums(local) and local.count_method.value == "local_estimate"
        if previous is None:
            assert local.input_tokens == plain and ANCHOR not in local.warning_codes()
        else:
            provider_before, plain_before = previous
            assert ANCHOR in local.warning_codes()
            assert local.input_tokens == provider_before + plain - plain_before  # P_N + (L_N+1 - L_N)
            assert _within(local.input_tokens, count), (turns, local.input_tokens, count, plain)
            # the categories are the local estimate's, scaled to the anchored total
            assert local.tokens("system_prompt") > _plain_system(messages)
        previous = (count, plain)
    warning = next(w for w in local.warnings if w.code == ANCHOR)
    assert warning.message == WARNING_MESSAGES[WarningCode.ANCHORED_ESTIMATE]
    assert "previous call's provider-reported input tokens" in warning.message


def test_an_edited_history_falls_back_to_the_plain_estimate(runtime, stand_in):
    _call(stand_in, "edit@1", _conversation(1))
    local, _, _ = _call(stand_in, "edit@1", _conversation(2))
    assert ANCHOR in local.warning_codes()  # the control: this stage anchors
    edited = _conversation(3)
    edited[1] = {"role": "user", "content": "Turn 0, reworded: open the other module instead."}
    local, _, count = _call(stand_in, "edit@1", edited)
    assert ANCHOR not in local.warning_codes()
    assert local.input_tokens == _plain(edited) and not _within(local.input_tokens, count)


def test_another_model_falls_back_then_anchors_on_its_own_call(runtime, stand_in):
    _call(stand_in, "model@1", _conversation(1))
    other = "openai/gpt-4o-mini"
    local, _, _ = _call(stand_in, "model@1", _conversation(2), model=other)
    assert ANCHOR not in local.warning_codes() and local.input_tokens == _plain(_conversation(2), other)
    local, _, count = _call(stand_in, "model@1", _conversation(3), model=other)
    assert ANCHOR in local.warning_codes() and _within(local.input_tokens, count)


def test_a_compaction_falls_back_to_the_plain_estimate(runtime, stand_in):
    _call(stand_in, "compact@1", _conversation(1))
    local, _, _ = _call(stand_in, "compact@1", _conversation(3))
    assert ANCHOR in local.warning_codes()
    compacted = [SYSTEM, {"role": "user", "content": "Summary so far: two modules fixed. Go on with the third."}]
    local, final, _ = _call(stand_in, "compact@1", compacted)
    assert ANCHOR not in local.warning_codes() and local.input_tokens == _plain(compacted)
    assert final is not None and final.compaction is not None


def test_a_changed_tool_set_falls_back_to_the_plain_estimate(runtime, stand_in):
    _call(stand_in, "tools@1", _conversation(1))
    local, _, _ = _call(stand_in, "tools@1", _conversation(2), tools=TOOLS)
    assert ANCHOR not in local.warning_codes() and local.input_tokens == _plain(_conversation(2), tools=TOOLS)


def test_a_previous_call_without_a_provider_total_is_no_anchor(runtime, stand_in):
    mocked, _, _ = _call(stand_in, "mock@1", _conversation(1), mock_response=REPLY)
    assert "mock_usage_not_reconciled" in mocked.warning_codes()
    local, _, _ = _call(stand_in, "mock@1", _conversation(2))
    assert ANCHOR not in local.warning_codes() and local.input_tokens == _plain(_conversation(2))
    local, _, count = _call(stand_in, "mock@1", _conversation(3))  # its predecessor reconciled: anchored again
    assert ANCHOR in local.warning_codes() and _within(local.input_tokens, count)
