"""The first calls of a process never wait for a tokenizer to load (issue 11, item 5).

Each test runs a fresh Python process (the encodings are per process): its first call
returns before o200k_base is loaded, the call's local estimate arrives later from the
background-estimate worker with the numbers a warm estimate gives, on the call's own span, and
`cw.flush()` waits for it. A child forked while the parent is still loading loads for
itself. A bad tag still raises on the caller's call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.system  # the system tier (pyproject.toml): `pytest -m system`

ROOT = Path(__file__).resolve().parents[1]

PRELUDE = """
import json, os, sys, time
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import litellm
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import cw_middleware as cw
from cw_middleware._counting.rules import _tiktoken
spans = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(spans))
cw.configure(export="none", tracer_provider=provider)
MEMORY = cw.segment("# AGENTS.md\\n- test first", "memory", source="AGENTS.md")
MESSAGES = [
    cw.message("system", [cw.segment("You are careful.", "system_prompt"), MEMORY]),
    {"role": "user", "content": "Fix the failing test, then run the suite."},
]
SEARCH = {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}
TOOLS = [cw.tool(SEARCH, source=cw.ToolSource.mcp("github"))]
"""


def _run(body: str, timeout: float = 60) -> dict:
    code = PRELUDE + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_first_call_returns_before_the_tokenizer_and_its_estimate_follows():
    out = _run(
        """
        sent = []
        def spy(*a, **k):
            sent.append(json.dumps(k["messages"]))
            return litellm.completion(*a, **k)
        import cw_middleware._capture.wrapper as w
        w.original = lambda name: spy
        resp = cw.completion(model="gpt-4o", messages=MESSAGES, tools=TOOLS, mock_response="On it.")
        returned_ns = time.time_ns()
        loaded_at_return = _tiktoken.ready("o200k_base")
        from cw_middleware._capture.runtime import get_runtime
        seen_at_return = len(get_runtime().snapshots(wait=0))  # cw.snapshots() would wait for it
        flushed = cw.flush(10.0)
        snaps = cw.snapshots()
        warm = cw.estimate(model="gpt-4o", messages=MESSAGES, tools=TOOLS)
        span = [s for s in spans.get_finished_spans() if s.name.startswith("chat")][0]
        events = [e for e in span.events if e.name == "agent.context_window.snapshot"]
        print(json.dumps({
            "reply": resp.choices[0].message.content, "loaded_at_return": loaded_at_return,
            "seen_at_return": seen_at_return, "flushed": flushed,
            "methods": [s.count_method.value for s in snaps],
            "tokens": [[b.tokens for b in s.breakdown] for s in snaps], "warm": [b.tokens for b in warm.breakdown],
            "details": [[d.source, d.tokens] for d in snaps[0].details],
            "warm_details": [[d.source, d.tokens] for d in warm.details],
            "events": len(events), "span_ended_by_return": span.end_time <= returned_ns,
            "tag_sent": any("cw_tag" in m for m in sent),
        }))
        """
    )
    assert out["reply"] == "On it."
    assert out["loaded_at_return"] is False and out["seen_at_return"] == 0
    assert out["flushed"] is True
    assert out["methods"] == ["local_estimate", "local_estimate"]  # the estimate, then the (mocked) call's end
    assert out["tokens"][0] == out["warm"] == out["tokens"][1] and sum(out["warm"]) > 0
    assert out["details"] == out["warm_details"] and "AGENTS.md" in [source for source, _ in out["details"]]
    assert out["events"] == 2  # both on the call's span, which ended when the call did (before it returned)
    assert out["span_ended_by_return"] is True
    assert out["tag_sent"] is False


def test_a_stream_and_a_second_call_during_loading_are_estimated_in_order():
    out = _run(
        """
        stream = cw.completion(model="gpt-4o", messages=MESSAGES, stream=True, mock_response="one two three")
        chunks = [c.choices[0].delta.content for c in stream if c.choices]
        untagged = [{"role": "system", "content": [{"type": "text", "text": "x"}]}, MESSAGES[1]]
        bare = [c.choices[0].delta.content for c in litellm.completion(
            model="gpt-4o", messages=untagged, stream=True, mock_response="one two three") if c.choices]
        cw.completion(model="claude-sonnet-4-5", messages=MESSAGES, mock_response="ok")
        cw.flush(10.0)
        snaps = cw.snapshots()
        print(json.dumps({"same_chunks": chunks == bare, "models": [s.model for s in snaps],
                          "sums": [sum(b.tokens for b in s.breakdown) == s.input_tokens for s in snaps],
                          "seq": [s.event_seq for s in snaps]}))
        """
    )
    assert out["same_chunks"] is True
    assert out["models"][:2] == ["gpt-4o", "gpt-4o"] and out["models"][2:] == ["claude-sonnet-4-5", "claude-sonnet-4-5"]
    assert all(out["sums"]) and out["seq"] == sorted(out["seq"])


def test_a_bad_tag_raises_on_the_first_call_too():
    out = _run(
        """
        try:
            bad = [{"role": "user", "content": "x", "cw_tag": {"category": "nope"}}]
            cw.completion(model="gpt-4o", messages=bad, mock_response="x")
            raised = None
        except cw.TagError as exc:
            raised = type(exc).__name__
        print(json.dumps({"raised": raised, "loaded": _tiktoken.ready("o200k_base")}))
        """
    )
    assert out == {"raised": "TagError", "loaded": False}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_a_child_forked_while_the_parent_loads_loads_for_itself():
    out = _run(
        """
        cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="ok")  # starts the loader, returns at once
        assert not _tiktoken.ready("o200k_base")
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                inherited = len(cw.snapshots())  # the parent's, finished before the fork (it waits for cw's jobs)
                cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="child")
                ok = cw.flush(20.0)
                snaps = cw.snapshots()
                result = {"ok": ok, "n": len(snaps) - inherited, "tokens": snaps[-1].input_tokens if snaps else None}
            except BaseException as exc:
                result = {"error": repr(exc)}
            os.write(w, json.dumps(result).encode())
            os._exit(0)
        os.close(w)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
        child = json.loads(os.read(r, 65536) or b'{"error": "child hung"}')
        cw.flush(10.0)
        child["parent_tokens"] = cw.snapshots()[-1].input_tokens
        print(json.dumps(child))
        """
    )
    assert "error" not in out, out
    # The child counts its own call: its estimate and its final snapshot (a parent's estimate still queued at the
    # fork, past the fork gate's wait, is the parent's; one done before it is in the child's copy of the list).
    assert out["ok"] is True and out["n"] == 2 and out["tokens"] == out["parent_tokens"] > 0


def test_snapshots_right_after_the_first_call_list_its_estimate():
    # The README's and the demo's pattern: a fresh process, one call, then `cw.snapshots()[-1]`.
    out = _run(
        """
        resp = cw.completion(model="gpt-4o", messages=MESSAGES, tools=TOOLS, mock_response="done")
        latest = cw.snapshots()[-1]
        print(json.dumps({"content": resp.choices[0].message.content, "memory": latest.tokens("memory"),
                          "method": latest.count_method.value}))
        """
    )
    assert out["content"] == "done"
    assert out["memory"] > 0
    assert out["method"] in ("local_estimate", "response_usage_scaled_breakdown")


def _fresh(code: str, export: str = "none") -> dict:
    """A process of its own, configured from its environment only (no PRELUDE)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "CW_EXPORT": export}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("way_in", ["swap import", "instrument()"])
def test_the_first_call_imports_no_telemetry_code(tmp_path, way_in):
    """The embedded pipeline's SDK comes with the package; instrument() also builds the runtime up front."""
    out = _fresh(
        f"""
        import json, sys
        import litellm
        import cw_middleware as cw
        if {way_in == "instrument()"}:
            cw.instrument()
        call = litellm.completion if {way_in == "instrument()"} else cw.completion
        before = set(sys.modules)  # a provider's counting rules still load with its first call: ~2 ms each
        reply = call(model="gpt-4o", messages=[{{"role": "user", "content": "hi"}}], mock_response="ok")
        during = sorted(m for m in set(sys.modules) - before if m.startswith(("opentelemetry", "cw_middleware._embedded")))
        cw.flush(10.0)
        print(json.dumps({{"during": during, "reply": reply.choices[0].message.content, "snapshots": len(cw.snapshots())}}))
        """,
        export=f"file:{tmp_path / 'telemetry.jsonl'}",  # the embedded default's pipeline, which imports the SDK
    )
    assert out == {"during": [], "reply": "ok", "snapshots": 2}


def test_the_loader_reads_nothing_while_a_call_is_in_flight():
    """Reading, hashing and splitting the ranks file hold the GIL: a prefetch started inside a call waits first."""
    out = _fresh(
        """
        import json, time
        from cw_middleware._counting.rules import _tiktoken
        with _tiktoken.calls_in_flight():
            _tiktoken.prefetch("o200k_base")
            time.sleep(0.3)
            read_in_flight = _tiktoken.loaded_from()
        ready = _tiktoken.wait_ready(30.0) and _tiktoken.ready("o200k_base")
        print(json.dumps({"read_in_flight": read_in_flight, "ready": ready, "read": "o200k_base" in _tiktoken.loaded_from()}))
        """
    )
    assert out == {"read_in_flight": {}, "ready": True, "read": True}


def test_the_loader_stops_deferring_once_many_calls_wait_for_it():
    """A burst of fast calls: each second held back is that many more calls queued (memory) and estimated late."""
    out = _fresh(
        """
        import json, time
        from cw_middleware._counting.rules import _tiktoken
        _tiktoken.MAX_HOLD_BACK = 60.0  # the time bound, out of the way: the limit on waiting calls is what is tested
        with _tiktoken.calls_in_flight():
            with _tiktoken.without_waiting():
                for _ in range(64):  # _tiktoken.HOLD_BACK_WAITERS calls, told NotReady
                    try:
                        _tiktoken.encoding("o200k_base")
                    except _tiktoken.NotReady:
                        pass
            ready_in_flight = _tiktoken.wait_ready(20.0) and _tiktoken.ready("o200k_base")
        print(json.dumps({"ready_in_flight": ready_in_flight}))
        """
    )
    assert out == {"ready_in_flight": True}


def test_the_background_estimate_worker_keeps_nothing_of_its_last_call(tmp_path):
    """Waiting (up to 30 s) for its next job, the worker held the last one: its call, span and request copies."""
    out = _fresh(
        """
        import gc, json, time
        import cw_middleware as cw
        from opentelemetry.sdk.trace import ReadableSpan
        with cw.stage(run_id="run-background", stage_id="s@1"):
            for i in range(3):  # the first calls of the process: estimated on the background-estimate worker
                cw.completion(model="gpt-4o", messages=[{"role": "user", "content": f"hi {i}"}], mock_response="ok")
        estimated = len(cw.snapshots())
        time.sleep(0.3)
        gc.collect()
        held = sum(1 for o in gc.get_objects() if isinstance(o, ReadableSpan) and o.end_time is not None)
        print(json.dumps({"estimated": estimated, "held": held}))
        """,
        export=f"file:{tmp_path / 'telemetry.jsonl'}",
    )
    assert out == {"estimated": 6, "held": 0}


_GATED_LOAD = """
import threading
gate, waiting = threading.Event(), threading.Event()  # the fake load's release; a background estimate waits for it
real_build = _tiktoken._build
def gated_build(name, polite):
    if name == "o200k_base":
        gate.wait(60)  # a load that takes as long as the test wants: until released
    return real_build(name, polite)
_tiktoken._build = gated_build

real_encoding = _tiktoken.encoding
def watched_encoding(name):
    # Says when a thread that may wait (the background estimate) is about to wait for the gated load.
    if name == "o200k_base" and not _tiktoken.ready(name) and not getattr(_tiktoken._state().local, "no_wait", False):
        waiting.set()
    return real_encoding(name)
_tiktoken.encoding = watched_encoding

def first_call(model, content):
    cw.completion(model=model, messages=[{"role": "user", "content": content}], mock_response="ok")

def returns_while_gated(model, content):
    # A hang guard, not a time bound: a call waiting on the load would never return before the gate opens.
    t = threading.Thread(target=first_call, args=(model, content), daemon=True)
    t.start()
    t.join(30)
    return not t.is_alive() and not gate.is_set()
"""


def test_no_caller_waits_for_a_tokenizer_load_or_a_background_estimate():
    """Issue 20 item 6: call 2 used to wait on the estimator's lock, held by call 1's background estimate."""
    out = _run(
        _GATED_LOAD
        + textwrap.dedent(
            """
        first_call("gpt-4o", "first")  # o200k_base not loaded: estimated in the background, which waits for it
        assert waiting.wait(30)  # call 1's background estimate now waits for the (gated) load
        returned = {
            "gpt-4o": returns_while_gated("gpt-4o", "second"),
            "gpt-4": returns_while_gated("gpt-4", "third"),  # cl100k_base, loading on its own meanwhile
            "claude-sonnet-4-5": returns_while_gated("claude-sonnet-4-5", "fourth"),
        }
        gate.set()
        flushed = cw.flush(30.0)
        snaps = cw.snapshots()
        same = [
            s.input_tokens == cw.estimate(model=s.model, messages=[{"role": "user", "content": c}]).input_tokens
            for s, c in zip(snaps[::2], ["first", "second", "third", "fourth"])
        ]
        print(json.dumps({"returned": returned, "flushed": flushed, "models": [s.model for s in snaps[::2]], "same": same}))
        """
        ),
        timeout=180,
    )
    assert out["returned"] == {"gpt-4o": True, "gpt-4": True, "claude-sonnet-4-5": True}
    assert out["flushed"] is True
    assert out["models"] == ["gpt-4o", "gpt-4o", "gpt-4", "claude-sonnet-4-5"]  # in call order, each estimated later
    assert out["same"] == [True] * 4
