"""Fault injection: whatever breaks inside the middleware, the LLM call returns what LiteLLM returns.

Each test breaks one piece (estimator, counting rules, snapshot building,
telemetry, usage reading, model facts, the provider counter), runs the same
request through plain `litellm.completion` and through `cw.completion` against
the local OpenAI-compatible server, and compares. The middleware's own report
of the failure is a warning or a log line naming the exception type, never
its message (which could carry content).
"""

from __future__ import annotations

import json
import logging
import traceback

import litellm
import pytest
from providers import CANARY, CHAT, provider  # noqa: F401 - the fixture

import cw_middleware as cw
import cw_middleware._counting.estimator as estimate_module  # noqa: E402
from cw_middleware._capture import call as call_module
from cw_middleware._capture import wrapper as wrapper_module
from cw_middleware._capture.apis import chat as chat_api
from cw_middleware._counting.model_facts import ModelFacts
from cw_middleware._kernel.contract import CountMethod
from cw_middleware._snapshots.telemetry import CallTelemetry, Telemetry

SECRET = "SECRET-prompt-text-4711"
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": f"Remember {SECRET}."},
]


class Boom(RuntimeError):
    pass


def _boom(*args, **kwargs):
    raise Boom(f"failure mentioning {SECRET}")


def _request(provider, **extra):  # noqa: F811
    return {"model": "openai/gpt-4o", "messages": MESSAGES, "api_base": f"{provider.url}/v1", "api_key": "sk-test", **extra}


def _comparable(response) -> dict:
    dump = response.model_dump()
    dump.pop("created", None)
    return dump


def _stream_dump(stream) -> list[dict]:
    out = []
    for chunk in stream:
        dump = chunk.model_dump()
        dump.pop("created", None)
        out.append(dump)
    return out


def _same_as_litellm(provider, stream=False, **extra):  # noqa: F811
    """Plain LiteLLM first (unaffected by our patches), then the wrapper, on the same request."""
    if stream:
        expected = _stream_dump(litellm.completion(**_request(provider, stream=True, **extra)))
        got = _stream_dump(cw.completion(**_request(provider, stream=True, **extra)))
    else:
        expected = _comparable(litellm.completion(**_request(provider, **extra)))
        got = _comparable(cw.completion(**_request(provider, **extra)))
    assert got == expected
    return got


def _no_content_logged(caplog) -> None:
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("cw_middleware")]
    assert ours, "the failure was not reported at all"
    assert not any(SECRET in line for line in ours)


@pytest.fixture(autouse=True)
def _log(caplog):
    caplog.set_level(logging.WARNING, logger="cw_middleware")


# ---------------------------------------------------------------- estimation


def _published_saying_estimate_failed(provider) -> None:  # noqa: F811
    snaps = cw.snapshots()
    assert snaps and all("estimate_failed" in s.warning_codes() for s in snaps)
    final = [s for s in snaps if s.count_method.value == "response_usage_scaled_breakdown"]
    assert [s.input_tokens for s in final] == [provider[CHAT].tokens] * len(final)


@pytest.mark.parametrize("stream", [False, True])
def test_estimator_failure(runtime, provider, caplog, monkeypatch, stream):  # noqa: F811
    monkeypatch.setattr(runtime.estimator, "estimate", _boom)
    _same_as_litellm(provider, stream=stream)
    # A call whose estimate failed still has its snapshots (issue 36 item 6): no parts, estimate_failed, and
    # the provider's total where the response reports it.
    _published_saying_estimate_failed(provider)
    _no_content_logged(caplog)
    assert "Boom" in caplog.text


async def test_estimator_failure_async(runtime, provider, caplog, monkeypatch):  # noqa: F811
    monkeypatch.setattr(runtime.estimator, "estimate", _boom)
    expected = _comparable(await litellm.acompletion(**_request(provider)))
    got = _comparable(await cw.acompletion(**_request(provider)))
    assert got == expected
    _published_saying_estimate_failed(provider)
    _no_content_logged(caplog)


def test_rules_lookup_failure(runtime, provider, caplog, monkeypatch):  # noqa: F811
    monkeypatch.setattr(estimate_module, "rules_for", _boom)
    _same_as_litellm(provider)
    _published_saying_estimate_failed(provider)
    _no_content_logged(caplog)


def test_tokenizer_failure(runtime, provider, caplog, monkeypatch):  # noqa: F811
    real = estimate_module.rules_for("gpt-4o")

    class BrokenRules:
        name, provider, exact = "broken-for-test", real.provider, real.exact

        def __getattr__(self, item):
            return getattr(real, item)

        def text(self, text):
            raise Boom(text)  # the exception message *is* content here

    monkeypatch.setattr(estimate_module, "rules_for", lambda *a, **k: BrokenRules())
    _same_as_litellm(provider)
    _published_saying_estimate_failed(provider)
    _no_content_logged(caplog)


def test_tags_are_stripped_even_when_the_estimate_fails(runtime, provider, monkeypatch):  # noqa: F811
    monkeypatch.setattr(runtime.estimator, "estimate", _boom)
    tagged = [cw.message("system", [cw.segment("Notes.", "memory", "AGENTS.md")]), {"role": "user", "content": "Hi"}]
    tools = [
        cw.tool(
            {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}},
            source=cw.ToolSource.skill("pdf"),
        )
    ]
    cw.completion(**_request(provider, messages=tagged, tools=tools))
    assert "cw_tag" not in json.dumps(provider.hits(CHAT)[-1].body)


# ---------------------------------------------------------------- snapshots and telemetry


@pytest.mark.parametrize("stream", [False, True])
def test_snapshot_building_failure(runtime, provider, caplog, monkeypatch, stream):  # noqa: F811
    monkeypatch.setattr(call_module, "build_snapshot", _boom)
    _same_as_litellm(provider, stream=stream)
    assert cw.snapshots() == []
    _no_content_logged(caplog)
    assert "could not build a snapshot (Boom)" in caplog.text


@pytest.mark.parametrize("stream", [False, True])
def test_snapshot_recording_failure(runtime, provider, caplog, monkeypatch, stream):  # noqa: F811
    monkeypatch.setattr(CallTelemetry, "record", _boom)
    _same_as_litellm(provider, stream=stream)
    assert cw.snapshots()[-1].count_method is CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN  # kept in memory all the same
    _no_content_logged(caplog)


@pytest.mark.parametrize("stream", [False, True])
def test_span_end_failure(runtime, provider, caplog, monkeypatch, stream):  # noqa: F811
    monkeypatch.setattr(CallTelemetry, "end", _boom)
    _same_as_litellm(provider, stream=stream)
    _no_content_logged(caplog)


def test_span_start_failure(runtime, provider, caplog, monkeypatch):  # noqa: F811
    monkeypatch.setattr(Telemetry, "start_call", _boom)
    _same_as_litellm(provider)
    assert cw.snapshots() == []
    _no_content_logged(caplog)


def test_metric_failure(runtime, provider, caplog, monkeypatch):  # noqa: F811
    monkeypatch.setattr(Telemetry, "count_snapshot", _boom)
    monkeypatch.setattr(Telemetry, "set_gauges", _boom)
    _same_as_litellm(provider, stream=True)
    _no_content_logged(caplog)


# ---------------------------------------------------------------- response, model facts, counting


@pytest.mark.parametrize("stream", [False, True])
def test_usage_reading_failure(runtime, provider, caplog, monkeypatch, stream):  # noqa: F811
    monkeypatch.setattr(chat_api, "usage_input_tokens", _boom)
    _same_as_litellm(provider, stream=stream)
    assert cw.snapshots()[-1].count_method is CountMethod.LOCAL_ESTIMATE
    _no_content_logged(caplog)


def test_model_facts_failure(runtime, provider, caplog, monkeypatch):  # noqa: F811
    monkeypatch.setattr(ModelFacts, "request_meta", _boom)
    _same_as_litellm(provider, stream=True)
    _no_content_logged(caplog)


def test_provider_counter_failure(runtime, provider, caplog, monkeypatch):  # noqa: F811
    monkeypatch.setattr(runtime, "counter", _boom)
    expected = _comparable(litellm.completion(**_request(provider)))
    got = _comparable(cw.completion(**_request(provider, cw_provider_count="always")))
    assert got == expected
    _no_content_logged(caplog)


def test_stream_observation_failure(runtime, provider, caplog, monkeypatch):  # noqa: F811
    monkeypatch.setattr(wrapper_module, "_observe_stream", _boom)
    _same_as_litellm(provider, stream=True)
    _no_content_logged(caplog)


async def test_stream_observation_failure_async(runtime, provider, caplog, monkeypatch):  # noqa: F811
    monkeypatch.setattr(wrapper_module, "_observe_stream", _boom)

    async def dump(stream):
        return [{k: v for k, v in c.model_dump().items() if k != "created"} async for c in stream]

    expected = await dump(await litellm.acompletion(**_request(provider, stream=True)))
    got = await dump(await cw.acompletion(**_request(provider, stream=True)))
    assert got == expected


# ---------------------------------------------------------------- errors that are not ours


def test_provider_errors_propagate_unchanged_and_without_content(runtime, provider, telemetry):  # noqa: F811
    provider[CHAT].status = 400
    with pytest.raises(Exception) as plain:
        litellm.completion(**_request(provider))
    with pytest.raises(Exception) as ours:
        cw.completion(**_request(provider))
    assert type(ours.value) is type(plain.value)
    assert str(ours.value) == str(plain.value)
    spans = telemetry.spans.get_finished_spans()
    text = json.dumps(
        [{**dict(s.attributes), "events": [dict(e.attributes) for e in s.events], "status": s.status.description} for s in spans],
        default=str,
    )
    text += "".join(s.model_dump_json() for s in cw.snapshots())
    assert CANARY not in text and SECRET not in text
    (call_span,) = [s for s in spans if s.attributes.get("error.type")]
    assert call_span.attributes["error.type"] == type(plain.value).__qualname__


@pytest.mark.parametrize("messages", [5, None, [5], ["hello"]])
def test_malformed_messages_are_litellms_to_reject(runtime, messages):
    with pytest.raises(Exception) as plain:
        litellm.completion(model="gpt-4o", messages=messages, mock_response="ok")
    with pytest.raises(Exception) as ours:
        cw.completion(model="gpt-4o", messages=messages, mock_response="ok")
    assert type(ours.value) is type(plain.value) and str(ours.value) == str(plain.value)
    origin = traceback.extract_tb(ours.value.__traceback__)[-1].filename
    assert "cw_middleware" not in origin, f"raised by the middleware at {origin}"


def _outcome(fn, **kwargs):
    try:
        return "returned", _comparable(fn(**kwargs))
    except Exception as exc:  # noqa: BLE001
        return "raised", type(exc), str(exc)


@pytest.mark.parametrize(
    "odd",
    [
        [{"role": "user", "content": {"unexpected": "shape"}}],
        [{"role": "user", "content": [{"type": "mystery"}, 3]}],
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}],
        [{"role": "user"}],
        ({"role": "user", "content": "a tuple of messages"},),
    ],
)
def test_odd_shapes_get_litellms_own_outcome(runtime, provider, odd):  # noqa: F811
    assert _outcome(cw.completion, **_request(provider, messages=odd)) == _outcome(
        litellm.completion, **_request(provider, messages=odd)
    )


# ---------------------------------------------------------------- caller mistakes do raise


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ({"role": "user", "content": "x", "cw_tag": {"category": "bogus"}}, "unknown category 'bogus'"),
        ({"role": "user", "content": "x", "cw_tag": "memory"}, "must be a mapping with a 'category' key"),
        ({"role": "user", "content": [{"type": "text", "text": "x", "cw_tag": {"source": "AGENTS.md"}}]}, "'category'"),
        ({"role": "user", "content": "x", "cw_tag": {"category": "memory", "source": 42}}, "source must be a non-empty string"),
    ],
)
def test_malformed_hand_made_tag_is_a_clear_error(runtime, provider, bad, fragment):  # noqa: F811
    with pytest.raises(cw.TagError) as info:
        cw.completion(**_request(provider, messages=[MESSAGES[0], bad]))
    assert fragment in str(info.value)
    assert provider.requests == []  # the caller's mistake stops the call before the provider


def test_malformed_tool_tag_is_a_clear_error(runtime, provider):  # noqa: F811
    tool = {"type": "function", "function": {"name": "f"}, "cw_tag": {"category": "not-a-category"}}
    with pytest.raises(cw.TagError, match="unknown category 'not-a-category'"):
        cw.completion(**_request(provider, tools=[tool]))
    assert provider.requests == []
