"""Nothing the application did not ask for (issue 35): on an official client's path cw imports neither LiteLLM nor
another SDK, prints nothing, evaluates no lazy module proxy; instrument() observes a package imported after it.

Each case is a fresh interpreter (what is imported is the process's), against the local provider of
tests/providers.py, with a model name LiteLLM does not know (as behind vLLM, Ollama or LM Studio): the
case in which LiteLLM's own name resolution prints "Provider List" on stdout.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.system

TESTS = Path(__file__).resolve().parent

_PRELUDE = f"""
import contextlib, io, json, logging, sys
sys.path.insert(0, {str(TESTS)!r})
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())
logging.getLogger("cw_middleware").addHandler(Keep())
from providers import running_provider
"""


def _run(body: str) -> dict:
    env = {"CW_EXPORT": "none", "PATH": "/usr/bin:/bin", "HOME": str(TESTS)}
    done = subprocess.run([sys.executable, "-c", _PRELUDE + body], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "", f"cw wrote on the application's stdout: {done.stdout[:500]!r}"
    return json.loads(done.stderr.strip().splitlines()[-1])


_OPENAI_CALLS = """
with running_provider() as provider:
    client = openai.OpenAI(base_url=provider.url + "/v1", api_key="sk-test", max_retries=0)
    observed = cw.wrap(client) if WRAP else client
    with cw.stage("footprint", "s@1"):
        for _ in range(3):
            observed.chat.completions.create(model="my-local-model", messages=[{"role": "user", "content": "hi"}])
calls = sum(1 for s in cw.snapshots() if s.count_method.value == "response_usage_scaled_breakdown")
module_client = type(openai.__dict__.get("_client")).__name__
print(json.dumps({"litellm": "litellm" in sys.modules, "anthropic": "anthropic" in sys.modules, "calls": calls,
                  "module_client": module_client, "warnings": [r for r in records if "my-local-model" in r],
                  "report": REPORT, "httpx": "httpx" in sys.modules, "httpx_with_openai": HTTPX_WITH_OPENAI,
                  "sdk": sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk")),
                  "readback": sorted(m for m in sys.modules if m.startswith("cw_middleware._readback")),
                  "other_apis": sorted(m for m in sys.modules if m.rpartition(".")[2] in ("messages", "gemini", "converse",
                                       "anthropic") and m.startswith(("cw_middleware._capture.apis.",
                                       "cw_middleware._counting.rules.")))}),
      file=sys.stderr)
"""


@pytest.mark.parametrize("how", ["instrument", "wrap"])
def test_an_openai_only_program_loads_no_litellm_and_prints_nothing(how):
    setup = (
        "import openai\nHTTPX_WITH_OPENAI = 'httpx' in sys.modules\nimport cw_middleware as cw\n"
        + ("WRAP = False\nr = cw.instrument()\nREPORT = [list(r.observed), list(r.waiting)]\n" if how == "instrument" else "")
        + ("WRAP = True\nREPORT = None\n" if how == "wrap" else "")
    )
    out = _run(setup + _OPENAI_CALLS)
    assert out["calls"] == 3
    assert out["litellm"] is False and out["anthropic"] is False
    assert out["module_client"] == "NoneType", "a lazy module proxy of openai's was evaluated"
    assert len(out["warnings"]) == 1, out["warnings"]  # the unknown model, named once, in cw's logger
    # openai 3 sends through httpx2 and looks for a loaded httpx on every request (for httpx clients a caller may
    # pass): cw importing httpx on a worker thread for its provider count failed the caller's call mid-import.
    assert out["httpx"] == out["httpx_with_openai"], "cw imported an HTTP library the application had not"
    # export=none: nothing is exported, so neither the OpenTelemetry SDK nor the read-back wing is loaded (~5 MB)
    assert out["sdk"] == [] and out["readback"] == [], (out["sdk"][:3], out["readback"][:3])
    # nor the adapters and counting rules of the APIs it does not speak
    assert out["other_apis"] == [], out["other_apis"]
    if how == "instrument":
        observed, waiting = out["report"]
        assert "openai.resources.chat.completions.completions.Completions.create" in observed
        assert not any(name.startswith("litellm.") for name in observed)
        assert "litellm" in waiting  # installed, not imported: observed once the application imports it


def test_a_package_imported_after_instrument_is_observed_from_its_import():
    out = _run(
        """
import cw_middleware as cw
report = cw.instrument()
assert "litellm" not in sys.modules
import litellm
from litellm import completion  # bound after the import: the observed function
with cw.stage("footprint", "late@1"):
    completion(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], mock_response="ok")
    litellm.completion(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], mock_response="ok")
print(json.dumps({"waiting": list(report.waiting), "snapshots": len(cw.snapshots()),
                  "observed": cw.instrument().observed}), file=sys.stderr)
cw.uninstrument()
assert litellm.completion.__module__.startswith("litellm")
"""
    )
    assert "litellm" in out["waiting"]
    assert out["snapshots"] >= 2  # each call's local estimate at least (a mocked response is LiteLLM's own count)
    assert "litellm.completion" in out["observed"]


def test_instrument_evaluates_no_lazy_module_proxy_while_it_looks_for_bound_references():
    """openai's module-level ``openai.chat`` (a LazyProxy) answers ``isinstance`` by building the module client:
    instrument()'s look through every module's globals (`bound.swap`) must not ask it."""
    out = _run(
        """
import openai, litellm
import cw_middleware as cw
cw.instrument()
print(json.dumps({"module_client": type(openai.__dict__.get("_client")).__name__}), file=sys.stderr)
"""
    )
    assert out["module_client"] == "NoneType"
