"""The official clients observed, in one process: ``cw.wrap(client)`` against the bare client, call by call (issue 38).

    python benchmarks/official_clients.py [--calls 30] [--turns 25,200] [--peers | --peer NAME | --parts]

Each client talks to an httpx ``MockTransport`` that answers in the provider's documented format
(no server, no network), so what is measured is the client plus what observes it. For each client
(openai's ``chat.completions.create``, anthropic's ``messages.create``; and, for the LiteLLM path in the
same form, ``cw.completion`` against ``litellm.completion`` with ``mock_response``) and each size (the agent
conversation of benchmarks/conversation.py at turn 25, ~13k tokens, and 200, ~97k, with 30 tools),
the bare client and the wrapped one take turns, call by call, in an order that alternates; each call
gets fresh message dicts, as an agent sends them. A call's cost is the process's CPU time (every
thread's: ``time.process_time``) from before the call until every thread is done with it (cw's call
end and background estimates waited for, then the process watched until no thread works: LiteLLM's
logging thread runs a call's success handlers after it returns, bare or observed), so work moved off
the caller's thread is counted, not hidden, for every variant alike. Reported: the median CPU of each, their ratio, and the
milliseconds added; the load average beside it. cw runs its defaults (the embedded file export)
except ``provider_count="never"``: a provider count would ask the real provider's API.

The peers (`PEERS`: OTel contrib openai-v2, OpenLLMetry and OpenInference for openai; OpenLLMetry and
OpenInference for anthropic) patch the client classes for the whole process; ``--peer NAME`` runs one
as a third variant: its instrumentor is switched on for its calls and off for the others, untimed, with
a tracer provider whose batch processor drops the spans (a peer pays for its spans but not for encoding
them; cw pays for its file export too). ``--peers`` runs each one installed in a process of its own
(two peers switched on and off in one process leave the bare client slower: one's unwrap undoes the
other's wrapper out of order). They are not the project's dependencies:
install them into a venv beside cw, e.g.

    python3 -m venv /tmp/peers && /tmp/peers/bin/pip install -r requirements-dev.lock --no-deps
    /tmp/peers/bin/pip install --no-deps -e . && /tmp/peers/bin/pip install opentelemetry-instrumentation-openai-v2 \
        opentelemetry-instrumentation-openai opentelemetry-instrumentation-anthropic \
        openinference-instrumentation-openai openinference-instrumentation-anthropic
    /tmp/peers/bin/python benchmarks/official_clients.py --peers

``--parts`` takes cw's cost apart instead, as more variants of the wrapped client in the same
run: its call ends on the caller's thread (no call-end worker: what handing them over costs), no
snapshot published (the estimate, the span and its export: what the two snapshots cost), only the
end's snapshot published (what a call's first, local-estimate snapshot costs), both, and
the snapshot events added through the SDK's ``add_event`` instead of handed to the file pipeline with
their span's end (what that saves).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import cw_middleware as cw  # noqa: E402
from benchmarks.conversation import make_tools, make_turns, request_at  # noqa: E402
from benchmarks.peers import _noop_provider  # noqa: E402
from cw_middleware._capture import call as _call  # noqa: E402
from cw_middleware._capture.runtime import get_runtime  # noqa: E402

OPENAI_BODY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o-2024-08-06",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "done"}}],
    "usage": {"prompt_tokens": 1000, "completion_tokens": 1, "total_tokens": 1001},
}
ANTHROPIC_BODY = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "done"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1000, "output_tokens": 1},
}


def _mock(sdk: str, body: dict[str, Any]) -> Any:
    """An HTTP client of the library the SDK uses (httpx, or httpx2 in its newer releases) on a MockTransport."""
    base = importlib.import_module(f"{sdk}._base_client")
    http = getattr(base, "httpx2", None) or base.httpx
    return http.Client(transport=http.MockTransport(lambda request: http.Response(200, json=body)))


def anthropic_request(system: str, turns: list[list[dict[str, Any]]], upto: int, tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The same conversation in Anthropic's Messages form: tool calls as tool_use blocks, results as tool_result."""
    messages: list[dict[str, Any]] = []
    for m in request_at(system, turns, upto)[1:]:
        if m["role"] == "tool":
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}
            messages.append({"role": "user", "content": [block]})
        elif m.get("tool_calls"):
            uses = []
            for c in m["tool_calls"]:
                fn = c["function"]
                uses.append({"type": "tool_use", "id": c["id"], "name": fn["name"], "input": json.loads(fn["arguments"])})
            messages.append({"role": "assistant", "content": uses})
        else:
            messages.append({"role": m["role"], "content": m["content"]})
    merged: list[dict[str, Any]] = []
    for m in messages:  # Anthropic alternates roles: consecutive turns of one role become one
        if merged and merged[-1]["role"] == m["role"]:
            as_blocks = [c if isinstance(c, dict) else {"type": "text", "text": c} for c in (merged[-1]["content"], m["content"])]
            merged[-1]["content"] = [b for part in as_blocks for b in (part if isinstance(part, list) else [part])]
        else:
            merged.append(m)
    anthropic_tools = [
        {"name": t["function"]["name"], "description": t["function"]["description"], "input_schema": t["function"]["parameters"]}
        for t in tools
    ]
    return {"model": "claude-sonnet-4-5", "max_tokens": 64, "system": system, "messages": merged, "tools": anthropic_tools}


def _settle() -> None:
    """cw's work for the calls so far, done: its call ends and background estimates."""
    runtime = get_runtime()
    if runtime.call_ends is not None:
        runtime.call_ends.wait_idle(10.0)
    runtime.background_estimates.wait_idle(10.0)


QUIET_STEP = 0.005  # seconds the process is watched at a time for other threads' work
QUIET_CPU = 0.0002  # CPU seconds in one step below which no other thread is working


def _quiet(limit: float = 1.0) -> None:
    """Until no thread of the process works any more (at most ``limit`` seconds): every variant's background work
    in its own call's window. LiteLLM's logging thread finishes a call's success handlers after it returns (~3.5 ms
    a call at ~98k tokens): a variant that returns at once would leave them to land outside any window, one that
    waits for cw's call-end worker would give them the GIL inside its own."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        before = time.process_time()
        time.sleep(QUIET_STEP)
        if time.process_time() - before < QUIET_CPU:
            return


Variant = tuple[Callable[..., Any], Callable[[], dict[str, Any]], Callable[[bool], None]]  # (call, request, switch)


def interleaved(variants: dict[str, Variant], calls: int) -> dict[str, list[float]]:
    """Per variant, the CPU milliseconds of each call (all threads, background work included), variants alternating."""
    out: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for i in range(calls + 2):
        for name in names if i % 2 else list(reversed(names)):
            call, request, switch = variants[name]
            switch(True)
            kwargs = request()
            gc.collect()
            start = time.process_time()
            call(**kwargs)
            _settle()
            _quiet()
            spent = time.process_time() - start
            switch(False)
            if i >= 2:  # the first calls load the tokenizer, warm imports and connections
                out[name].append(1000 * spent)
    return out


# The peers that observe the official clients: name -> (the client it observes, its instrumentor).
PEERS = {
    "otel-openai-v2": ("openai", "opentelemetry.instrumentation.openai_v2:OpenAIInstrumentor"),
    "openllmetry-openai": ("openai", "opentelemetry.instrumentation.openai:OpenAIInstrumentor"),
    "openinference-openai": ("openai", "openinference.instrumentation.openai:OpenAIInstrumentor"),
    "openllmetry-anthropic": ("anthropic", "opentelemetry.instrumentation.anthropic:AnthropicInstrumentor"),
    "openinference-anthropic": ("anthropic", "openinference.instrumentation.anthropic:AnthropicInstrumentor"),
}


def _peer(spec: Optional[str]) -> Callable[[bool], None]:
    if not spec:
        return lambda on: None
    module, _, name = spec.partition(":")
    instrumentor = getattr(importlib.import_module(module), name)()
    provider, _ = _noop_provider()  # its batch processor drops what it exports

    def switch(on: bool) -> None:
        if on:
            instrumentor.instrument(tracer_provider=provider)
        else:
            instrumentor.uninstrument()

    return switch


def _parts() -> dict[str, Callable[[bool], None]]:
    """``--parts``: switches that take a piece of cw's work out of the wrapped client's calls (module docstring)."""
    runtime, publish = get_runtime(), _call.Call._publish
    worker, skip = runtime.call_ends, {"publish": False, "first": False}

    def published(self: Any, *args: Any, **kwargs: Any) -> None:
        if not skip["publish"] and not (skip["first"] and kwargs.get("live")):
            publish(self, *args, **kwargs)

    _call.Call._publish = published  # type: ignore[method-assign]

    def ends_here(on: bool) -> None:
        runtime.call_ends = None if on else worker

    def unpublished(on: bool) -> None:
        skip["publish"] = on

    def no_first(on: bool) -> None:
        skip["first"] = on

    def both(on: bool) -> None:
        ends_here(on)
        unpublished(on)

    telemetry = runtime.telemetry
    own = telemetry.own_events

    def through_the_sdk(on: bool) -> None:
        telemetry.own_events = None if on else own

    return {
        "cw, ends on the caller": ends_here,
        "cw, no snapshot": unpublished,
        "cw, no first snapshot": no_first,
        "cw, neither": both,
        "cw, events through the SDK": through_the_sdk,
    }


def _installed_peers(client: str, only: str) -> dict[str, Callable[[bool], None]]:
    """The peer named ``only`` if it observes ``client`` and imports here (in a venv beside cw: the module docstring)."""
    found = {}
    for name, (observes, spec) in PEERS.items():
        if observes != client or name != only:
            continue
        try:
            found[name] = _peer(spec)
        except ImportError:
            print(f"  ({name} for {client} is not installed: left out)", flush=True)
    return found


def _each_peer(argv: list[str]) -> int:
    """``--peers``: this benchmark once per peer, each in a process of its own."""
    for name in PEERS:
        print(f"== {name} ({PEERS[name][0]})", flush=True)
        subprocess.run([sys.executable, __file__, *argv, "--peer", name], check=False)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--turns", default="25,200", help="conversation sizes: turns of benchmarks/conversation.py")
    parser.add_argument("--peers", action="store_true", help="every peer of PEERS installed here, each in a process of its own")
    parser.add_argument("--peer", choices=list(PEERS), help="one peer of PEERS as a third variant")
    parser.add_argument("--parts", action="store_true", help="cw's cost taken apart: see the module docstring")
    args = parser.parse_args()
    if args.peers:
        return _each_peer([a for a in sys.argv[1:] if a != "--peers"])
    import anthropic
    import litellm
    import openai

    export = Path(tempfile.mkdtemp()) / "telemetry.jsonl"
    cw.configure(export=f"file:{export}", provider_count="never")
    system, turns = make_turns(200)
    tools = make_tools()
    off = _peer(None)
    peers = {client: _installed_peers(client, args.peer) if args.peer else {} for client in ("openai", "anthropic")}
    oa_bare = openai.OpenAI(
        api_key="sk-bench", base_url="http://mock.invalid/v1", http_client=_mock("openai", OPENAI_BODY), max_retries=0
    )
    an_bare = anthropic.Anthropic(
        api_key="sk-bench", base_url="http://mock.invalid", http_client=_mock("anthropic", ANTHROPIC_BODY), max_retries=0
    )
    oa_cw, an_cw = cw.wrap(oa_bare), cw.wrap(an_bare)
    if args.parts:
        an_cw.messages.create(**anthropic_request(system, turns, 1, tools))  # the runtime and its call-end worker exist
    parts = _parts() if args.parts else {}
    print(f"load average {os.getloadavg()[0]:.1f}, {args.calls} calls a variant, CPU of all threads per call (ms)")
    for upto in (int(t) for t in args.turns.split(",")):

        def oa_request(upto: int = upto) -> dict[str, Any]:
            return {"model": "gpt-4o", "messages": request_at(system, turns, upto), "tools": tools}

        def an_request(upto: int = upto) -> dict[str, Any]:
            return anthropic_request(system, turns, upto, tools)

        def lt_request(upto: int = upto) -> dict[str, Any]:
            return {"model": "gpt-4o", "messages": request_at(system, turns, upto), "tools": tools, "mock_response": "done"}

        tokens = cw.estimate(model="gpt-4o", messages=request_at(system, turns, upto), tools=tools).input_tokens
        for client, bare, observed, request in (
            ("openai", oa_bare.chat.completions.create, oa_cw.chat.completions.create, oa_request),
            ("anthropic", an_bare.messages.create, an_cw.messages.create, an_request),
            ("litellm", litellm.completion, cw.completion, lt_request),
        ):
            variants: dict[str, Variant] = {"bare": (bare, request, off), "cw": (observed, request, off)}
            variants.update({name: (bare, request, switch) for name, switch in peers.get(client, {}).items()})
            variants.update({name: (observed, request, switch) for name, switch in parts.items()})
            spent = interleaved(variants, args.calls)
            base = statistics.median(spent["bare"])
            line = f"  {client:9} ~{tokens / 1000:5.1f}k tokens: bare {base:7.2f}"
            for name in [n for n in variants if n != "bare"]:
                median = statistics.median(spent[name])
                line += f"  {name} {median:7.2f} ({median / base:.2f}x, {median - base:+.2f} ms)"
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
