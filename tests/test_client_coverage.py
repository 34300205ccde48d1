"""Every method of the installed official clients that sends a model request is observed (issue 35).

The first test reads the installed ``openai`` and ``anthropic`` packages, not a list kept by hand: every
method of every resource class whose code posts to a model endpoint (``/chat/completions``,
``/responses``, ``/completions``, ``/v1/messages``, ``/v1/complete``, directly or through the SDK's helper
it returns) must be observed by `TARGETS`, reach an observed method (``chat.completions.stream`` calls
``create``), or be named in `LEFT_OUT` with the reason. A client release that adds such a method fails
here until it is one or the other.

The rest call the structured-output and beta methods through the real clients against the local
server (tests/providers.py), with `cw.instrument()` and with `cw.wrap(client)`: each call gets its
snapshots, the answer is the one the unobserved client gives, the total is the server's usage.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest
from providers import CHAT, MESSAGES, RESPONSES, provider  # noqa: F401 - the fixture
from pydantic import BaseModel

import cw_middleware as cw
from cw_middleware._capture.clients.patches import LEFT_OUT, TARGETS, installed_sdks
from cw_middleware._kernel.contract import CountMethod

# A model endpoint: where a request holds a context window (a path as the client writes it).
MODEL_ENDPOINT = re.compile(r"^/(v1/)?(chat/completions|responses|completions|messages|complete)(\b|$)")
_POST = re.compile(r"""_post(?:\(|,)\s*(?:path_template\(\s*)?f?["']([^"']+)["']""")
_REACHES = re.compile(r"(?:self|resource)\.(create|stream|parse)\b")
_HELPER = re.compile(r"return\s+(?:await\s+)?([a-z_]+)\(\s*self\b")


def _resource_classes(sdk: str):
    resource = importlib.import_module(f"{sdk}._resource")
    bases = (resource.SyncAPIResource, resource.AsyncAPIResource)
    package = importlib.import_module(f"{sdk}.resources")
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if isinstance(obj, type) and obj.__module__ == module.__name__ and issubclass(obj, bases):
                yield obj


def _reads(function, follow_helpers: bool = True) -> tuple[set[str], set[str]]:
    """(the endpoints ``function`` posts to, the methods of its resource it calls), following the SDK
    helper it returns (``return parse(self, ...)``) one level down."""
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return set(), set()
    posts, reaches = set(_POST.findall(source)), set(_REACHES.findall(source))
    if follow_helpers:
        for name in _HELPER.findall(source):
            helper = function.__globals__.get(name)
            if inspect.isfunction(helper):
                more_posts, more_reaches = _reads(helper, follow_helpers=False)
                posts |= more_posts
                reaches |= more_reaches
    return posts, reaches


@pytest.mark.parametrize("sdk", [s for s in installed_sdks() if s in ("openai", "anthropic")])
def test_every_method_that_sends_a_model_request_is_observed_or_left_out_with_a_reason(sdk):
    observed = {(t.owner_class(), t.method) for t in TARGETS if t.sdk == sdk} - {(None, t.method) for t in TARGETS}
    unaccounted, seen = [], 0
    for cls in _resource_classes(sdk):
        for name, function in vars(cls).items():
            if name.startswith("_") or not inspect.isfunction(function):
                continue
            posts, reaches = _reads(function)
            endpoints = {p.split("?", 1)[0] for p in posts if MODEL_ENDPOINT.match(p)}
            if not endpoints:
                continue
            seen += 1
            if (cls, name) in observed:
                continue
            if any((cls, other) in observed for other in reaches) and not any((e, name) in LEFT_OUT for e in endpoints):
                continue
            missing = [e for e in endpoints if (e, name) not in LEFT_OUT]
            if missing:
                unaccounted.append(f"{cls.__module__}.{cls.__qualname__}.{name} posts to {missing}")
    assert seen, f"no {sdk} method posts to a model endpoint: the reading of the client is broken"
    assert not unaccounted, "neither observed nor left out on purpose:\n" + "\n".join(unaccounted)


@pytest.mark.parametrize("sdk", [s for s in installed_sdks() if s in ("openai", "anthropic")])
def test_every_row_of_the_table_is_a_method_the_installed_client_has_or_a_module_it_lacks(sdk):
    """A row whose class exists but lacks its method is a stale row (a rename the table missed)."""
    for target in TARGETS:
        if target.sdk != sdk:
            continue
        try:
            module = importlib.import_module(target.module)
        except ImportError:
            continue  # an older or newer client without that module (openai's beta.chat)
        owner = getattr(module, target.owner, None)
        assert owner is None or callable(getattr(owner, target.method, None)), f"{target.owner}.{target.method}"


# ---------------------------------------------------------------- the methods, called


class City(BaseModel):
    city: str
    population: int


ANSWER = '{"city": "Paris", "population": 2100000}'
QUESTION = [{"role": "user", "content": "Which city is the capital of France?"}]


def _observed_client(kind, provider, how):  # noqa: F811
    if kind == "openai":
        import openai

        client = openai.OpenAI(base_url=f"{provider.url}/v1", api_key="sk-test", max_retries=0)
    else:
        anthropic = pytest.importorskip("anthropic")
        client = anthropic.Anthropic(base_url=provider.url, api_key="sk-ant-test", max_retries=0)
    if how == "wrap":
        return client, cw.wrap(client)
    cw.instrument()
    return client, client


@pytest.fixture
def restored():
    """Every patched class as the test found it."""
    before = {(t.owner_class(), t.method): t.owner_class().__dict__.get(t.method) for t in TARGETS if t.owner_class()}
    yield
    cw.uninstrument()
    left = [key for key, fn in before.items() if key[0].__dict__.get(key[1]) is not fn]
    assert not left, f"uninstrument() left shells on {left}"


def _calls(run_id: str) -> dict[str, list]:
    """The snapshots of each stage of ``run_id``, by stage."""
    out: dict[str, list] = {}
    for snap in cw.snapshots():
        if snap.run_id == run_id:
            out.setdefault(snap.stage_id, []).append(snap)
    return out


def _served_input(provider, route) -> int:  # noqa: F811
    r = provider[route]
    return r.tokens + r.cache_write_tokens + r.cached_tokens if route == MESSAGES else r.tokens


CASES = [
    ("openai", CHAT, lambda c: c.chat.completions.parse(model="gpt-4o", messages=QUESTION, response_format=City)),
    ("openai", RESPONSES, lambda c: c.responses.parse(model="gpt-4o", input=QUESTION, text_format=City)),
    ("openai", RESPONSES, lambda c: c.beta.responses.create(model="gpt-4o", input=QUESTION)),
    ("openai", CHAT, lambda c: c.chat.completions.stream(model="gpt-4o", messages=QUESTION, response_format=City)),
    (
        "anthropic",
        MESSAGES,
        lambda c: c.messages.parse(model="claude-sonnet-4-5", max_tokens=64, messages=QUESTION, output_format=City),
    ),
    ("anthropic", MESSAGES, lambda c: c.beta.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=QUESTION)),
    (
        "anthropic",
        MESSAGES,
        lambda c: c.beta.messages.parse(model="claude-sonnet-4-5", max_tokens=64, messages=QUESTION, output_format=City),
    ),
    ("anthropic", MESSAGES, lambda c: c.beta.messages.stream(model="claude-sonnet-4-5", max_tokens=64, messages=QUESTION)),
]
NAMES = [
    "chat.completions.parse", "responses.parse", "beta.responses.create", "chat.completions.stream",
    "messages.parse", "beta.messages.create", "beta.messages.parse", "beta.messages.stream",
]  # fmt: skip


def _answer(result):
    """What the caller reads: a stream manager is entered and read to its end."""
    if hasattr(result, "__enter__"):
        with result as stream:
            for _ in stream:
                pass
            final = getattr(stream, "get_final_message", None) or getattr(stream, "get_final_completion", None)
            return final().model_dump(exclude={"id", "created"}) if final else None
    out = result.model_dump(exclude={"id", "created", "created_at"})
    return out


@pytest.mark.parametrize("how", ["instrument", "wrap"])
@pytest.mark.parametrize("sdk, route, call", CASES, ids=NAMES)
def test_structured_output_and_beta_methods_are_observed(runtime, provider, restored, sdk, route, call, how):  # noqa: F811
    if sdk == "anthropic":
        pytest.importorskip("anthropic")
    provider[route].reply = ANSWER
    bare = _bare_client(sdk, provider)
    try:
        expected = _answer(call(bare))
    except AttributeError as exc:  # a method the installed client does not have (an older openai: no beta.responses)
        pytest.skip(f"the installed {sdk} client has no such method: {exc}")
    _, observed = _observed_client(sdk, provider, how)
    with cw.stage("coverage", f"{sdk}-{how}"):
        got = _answer(call(observed))
    assert got == expected
    snaps = _calls("coverage")[f"{sdk}-{how}"]
    assert snaps[0].count_method is CountMethod.LOCAL_ESTIMATE
    final = [s for s in snaps if s.count_method is CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN]
    assert len(final) == 1, [s.count_method for s in snaps]
    assert final[0].input_tokens == _served_input(provider, route)
    assert sum(item.tokens for item in final[0].breakdown) == final[0].input_tokens


def _bare_client(sdk, provider):  # noqa: F811
    if sdk == "openai":
        import openai

        return openai.OpenAI(base_url=f"{provider.url}/v1", api_key="sk-test", max_retries=0)
    import anthropic

    return anthropic.Anthropic(base_url=provider.url, api_key="sk-ant-test", max_retries=0)


ASYNC_CASES = [
    ("openai", CHAT, lambda c: c.chat.completions.parse(model="gpt-4o", messages=QUESTION, response_format=City)),
    ("openai", RESPONSES, lambda c: c.responses.parse(model="gpt-4o", input=QUESTION, text_format=City)),
    ("anthropic", MESSAGES, lambda c: c.beta.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=QUESTION)),
    ("anthropic", MESSAGES, lambda c: c.messages.parse(model="claude-sonnet-4-5", max_tokens=64, messages=QUESTION)),
]


@pytest.mark.parametrize("how", ["instrument", "wrap"])
@pytest.mark.parametrize(
    "sdk, route, call", ASYNC_CASES, ids=["chat.parse", "responses.parse", "beta.messages.create", "messages.parse"]
)
async def test_the_async_forms_are_observed(runtime, provider, restored, sdk, route, call, how):  # noqa: F811
    if sdk == "openai":
        import openai

        client = openai.AsyncOpenAI(base_url=f"{provider.url}/v1", api_key="sk-test", max_retries=0)
    else:
        anthropic = pytest.importorskip("anthropic")
        client = anthropic.AsyncAnthropic(base_url=provider.url, api_key="sk-ant-test", max_retries=0)
    provider[route].reply = ANSWER
    expected = (await call(client)).model_dump(exclude={"id", "created", "created_at"})
    if how == "wrap":
        client = cw.wrap(client)
    else:
        cw.instrument()
    with cw.stage("coverage-async", f"{sdk}-{how}"):
        got = (await call(client)).model_dump(exclude={"id", "created", "created_at"})
    assert got == expected
    final = [s for s in _calls("coverage-async")[f"{sdk}-{how}"] if s.count_method is CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN]
    assert [s.input_tokens for s in final] == [_served_input(provider, route)]
