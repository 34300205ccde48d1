"""instrument() around the user's code as it really runs (issue 17 items 4, 5, 6, 8).

- References bound before instrument() in a module's globals (``from litellm import completion``)
  are observed too; one that cannot be reached (a class attribute) is named in one warning.
- After uninstrument(), a shell a framework still holds passes straight through to LiteLLM.
- OpenTelemetry's suppress-instrumentation key, set as opentelemetry-instrumentation sets it,
  keeps a call unobserved.
- importlib.reload(litellm) puts LiteLLM's functions back: instrumented() says so, and the next
  instrument() observes again (in a child process: a reload is process-wide).
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
import types

import litellm
from opentelemetry import context
from providers import CHAT, provider  # noqa: F401 - the fixture
from test_instrument import _final, _kwargs, clean_litellm  # noqa: F401 - the fixture

import cw_middleware as cw
from cw_middleware._capture.instrument import instrumented


def _module(name: str, source: str) -> types.ModuleType:
    """A module imported the ordinary way would be: its code run in its namespace, then in sys.modules."""
    module = types.ModuleType(name)
    exec(compile(textwrap.dedent(source), f"<{name}>", "exec"), module.__dict__)
    sys.modules[name] = module
    return module


# ---------------------------------------------------------------- item 4: import order


def test_a_module_global_bound_before_instrument_is_observed_and_put_back(runtime, provider, clean_litellm, caplog):  # noqa: F811
    framework = _module(
        "fw_bound_early",
        """
        from litellm import completion
        from litellm import acompletion as llm_acompletion

        def run(**kwargs):
            return completion(**kwargs)

        async def arun(**kwargs):
            return await llm_acompletion(**kwargs)
        """,
    )
    try:
        with caplog.at_level(logging.WARNING, logger="cw_middleware"):
            cw.instrument()
        with cw.stage("run-early", "agent@1"):
            framework.run(**_kwargs(provider))
            asyncio.run(framework.arun(**_kwargs(provider)))
        assert [s.stage_id for s in _final(cw.snapshots())] == ["agent@1", "agent@1"]  # both paths, not half a run
        assert not [r for r in caplog.records if "fw_bound_early" in r.getMessage()]  # reached: nothing to say
        cw.uninstrument()
        assert framework.completion is clean_litellm["completion"]
        assert framework.llm_acompletion is clean_litellm["acompletion"]
    finally:
        del sys.modules["fw_bound_early"]


def test_a_reference_that_cannot_be_reached_is_named_once(runtime, provider, clean_litellm, caplog):  # noqa: F811
    _module(
        "fw_class_bound",
        """
        from litellm import completion

        class Agent:
            complete = staticmethod(completion)
        """,
    )
    try:
        with caplog.at_level(logging.WARNING, logger="cw_middleware"):
            cw.instrument()
            cw.instrument()  # idempotent: said once
        said = [r.getMessage() for r in caplog.records if "fw_class_bound" in r.getMessage()]
        assert len(said) == 1, said
        assert "Agent.complete" in said[0] and "not observed" in said[0]
    finally:
        del sys.modules["fw_class_bound"]


# ---------------------------------------------------------------- item 5: uninstrument


def test_a_shell_bound_while_instrumented_passes_straight_through_after_uninstrument(runtime, provider, clean_litellm):  # noqa: F811
    cw.instrument()
    from litellm import completion as bound_shell  # e.g. a framework imported while instrumented

    cw.uninstrument()
    with cw.stage("run-after", "agent@1"):
        chunks = list(bound_shell(**_kwargs(provider, stream=True)))
    assert chunks and cw.snapshots() == [] and not instrumented()  # nothing published
    assert "stream_options" not in provider.hits(CHAT)[-1].body  # the request as the caller wrote it
    cw.instrument()  # instrumented again: the shell it still holds observes again
    bound_shell(**_kwargs(provider))
    assert len(_final(cw.snapshots())) == 1


# ---------------------------------------------------------------- item 6: suppress instrumentation


def _suppressed(key: object):
    token = context.attach(context.set_value(key, True))  # what suppress_instrumentation() sets
    return token


def test_calls_inside_suppress_instrumentation_are_not_observed(runtime, provider, clean_litellm):  # noqa: F811
    cw.instrument()
    for key in (context._SUPPRESS_INSTRUMENTATION_KEY, "suppress_instrumentation"):
        token = _suppressed(key)
        try:
            response = litellm.completion(**_kwargs(provider))
            asyncio.run(litellm.acompletion(**_kwargs(provider)))
        finally:
            context.detach(token)
        assert response.choices[0].message.content
        assert cw.snapshots() == [], key
    litellm.completion(**_kwargs(provider))  # outside it: observed
    assert len(_final(cw.snapshots())) == 1
    assert len(provider.hits(CHAT)) == 5


# ---------------------------------------------------------------- item 8: importlib.reload(litellm)

_RELOAD = """
import importlib, logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
import litellm
import cw_middleware as cw
from cw_middleware._capture.instrument import instrumented, litellm_instrumented

cw.configure(export="none")
kwargs = dict(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], mock_response="ok")
cw.instrument()
litellm.completion(**kwargs)
print("before reload", litellm_instrumented(), len(cw.snapshots()))
importlib.reload(litellm)
litellm.completion(**kwargs)
print("after reload", litellm_instrumented(), len(cw.snapshots()))
cw.instrument()
litellm.completion(**kwargs)
print("instrumented again", litellm_instrumented(), len(cw.snapshots()))
cw.uninstrument()
print("uninstrumented", instrumented(), litellm.completion is importlib.import_module(litellm.completion.__module__).completion)
"""


def test_a_reload_of_litellm_is_noticed_and_the_next_instrument_observes_again(tmp_path):
    done = subprocess.run([sys.executable, "-c", _RELOAD], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = {}
    for line in done.stdout.splitlines():
        for label in ("before reload", "after reload", "instrumented again", "uninstrumented"):
            if line.startswith(label):
                lines[label] = line[len(label) :].split()
    assert lines["before reload"][0] == "True"
    assert lines["after reload"][0] == "False"  # LiteLLM's own are back: nothing observes them
    assert lines["after reload"][1] == lines["before reload"][1]  # and indeed the call published nothing
    assert lines["instrumented again"][0] == "True"
    assert int(lines["instrumented again"][1]) > int(lines["after reload"][1])  # observed again
    assert lines["uninstrumented"] == ["False", "True"]
    assert "patched again" not in done.stderr
