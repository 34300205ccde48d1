"""cw.instrument(): LiteLLM's module functions observed for every caller, never recursing.

Real LiteLLM against a local OpenAI-compatible server (tests/providers.py); the
expected numbers are the server's prompt_tokens, the expected answers what
LiteLLM returns without instrument().
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import threading

import litellm
import pytest
from providers import CHAT, provider  # noqa: F401 - the fixture

import cw_middleware as cw
from cw_middleware._capture import litellm_originals as _litellm
from cw_middleware._capture.instrument import instrumented
from cw_middleware._kernel.contract import CountMethod

NAMES = ("completion", "acompletion", "responses", "aresponses")
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello."}]


def _module_functions() -> dict[str, object]:
    return {name: getattr(litellm, name) for name in ("completion", "acompletion", "responses", "aresponses")}


@pytest.fixture
def clean_litellm():
    """Puts LiteLLM's module functions back as the test found them; fails if uninstrument() left a shell of ours."""
    before = _module_functions()
    yield before
    cw.uninstrument()
    after = _module_functions()
    for name, fn in before.items():
        setattr(litellm, name, fn)
    assert not [name for name, fn in after.items() if hasattr(fn, _litellm.SAVED_ATTR)], "uninstrument() left a shell"


def _kwargs(provider, **extra):  # noqa: F811
    return {"model": "openai/gpt-4o", "messages": MESSAGES, "api_base": f"{provider.url}/v1", "api_key": "sk-test", **extra}


def _final(snaps):
    return [s for s in snaps if s.count_method is CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN]


# ---------------------------------------------------------------- patch and restore


def test_instrument_replaces_the_module_functions_and_uninstrument_restores_them(runtime, clean_litellm):
    cw.instrument()
    patched = _module_functions()
    for name in NAMES:
        assert patched[name] is not clean_litellm[name]
    cw.instrument()  # idempotent: the same shells, not shells over shells
    assert _module_functions() == patched
    cw.uninstrument()
    assert _module_functions() == clean_litellm
    cw.uninstrument()  # idempotent
    assert _module_functions() == clean_litellm


def test_the_shells_keep_the_signature_and_async_nature(runtime, clean_litellm):
    cw.instrument()
    assert inspect.signature(litellm.completion) == inspect.signature(clean_litellm["completion"])
    assert inspect.signature(litellm.responses) == inspect.signature(clean_litellm["responses"])
    assert inspect.iscoroutinefunction(litellm.acompletion) and inspect.iscoroutinefunction(litellm.aresponses)
    assert not inspect.iscoroutinefunction(litellm.completion) and not inspect.iscoroutinefunction(litellm.responses)
    assert litellm.completion.__name__ == "completion"


def test_instrument_changes_no_environment_and_no_litellm_setting(runtime, clean_litellm):
    env = dict(os.environ)
    state = {k: v for k, v in vars(litellm).items() if k not in NAMES}
    callbacks = [list(litellm.callbacks), list(litellm.success_callback), list(litellm.failure_callback)]
    cw.instrument()
    assert dict(os.environ) == env
    assert {k: v for k, v in vars(litellm).items() if k not in NAMES} == state
    assert [list(litellm.callbacks), list(litellm.success_callback), list(litellm.failure_callback)] == callbacks


# ---------------------------------------------------------------- observed calls


def test_module_call_is_observed_and_answers_as_before(runtime, provider, clean_litellm):  # noqa: F811
    expected = litellm.completion(**_kwargs(provider))
    assert cw.snapshots() == []
    cw.instrument()
    with cw.stage("run-i", "step@1"):
        got = litellm.completion(**_kwargs(provider))
    assert got.choices[0].message.content == expected.choices[0].message.content
    assert got.usage.model_dump() == expected.usage.model_dump()
    snaps = cw.snapshots()
    assert [s.count_method for s in snaps] == [CountMethod.LOCAL_ESTIMATE, CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN]
    assert (snaps[-1].run_id, snaps[-1].stage_id) == ("run-i", "step@1")
    assert snaps[-1].input_tokens == provider[CHAT].tokens


async def test_async_module_call_and_stream_are_observed(runtime, provider, clean_litellm):  # noqa: F811
    cw.instrument()
    response = await litellm.acompletion(**_kwargs(provider))
    assert response.usage.prompt_tokens == provider[CHAT].tokens
    stream = await litellm.acompletion(**_kwargs(provider, stream=True))
    text = "".join([c.choices[0].delta.content or "" async for c in stream])
    assert text.strip() == provider[CHAT].reply
    finals = _final(cw.snapshots())
    assert [s.input_tokens for s in finals] == [provider[CHAT].tokens] * 2


def test_tags_sent_through_an_instrumented_litellm_are_stripped(runtime, provider, clean_litellm):  # noqa: F811
    tagged = [cw.message("system", "You are terse.", category="memory", source="AGENTS.md"), MESSAGES[1]]
    tools = [cw.tool({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}, cw.ToolSource.mcp("gh"))]
    litellm.completion(**_kwargs(provider, messages=tagged, tools=tools))
    assert "cw_tag" in str(provider.hits(CHAT)[-1].body)  # plain LiteLLM sends our tags to the provider
    cw.instrument()
    litellm.completion(**_kwargs(provider, messages=tagged, tools=tools))
    body = provider.hits(CHAT)[-1].body
    assert "cw_tag" not in str(body) and "cw_source" not in str(body)
    assert body["messages"][0] == {"role": "system", "content": "You are terse."}
    assert _final(cw.snapshots())[-1].tokens("memory") > 0


async def test_responses_api_calls_are_observed_and_their_tags_stripped(runtime, clean_litellm):
    forwarded = []

    def recording(name):
        real = clean_litellm[name]

        def record(*args, **kwargs):  # a patch made before ours sees exactly what we forward
            forwarded.append(kwargs["input"])
            return real(*args, **kwargs)

        return record

    litellm.responses, litellm.aresponses = recording("responses"), recording("aresponses")
    items = [cw.message("user", [cw.segment("Repo notes.", "memory", "AGENTS.md"), "What next?"])]
    cw.instrument()
    with cw.stage("run-resp", "r@1"):
        sync = litellm.responses(model="openai/gpt-4o", input=items, instructions="Be terse.", mock_response="hi")
        done = await litellm.aresponses(model="openai/gpt-4o", input=items, instructions="Be terse.", mock_response="hi")
    assert sync.output[0].content[0].text == done.output[0].content[0].text == "hi"
    assert len(forwarded) == 2 and "cw_tag" not in str(forwarded)
    snaps = cw.snapshots()
    assert len(snaps) == 4 and {(s.stage_id, s.tokens("memory") > 0) for s in snaps} == {("r@1", True)}


def test_router_calls_are_observed(runtime, provider, clean_litellm):  # noqa: F811
    router = litellm.Router(
        model_list=[
            {
                "model_name": "my-model",
                "litellm_params": {"model": "openai/gpt-4o", "api_base": f"{provider.url}/v1", "api_key": "sk-test"},
            }
        ]
    )
    cw.instrument()
    with cw.stage("run-router", "route@1"):
        router.completion(model="my-model", messages=MESSAGES)
        asyncio.run(router.acompletion(model="my-model", messages=MESSAGES))
    finals = _final(cw.snapshots())
    assert [(s.stage_id, s.input_tokens) for s in finals] == [("route@1", provider[CHAT].tokens)] * 2


def test_a_reference_bound_before_instrument_is_not_observed(runtime, provider, clean_litellm):  # noqa: F811
    from litellm import completion as bound_early

    cw.instrument()
    bound_early(**_kwargs(provider))
    assert cw.snapshots() == []  # documented: only look-ups through the module at call time are observed
    from litellm import completion as bound_late

    bound_late(**_kwargs(provider))
    assert len(_final(cw.snapshots())) == 1


def test_explicit_cw_completion_under_instrument_is_observed_once(runtime, provider, clean_litellm):  # noqa: F811
    cw.instrument()
    cw.completion(**_kwargs(provider))
    assert len(cw.snapshots()) == 2
    assert len(provider.hits(CHAT)) == 1


def test_provider_errors_are_the_same_with_and_without_instrument(runtime, provider, clean_litellm):  # noqa: F811
    provider[CHAT].status = 400
    with pytest.raises(Exception) as plain:
        litellm.completion(**_kwargs(provider))
    cw.instrument()
    with pytest.raises(Exception) as observed:
        litellm.completion(**_kwargs(provider))
    assert type(observed.value) is type(plain.value)
    assert str(observed.value) == str(plain.value)


# ---------------------------------------------------------------- other patches


def test_a_patch_made_before_is_kept_called_once_and_restored(runtime, provider, clean_litellm):  # noqa: F811
    real = litellm.completion
    calls = []

    def user_patch(*args, **kwargs):
        calls.append(kwargs.get("model"))
        return real(*args, **kwargs)

    litellm.completion = user_patch
    cw.instrument()
    cw.instrument()
    litellm.completion(**_kwargs(provider))
    assert calls == ["openai/gpt-4o"]
    assert len(_final(cw.snapshots())) == 1
    cw.uninstrument()
    assert litellm.completion is user_patch


def test_a_patch_that_looks_litellm_up_at_call_time_does_not_recurse(runtime, provider, clean_litellm):  # noqa: F811
    real = litellm.completion
    calls = []

    def fallback_patch(*args, **kwargs):
        """A user's retry patch: on a failure it tries again through the module, as written before cw existed."""
        calls.append(kwargs["model"])
        if kwargs["model"] == "openai/broken":
            return litellm.completion(**{**kwargs, "model": "openai/gpt-4o"})
        return real(*args, **kwargs)

    litellm.completion = fallback_patch
    cw.instrument()
    response = litellm.completion(**_kwargs(provider, model="openai/broken"))
    assert response.usage.prompt_tokens == provider[CHAT].tokens
    # the inner look-up went straight to LiteLLM: the patch ran once, the request was observed once
    assert calls == ["openai/broken"]
    assert len(provider.hits(CHAT)) == 1
    assert len(cw.snapshots()) == 2


def test_a_patch_made_on_top_of_ours_is_left_in_place(runtime, provider, clean_litellm, caplog):  # noqa: F811
    cw.instrument()
    ours = litellm.completion

    def on_top(*args, **kwargs):
        return ours(*args, **kwargs)

    litellm.completion = on_top
    with caplog.at_level(logging.WARNING, logger="cw_middleware"):
        cw.uninstrument()
    assert litellm.completion is on_top
    assert "litellm.completion was patched again after instrument()" in caplog.text
    assert litellm.acompletion is clean_litellm["acompletion"]  # the untouched sibling is restored
    litellm.completion(**_kwargs(provider))  # theirs still forwards through ours to LiteLLM
    assert len(_final(cw.snapshots())) == 1
    litellm.completion = ours  # they took theirs off: now ours can go
    cw.uninstrument()
    assert litellm.completion is clean_litellm["completion"]


def test_a_stale_shell_put_back_by_hand_neither_recurses_nor_double_counts(runtime, provider, clean_litellm):  # noqa: F811
    cw.instrument()
    stale = litellm.completion
    cw.uninstrument()
    litellm.completion = stale  # e.g. a framework that cached the attribute and restores it
    stale(**_kwargs(provider))  # uninstrumented: the shell passes straight through
    assert not cw.snapshots() and not instrumented()
    cw.instrument()
    litellm.completion(**_kwargs(provider))
    assert len(provider.hits(CHAT)) == 2
    assert len(_final(cw.snapshots())) == 1  # one observation per observed request
    cw.uninstrument()
    assert litellm.completion is stale  # exactly what was there
    litellm.completion = clean_litellm["completion"]


def test_original_never_returns_one_of_our_shells(runtime, clean_litellm):
    cw.instrument()
    for name in NAMES:
        assert not hasattr(_litellm.original(name), _litellm.SAVED_ATTR)
        assert _litellm.own(name) is clean_litellm[name]


# ---------------------------------------------------------------- threads


def test_instrument_and_uninstrument_race_safely_with_calls(runtime, clean_litellm):
    errors: list[BaseException] = []
    stop = threading.Event()

    def caller() -> None:
        while not stop.is_set():
            try:
                litellm.completion(model="gpt-4o", messages=MESSAGES, mock_response="ok")
            except BaseException as exc:  # noqa: BLE001 - collected for the assertion
                errors.append(exc)
                return

    def toggler() -> None:
        for _ in range(15):  # 60 cycles beside two callers; each looks through every module (~0.1 s)
            cw.instrument()
            cw.uninstrument()

    callers = [threading.Thread(target=caller) for _ in range(2)]
    togglers = [threading.Thread(target=toggler) for _ in range(4)]
    for t in callers + togglers:
        t.start()
    for t in togglers:
        t.join()
    stop.set()
    for t in callers:
        t.join()
    assert errors == []
    assert _module_functions() == clean_litellm
