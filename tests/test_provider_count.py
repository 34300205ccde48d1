"""Provider token counts against local servers speaking the documented count APIs.

Expected totals are the numbers the local server reports; the policy, the time
box, failures and the once-per-fingerprint rule are observed from outside: the
server's request log, the snapshots, the logs.
"""

from __future__ import annotations

import copy
import gc
import json
import logging
import threading
import time

import httpx
import pytest
from gates import HANG_GUARD, returns_while_held
from providers import ANTHROPIC, CANARY, CHAT, GEMINI, OPENAI_COUNT, provider  # noqa: F401 - the fixture

import cw_middleware as cw
from cw_middleware._counting import count_bodies
from cw_middleware._counting.provider_count import (
    CountError,
    CountTarget,
    ProviderCounter,
    canonical_request,
    count_tokens,
    target_for,
)
from cw_middleware._kernel.config import resolve
from cw_middleware._kernel.contract import CountMethod, WarningCode

CLAUDE = "anthropic/claude-3-5-sonnet-20241022"
GEMINI_MODEL = "gemini/gemini-2.0-flash"

CONVERSATION = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21C"},
    {"role": "user", "content": [{"type": "text", "text": "And tomorrow?"}]},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "Weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
]
PROVIDER_ENV = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_API_BASE",
    "ANTHROPIC_BASE_URL",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GEMINI_API_BASE",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_API_BASE",
)


@pytest.fixture(autouse=True)
def _no_provider_env(monkeypatch):
    """Credentials come from each test, never from the machine running it."""
    for name in PROVIDER_ENV:
        monkeypatch.delenv(name, raising=False)


def _set_config(runtime, **settings):
    runtime.config = resolve(export="none", environ={}, **settings)


def _counted(kind=CountMethod.PROVIDER_API_SCALED_BREAKDOWN):
    return [s for s in cw.snapshots() if s.count_method is kind]


def _claude(provider, **extra):  # noqa: F811
    # mock_response stands in for the chat call; a mocked call counts only when asked explicitly.
    return {
        "model": CLAUDE,
        "messages": CONVERSATION,
        "tools": TOOLS,
        "api_base": provider.url,
        "api_key": "sk-ant-test",
        "mock_response": "ok",
        "cw_provider_count": "always",
        **extra,
    }


def _everything_public(runtime, caplog) -> str:
    """All a user or a backend could ever see: snapshots (with warnings) and log records."""
    ours = [r.getMessage() for r in caplog.records if r.name.startswith(("cw_middleware", "httpx"))]
    return "\n".join([*(s.model_dump_json() for s in runtime.snapshots()), *ours])


# ---------------------------------------------------------------- credentials and targets


def test_target_from_kwargs_beats_environment():
    env = {"ANTHROPIC_API_KEY": "env-key", "ANTHROPIC_BASE_URL": "http://env"}
    target = target_for("anthropic", CLAUDE, {"api_key": "kw-key", "api_base": "http://kw"}, environ=env)
    assert (target.provider, target.model, target.api_key, target.api_base) == (
        "anthropic",
        "claude-3-5-sonnet-20241022",
        "kw-key",
        "http://kw",
    )
    target = target_for("anthropic", CLAUDE, {}, environ=env)
    assert (target.api_key, target.api_base) == ("env-key", "http://env")
    assert "env-key" not in repr(target)


@pytest.mark.parametrize(
    ("provider_name", "model", "env", "expected"),
    [
        ("gemini", GEMINI_MODEL, {"GOOGLE_API_KEY": "g"}, ("gemini", "gemini-2.0-flash", "g", None)),
        ("gemini", GEMINI_MODEL, {"GEMINI_API_KEY": "a", "GOOGLE_API_KEY": "b"}, ("gemini", "gemini-2.0-flash", "a", None)),
        ("openai", "gpt-4o", {"OPENAI_API_KEY": "o", "OPENAI_API_BASE": "http://b/v1"}, ("openai", "gpt-4o", "o", "http://b/v1")),
        (
            "anthropic",
            CLAUDE,
            {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_API_BASE": "http://a"},
            ("anthropic", "claude-3-5-sonnet-20241022", "k", "http://a"),
        ),
    ],
)
def test_target_from_environment(provider_name, model, env, expected):
    target = target_for(provider_name, model, {}, environ=env)
    assert (target.provider, target.model, target.api_key, target.api_base) == expected


@pytest.mark.parametrize(
    ("provider_name", "model"),
    [("anthropic", CLAUDE), ("gemini", GEMINI_MODEL), ("openai", "gpt-4o"), ("mistral", "mistral/mistral-large")],
)
def test_no_credentials_no_target(provider_name, model):
    assert target_for(provider_name, model, {}, environ={}) is None


# ---------------------------------------------------------------- request conversion


def test_anthropic_body_follows_the_messages_format():
    body = count_bodies.to_anthropic("claude-x", CONVERSATION, TOOLS, "required")
    assert body["system"] == [{"type": "text", "text": "You are a coding agent."}]
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "user"]  # tool result and next user turn merged: roles alternate
    assert body["messages"][1]["content"] == [{"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Paris"}}]
    assert body["messages"][2]["content"][0] == {"type": "tool_result", "tool_use_id": "call_1", "content": "Sunny, 21C"}
    assert body["tools"][0]["name"] == "weather" and body["tools"][0]["input_schema"]["required"] == ["city"]
    assert body["tool_choice"] == {"type": "any"}


def test_gemini_body_follows_the_generate_content_format():
    body = count_bodies.to_gemini("gemini-x", CONVERSATION, TOOLS, {"type": "function", "function": {"name": "weather"}})
    request = body["generateContentRequest"]
    assert request["model"] == "models/gemini-x"
    assert request["systemInstruction"] == {"parts": [{"text": "You are a coding agent."}]}
    assert [c["role"] for c in request["contents"]] == ["user", "model", "user"]
    assert request["contents"][1]["parts"] == [{"functionCall": {"name": "weather", "args": {"city": "Paris"}}}]
    assert request["contents"][2]["parts"][0] == {"functionResponse": {"name": "weather", "response": {"content": "Sunny, 21C"}}}
    declaration = request["tools"][0]["functionDeclarations"][0]
    assert declaration["name"] == "weather" and "additionalProperties" not in declaration["parameters"]
    assert request["toolConfig"] == {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["weather"]}}


def test_openai_responses_body_follows_the_input_items_format():
    schema = {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}}}
    body = count_bodies.to_openai_responses("gpt-4o", CONVERSATION, TOOLS, "auto", schema)
    kinds = [item.get("type", item.get("role")) for item in body["input"]]
    assert kinds == ["system", "user", "function_call", "function_call_output", "user"]
    assert body["input"][2] == {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": '{"city": "Paris"}'}
    assert body["input"][4]["content"] == [{"type": "input_text", "text": "And tomorrow?"}]
    assert body["tools"][0]["type"] == "function" and body["tools"][0]["name"] == "weather"
    assert body["tool_choice"] == "auto"
    assert body["text"] == {"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}}}


@pytest.mark.parametrize(
    ("family", "base", "route", "path", "auth_header", "auth_value"),
    [
        ("anthropic", "", ANTHROPIC, "/v1/messages/count_tokens", "x-api-key", "k1"),
        ("gemini", "", GEMINI, "/v1beta/models/m-1:countTokens", "x-goog-api-key", "k1"),
        ("openai", "/v1", OPENAI_COUNT, "/v1/responses/input_tokens", "authorization", "Bearer k1"),
        ("openai", "", OPENAI_COUNT, "/v1/responses/input_tokens", "authorization", "Bearer k1"),
    ],
)
def test_count_tokens_speaks_each_endpoint(provider, family, base, route, path, auth_header, auth_value):  # noqa: F811
    target = CountTarget(family, "m-1", provider.url + base, "k1")
    with httpx.Client() as client:
        tokens = count_tokens(target, {"model": "m-1", "messages": CONVERSATION, "tools": TOOLS}, client)
    assert tokens == provider[route].tokens
    (hit,) = provider.hits(route)
    assert hit.path == path and hit.headers[auth_header] == auth_value
    if family == "anthropic":
        assert hit.headers["anthropic-version"] == "2023-06-01" and hit.body["model"] == "m-1"
    assert "cw_tag" not in json.dumps(hit.body)


@pytest.mark.parametrize("status", [400, 401, 429, 500, 503])
def test_count_tokens_error_status_is_a_failure_without_the_body(provider, status):  # noqa: F811
    provider[ANTHROPIC].status = status
    with httpx.Client() as client, pytest.raises(CountError) as info:
        count_tokens(CountTarget("anthropic", "m", provider.url, "k"), {"messages": CONVERSATION}, client)
    assert info.value.code is WarningCode.PROVIDER_COUNT_FAILED
    assert str(status) in str(info.value) and CANARY not in str(info.value)


@pytest.mark.parametrize("body", [b"not json", b'{"input_tokens": "12"}', b'{"input_tokens": -1}', b'{"other": 1}', b"[]"])
def test_count_tokens_bad_body_is_a_failure(provider, body):  # noqa: F811
    provider[ANTHROPIC].body = body
    with httpx.Client() as client, pytest.raises(CountError) as info:
        count_tokens(CountTarget("anthropic", "m", provider.url, "k"), {"messages": CONVERSATION}, client)
    assert info.value.code is WarningCode.PROVIDER_COUNT_FAILED


# ---------------------------------------------------------------- fingerprints


def test_fingerprint_is_by_content_not_identity():
    target = CountTarget("anthropic", "m", None, "k")
    request = {"model": CLAUDE, "messages": CONVERSATION, "tools": TOOLS}
    fresh = json.loads(json.dumps(request))
    fp, _ = canonical_request(target, request)
    assert canonical_request(target, fresh)[0] == fp
    assert canonical_request(target, request).plain() == fresh
    reordered = {"tools": TOOLS, "messages": [dict(reversed(m.items())) for m in CONVERSATION], "model": CLAUDE}
    assert canonical_request(target, reordered)[0] == fp  # key order is not content
    edited = copy.deepcopy(request)
    edited["messages"][1]["content"] += "!"
    assert canonical_request(target, edited)[0] != fp
    assert canonical_request(target, {**request, "tool_choice": "required"})[0] != fp
    assert canonical_request(CountTarget("gemini", "m", None, "k"), request)[0] != fp
    assert "Paris" not in fp and len(fp) == 32


def test_fingerprint_of_what_msgspec_refuses():
    """A lone surrogate, an int past 64 bits: still a fingerprint, and a plain copy to send; a key of no JSON type is
    not serialisable either way (the count is skipped with a warning)."""
    target = CountTarget("anthropic", "m", None, "k")
    odd = {"model": CLAUDE, "messages": [{"role": "user", "content": "half \ud800 pair"}], "tools": [{"n": 2**70}]}
    fp, _ = canonical_request(target, odd)
    assert len(fp) == 32 and fp != canonical_request(target, {**odd, "tools": [{"n": 2**70 + 1}]})[0]
    assert canonical_request(target, odd).plain()["tools"] == [{"n": 2**70}]
    keyed = {"model": CLAUDE, "messages": [{"role": "user", "content": {(1, 2): "x"}}]}
    with pytest.raises(TypeError):
        canonical_request(target, keyed)


# ---------------------------------------------------------------- through the wrapper


def test_anthropic_count_scales_the_breakdown_to_the_provider_total(runtime, provider):  # noqa: F811
    cw.completion(**_claude(provider))
    assert cw.flush(5)
    (snap,) = _counted()
    assert snap.input_tokens == provider[ANTHROPIC].tokens
    assert sum(b.tokens for b in snap.breakdown) == provider[ANTHROPIC].tokens
    assert snap.tokens("system_prompt") > 0 and snap.tokens("tools") > 0 and snap.tokens("conversation") > 0
    (hit,) = provider.hits(ANTHROPIC)
    assert hit.headers["x-api-key"] == "sk-ant-test"
    assert hit.body["model"] == "claude-3-5-sonnet-20241022" and hit.body["tools"][0]["name"] == "weather"


def test_gemini_count_through_the_wrapper(runtime, provider):  # noqa: F811
    cw.completion(
        model=GEMINI_MODEL,
        messages=CONVERSATION,
        api_base=provider.url,
        api_key="g-test",
        mock_response="ok",
        cw_provider_count="always",
    )
    assert cw.flush(5)
    (snap,) = _counted()
    assert snap.input_tokens == sum(b.tokens for b in snap.breakdown) == provider[GEMINI].tokens
    (hit,) = provider.hits(GEMINI)
    assert hit.path == "/v1beta/models/gemini-2.0-flash:countTokens" and hit.headers["x-goog-api-key"] == "g-test"


def test_credentials_from_the_environment(runtime, provider, monkeypatch):  # noqa: F811
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", provider.url)
    cw.completion(model=CLAUDE, messages=CONVERSATION, mock_response="ok", cw_provider_count="always")
    assert cw.flush(5)
    assert provider.hits(ANTHROPIC)[0].headers["x-api-key"] == "sk-ant-env"
    assert _counted()[0].input_tokens == provider[ANTHROPIC].tokens


def test_no_credentials_warns_provider_unconfigured(runtime, provider):  # noqa: F811
    cw.completion(model=CLAUDE, messages=CONVERSATION, mock_response="ok", cw_provider_count="always")
    assert cw.flush(5)
    assert provider.requests == []
    snaps = cw.snapshots()
    assert snaps and all(WarningCode.PROVIDER_UNCONFIGURED.value in s.warning_codes() for s in snaps)
    assert not _counted()


def test_auto_does_not_count_an_exact_tokenizer(runtime, provider):  # noqa: F811
    cw.completion(model="openai/gpt-4o", messages=CONVERSATION, tools=TOOLS, api_base=f"{provider.url}/v1", api_key="sk-test")
    assert cw.flush(5)
    assert provider.hits(OPENAI_COUNT) == [] and len(provider.hits(CHAT)) == 1
    assert not _counted()
    assert all(WarningCode.PROVIDER_UNCONFIGURED.value not in s.warning_codes() for s in cw.snapshots())


def test_always_counts_an_openai_model_through_responses_input_tokens(runtime, provider):  # noqa: F811
    cw.completion(
        model="openai/gpt-4o",
        messages=CONVERSATION,
        tools=TOOLS,
        api_base=f"{provider.url}/v1",
        api_key="sk-test",
        cw_provider_count="always",
    )
    assert cw.flush(5)
    (hit,) = provider.hits(OPENAI_COUNT)
    assert hit.headers["authorization"] == "Bearer sk-test" and hit.body["model"] == "gpt-4o"
    (snap,) = _counted()
    assert snap.input_tokens == sum(b.tokens for b in snap.breakdown) == provider[OPENAI_COUNT].tokens
    assert "cw_provider_count" not in json.dumps(provider.hits(CHAT)[0].body)


def test_never_per_call_and_in_config(runtime, provider):  # noqa: F811
    cw.completion(**_claude(provider, cw_provider_count="never"))
    _set_config(runtime, provider_count="never")
    cw.completion(**_claude(provider, messages=CONVERSATION[:2], cw_provider_count=None))
    assert cw.flush(5)
    assert provider.requests == [] and not _counted()
    assert all(not {w for w in s.warning_codes() if w.startswith("provider_")} for s in cw.snapshots())


def test_mocked_calls_count_only_when_asked_explicitly(runtime, provider):  # noqa: F811
    # A test suite or the demo with real credentials in the environment must not send prompts upstream.
    cw.completion(**_claude(provider, cw_provider_count=None))  # auto
    assert cw.flush(5)
    assert provider.requests == [] and not _counted()
    cw.completion(**_claude(provider))  # always
    assert cw.flush(5)
    assert len(provider.hits(ANTHROPIC)) == 1


def test_always_in_config(runtime, provider):  # noqa: F811
    _set_config(runtime, provider_count="always")
    cw.completion(model="openai/gpt-4o", messages=CONVERSATION, api_base=f"{provider.url}/v1", api_key="sk-test")
    assert cw.flush(5)
    assert len(provider.hits(OPENAI_COUNT)) == 1


# ---------------------------------------------------------------- never in the way


def test_slow_count_does_not_delay_the_call(runtime, provider, telemetry):  # noqa: F811
    # A time box past the hang guard: a call that waited for its count could not return before the release.
    _set_config(runtime, provider_count_timeout=2 * HANG_GUARD)
    request = {"model": "openai/gpt-4o", "api_base": f"{provider.url}/v1", "api_key": "sk-test"}
    cw.completion(messages=[{"role": "user", "content": "warm up"}], cw_provider_count="never", **request)
    n_before = len(cw.snapshots())

    released = provider.hold(OPENAI_COUNT)  # the count endpoint answers only once the test says so
    response = returns_while_held(
        lambda: cw.completion(messages=CONVERSATION, cw_provider_count="always", **request), lambda: not released.is_set()
    )
    assert response.usage.prompt_tokens == provider[CHAT].tokens
    assert not _counted()  # not yet
    assert [s.count_method for s in cw.snapshots()][-1] is CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN
    released.set()
    assert cw.flush(10)
    (snap,) = _counted()  # arrived later, after the call's own last snapshot
    assert snap.input_tokens == provider[OPENAI_COUNT].tokens
    assert snap.event_seq > cw.snapshots()[n_before + 1].event_seq
    # The call span had ended: the late snapshot travels on a linked span, with the provider's total.
    events = [e for s in telemetry.spans.get_finished_spans() for e in s.events if e.name == "agent.context_window.snapshot"]
    late = [e for e in events if e.attributes["agent.context_window.count_method"] == "provider_api_scaled_breakdown"]
    assert [e.attributes["agent.context_window.input_tokens"] for e in late] == [provider[OPENAI_COUNT].tokens]


def test_slow_count_times_out_into_a_warning_on_the_stages_next_snapshot(runtime, provider, caplog):  # noqa: F811
    _set_config(runtime, provider_count_timeout=0.3)
    provider.hold(ANTHROPIC)  # the count endpoint never answers within the time box (released at the end)
    cw.completion(**_claude(provider, messages=[{"role": "user", "content": "warm up"}], cw_provider_count="never"))
    # The counter's one worker is kept busy until the call has ended, so the call's count (and its
    # time box) starts after the call, however slowly the call runs.
    busy, free = threading.Event(), threading.Event()
    blocker = CountTarget("gemini", "m", provider.url, "k")
    runtime.counter().submit(
        blocker, {"model": "m", "messages": [{"role": "user", "content": "x"}]}, lambda t, f: (busy.set(), free.wait(HANG_GUARD))
    )
    assert busy.wait(HANG_GUARD)
    with cw.stage("run-1", "implement@1"):
        cw.completion(**_claude(provider))
        free.set()
        assert cw.flush(10)
        assert not _counted()
        first_call = cw.snapshots()
        assert all(WarningCode.PROVIDER_COUNT_TIMEOUT.value not in s.warning_codes() for s in first_call)
        cw.completion(**_claude(provider, messages=CONVERSATION[:2], cw_provider_count="never"))
    later = cw.snapshots()[len(first_call)]
    assert later.stage_id == "implement@1"
    assert WarningCode.PROVIDER_COUNT_TIMEOUT.value in later.warning_codes()


class _SaysWhenDelivered(ProviderCounter):
    """The real counter, injected through Runtime's ``counter_factory``; ``delivered``: a result was handed over."""

    def __init__(self, config) -> None:
        super().__init__(timeout=config.provider_count_timeout)
        self.delivered = threading.Event()

    def submit(self, target, request, on_result):
        def deliver(tokens, failure):
            try:
                on_result(tokens, failure)
            finally:
                self.delivered.set()

        return super().submit(target, request, deliver)


def test_count_failure_before_the_response_rides_on_the_calls_next_snapshot(telemetry, provider, caplog):  # noqa: F811
    from cw_middleware._capture.runtime import Runtime, set_runtime

    counters: list[_SaysWhenDelivered] = []
    rt = Runtime(
        resolve(export="none", environ={}),
        telemetry.tracer_provider,
        telemetry.meter_provider,
        counter_factory=lambda config: counters.append(_SaysWhenDelivered(config)) or counters[-1],
    )
    previous = set_runtime(rt)
    try:
        answer = provider.hold(CHAT)  # the chat answers only once the count's failure reached the call
        provider[OPENAI_COUNT].status = 500
        call = threading.Thread(
            target=cw.completion,
            kwargs={
                "model": "openai/gpt-4o",
                "messages": CONVERSATION,
                "api_base": f"{provider.url}/v1",
                "api_key": "sk-test",
                "cw_provider_count": "always",
            },
        )
        call.start()
        assert provider.wait_for_hits(OPENAI_COUNT, 1, timeout=HANG_GUARD) and counters[0].delivered.wait(HANG_GUARD)
        answer.set()
        call.join(HANG_GUARD)
        assert not call.is_alive()
        last = rt.snapshots()[-1]
    finally:
        set_runtime(previous)
        rt.shutdown()
    assert last.count_method is CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN
    assert WarningCode.PROVIDER_COUNT_FAILED.value in last.warning_codes()
    assert last.input_tokens == provider[CHAT].tokens


@pytest.mark.parametrize("status", [400, 403, 500, 529])
def test_count_error_body_never_leaks(runtime, provider, caplog, telemetry, status):  # noqa: F811
    caplog.set_level(logging.DEBUG, logger="cw_middleware")
    caplog.set_level(logging.DEBUG, logger="httpx")
    provider[ANTHROPIC].status = status
    with cw.stage("run-1", "s1"):
        cw.completion(**_claude(provider))
        assert cw.flush(5)
        cw.completion(**_claude(provider, messages=CONVERSATION[:2], cw_provider_count="never"))
    assert WarningCode.PROVIDER_COUNT_FAILED.value in cw.snapshots()[-1].warning_codes()
    public = _everything_public(runtime, caplog)
    spans = json.dumps(
        [{**dict(s.attributes), "events": [dict(e.attributes) for e in s.events]} for s in telemetry.spans.get_finished_spans()],
        default=str,
    )
    for text in (public, spans):
        assert CANARY not in text
        assert "Sunny, 21C" not in text and "sk-ant-test" not in text  # nor prompt text, nor the key
    assert f"HTTP {status}" in public  # the log says what happened, by status code only


def test_failure_metric_counts_provider_count_failures(runtime, provider, telemetry):  # noqa: F811
    provider[ANTHROPIC].status = 500
    cw.completion(**_claude(provider))
    assert cw.flush(5)
    data = telemetry.metrics.get_metrics_data()
    points = [
        p
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "agent.context_window.provider_count.failures"
        for p in m.data.data_points
    ]
    assert sum(p.value for p in points) == 1


# ---------------------------------------------------------------- once per fingerprint


def test_identical_requests_are_counted_once(runtime, provider):  # noqa: F811
    cw.completion(**_claude(provider))
    assert cw.flush(5)
    cw.completion(**_claude(provider, messages=json.loads(json.dumps(CONVERSATION)), tools=copy.deepcopy(TOOLS)))
    assert cw.flush(5)
    assert len(provider.hits(ANTHROPIC)) == 1
    counted = _counted()
    assert [s.input_tokens for s in counted] == [provider[ANTHROPIC].tokens] * 2  # the second call gets the cached count
    cw.completion(**_claude(provider, messages=CONVERSATION + [{"role": "user", "content": "More."}]))
    assert cw.flush(5)
    assert len(provider.hits(ANTHROPIC)) == 2


def test_in_flight_duplicates_wait_for_the_first(runtime, provider):  # noqa: F811
    provider[ANTHROPIC].delay = 0.5
    for _ in range(3):
        cw.completion(**_claude(provider, messages=copy.deepcopy(CONVERSATION)))
    assert cw.flush(5)
    assert len(provider.hits(ANTHROPIC)) == 1
    assert len(_counted()) == 3


def test_failures_are_not_retried_for_the_same_fingerprint(runtime, provider):  # noqa: F811
    provider[ANTHROPIC].status = 500
    for _ in range(2):
        cw.completion(**_claude(provider))
        assert cw.flush(5)
    assert len(provider.hits(ANTHROPIC)) == 1


def test_the_count_sees_the_request_as_sent_not_as_mutated_later(runtime, provider):  # noqa: F811
    provider[ANTHROPIC].delay = 0.3
    messages = list(CONVERSATION)
    cw.completion(**_claude(provider, messages=messages))
    messages.append({"role": "assistant", "content": "appended after the call"})  # what agent loops do
    assert cw.flush(5)
    (hit,) = provider.hits(ANTHROPIC)
    assert "appended after the call" not in json.dumps(hit.body)


# ---------------------------------------------------------------- the worker


def test_full_queue_drops_with_a_warning(provider):  # noqa: F811
    released = provider.hold(ANTHROPIC)
    counter = ProviderCounter(timeout=2 * HANG_GUARD, max_queue=1)
    results: list = []
    done = threading.Event()

    def on_result(tokens, failure):
        results.append((tokens, failure))
        if len(results) == 3:
            done.set()

    target = CountTarget("anthropic", "m", provider.url, "k")
    accepted = []
    for i in range(3):
        accepted.append(counter.submit(target, {"model": "m", "messages": [{"role": "user", "content": str(i)}]}, on_result))
        if i == 0:  # the worker took the first one: its count is held at the endpoint
            assert len(provider.wait_for_hits(ANTHROPIC, 1, timeout=HANG_GUARD)) == 1
    assert accepted == [True, True, False]
    assert (None, WarningCode.PROVIDER_COUNT_DROPPED) in results
    released.set()
    assert counter.wait_idle(HANG_GUARD) and done.wait(HANG_GUARD)
    assert sorted(r for r in results if r[0] is not None) == [(provider[ANTHROPIC].tokens, None)] * 2
    counter.close()


def test_submit_never_blocks_while_the_worker_is_busy(provider):  # noqa: F811
    released = provider.hold(ANTHROPIC)
    counter = ProviderCounter(timeout=2 * HANG_GUARD)  # a count ends only when the endpoint is released
    target = CountTarget("anthropic", "m", provider.url, "k")

    def submit_all() -> list[bool]:
        return [
            counter.submit(target, {"model": "m", "messages": [{"role": "user", "content": str(i)}]}, lambda t, f: None)
            for i in range(20)
        ]

    assert returns_while_held(submit_all, lambda: not released.is_set()) == [True] * 20
    assert len(provider.wait_for_hits(ANTHROPIC, 1, timeout=HANG_GUARD)) == 1  # the first count is held there
    returns_while_held(counter.close, lambda: not released.is_set())  # abandons the queue, leaves the held count
    released.set()


def test_injected_client_and_timeout(provider):  # noqa: F811
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        raise httpx.ReadTimeout("slow", request=request)

    counter = ProviderCounter(timeout=0.1, client=httpx.Client(transport=httpx.MockTransport(handler)))
    results = []
    counter.submit(
        CountTarget("openai", "gpt-4o", None, "k"),
        {"model": "gpt-4o", "messages": CONVERSATION},
        lambda t, f: results.append((t, f)),
    )
    assert counter.wait_idle(5)
    assert results == [(None, WarningCode.PROVIDER_COUNT_TIMEOUT)]
    assert str(seen[0].url) == "https://api.openai.com/v1/responses/input_tokens"
    counter.close()


def test_a_failing_callback_does_not_kill_the_worker(provider):  # noqa: F811
    counter = ProviderCounter(timeout=5)
    target = CountTarget("anthropic", "m", provider.url, "k")
    results = []

    def bad(tokens, failure):
        raise RuntimeError("boom")

    counter.submit(target, {"model": "m", "messages": [{"role": "user", "content": "a"}]}, bad)
    counter.submit(target, {"model": "m", "messages": [{"role": "user", "content": "b"}]}, lambda t, f: results.append(t))
    assert counter.wait_idle(5)
    assert results == [provider[ANTHROPIC].tokens]
    counter.close()


def test_a_finished_call_is_collectable_while_the_counter_waits_for_its_next_count(provider):  # noqa: F811
    """The counter's thread waits up to 30 s for its next count: it must not keep the last one's call and span."""
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

    from cw_middleware._capture.runtime import Runtime, set_runtime

    # No span processor: nothing but the middleware could keep a finished span alive.
    rt = Runtime(resolve(export="none", environ={}), TracerProvider())
    previous = set_runtime(rt)
    try:
        with cw.stage(run_id="run-idle-counter", stage_id="s@1"):
            cw.completion(**_claude(provider))
        assert rt.flush(5)
        assert len(provider.hits(ANTHROPIC)) == 1  # counted; the worker thread now waits for the next count
        gc.collect()
        spans = [o for o in gc.get_objects() if isinstance(o, ReadableSpan) and o.name.startswith("chat")]
        alive = [span for span in spans if span.attributes.get("agent.run.id") == "run-idle-counter"]
        assert alive == []
    finally:
        set_runtime(previous)
        rt.shutdown()


def test_bad_per_call_policy_falls_back_to_the_configured_one(runtime, provider, caplog):  # noqa: F811
    caplog.set_level(logging.WARNING, logger="cw_middleware")
    _set_config(runtime, provider_count="always")
    cw.completion(**_claude(provider, cw_provider_count="sometimes"))
    assert cw.flush(5)
    assert len(provider.hits(ANTHROPIC)) == 1  # always, as configured
    assert [s.count_method for s in cw.snapshots()][0] is CountMethod.LOCAL_ESTIMATE
    assert all(WarningCode.ESTIMATE_FAILED.value not in s.warning_codes() for s in cw.snapshots())
    assert "ignoring cw_provider_count" in caplog.text


async def test_slow_count_does_not_block_the_event_loop(runtime, provider):  # noqa: F811
    import asyncio

    # A count ends when the endpoint is released, or after its 30 s time box (a loop held by a count: a failure).
    _set_config(runtime, provider_count_timeout=30.0)
    request = {"model": "openai/gpt-4o", "api_base": f"{provider.url}/v1", "api_key": "sk-test"}
    await cw.acompletion(messages=[{"role": "user", "content": "warm up"}], cw_provider_count="never", **request)
    released = provider.hold(OPENAI_COUNT)

    async def release_once_a_count_is_held() -> None:
        # Runs on the event loop: it gets here only if the loop stays free while a count is held.
        # A count made on the loop would hold the loop, this task, and so the release: none would be counted.
        while not provider.hits(OPENAI_COUNT):
            await asyncio.sleep(0.01)
        released.set()

    releaser = asyncio.create_task(release_once_a_count_is_held())
    responses = await asyncio.gather(
        *(cw.acompletion(messages=CONVERSATION[: i + 2], cw_provider_count="always", **request) for i in range(3))
    )
    await releaser
    assert all(r.usage.prompt_tokens == provider[CHAT].tokens for r in responses)
    assert cw.flush(HANG_GUARD)
    assert len(_counted()) == 3 and len(provider.hits(OPENAI_COUNT)) == 3


def _count_against_trickle(at_once: bytes, trickled: bytes) -> tuple[CountError, bool]:
    """Count (time box 1 s) against a local server that answers ``at_once``, then ``trickled`` one byte every 0.2 s.

    The count's error, and whether the server was still trickling when the count gave up.
    """
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    answered = threading.Event()  # the server wrote its whole answer

    class Trickle(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            try:
                self.wfile.write(at_once)
                self.wfile.flush()
                for byte in trickled:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.2)
                answered.set()
            except OSError:  # the client gave up: expected
                pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        target = CountTarget("anthropic", "claude-sonnet-4-5", f"http://127.0.0.1:{server.server_address[1]}", "sk-test")
        with httpx.Client() as client, pytest.raises(CountError) as failed:
            count_tokens(target, {"model": "claude-sonnet-4-5", "messages": CONVERSATION}, client, timeout=1.0)
        return failed.value, not answered.is_set()
    finally:
        server.shutdown()
        server.server_close()


def test_the_time_box_bounds_the_whole_count_not_each_read():
    """A server that trickles its answer a byte at a time must not hold the worker past the time box."""
    body = b'{"input_tokens": 12345' + b" " * 100 + b"}"  # ~25 s a byte at a time, each within the 1 s timeout
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    error, still_trickling = _count_against_trickle(head, body)
    # A time box per read would have waited for the whole body and counted 12345.
    assert error.code is WarningCode.PROVIDER_COUNT_TIMEOUT and still_trickling


def test_the_time_box_also_bounds_a_server_that_trickles_its_headers():
    error, still_trickling = _count_against_trickle(b"", b"HTTP/1.1 200 OK\r\nX-Slow: " + b"x" * 120)  # ~28 s of headers
    assert error.code is WarningCode.PROVIDER_COUNT_TIMEOUT and still_trickling
