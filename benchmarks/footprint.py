"""What observing costs an openai-only program (issue 35): instrument()'s CPU, the first call, memory, stdout.

Each figure is read in fresh interpreters, since what a process imports and holds is the process's:

* ``instrument()``: CPU of all threads from before ``cw.instrument()`` to when its background
  tokenizer load is done, over ``import openai`` (goal <= 1 s);
* the first call: CPU of the first ``chat.completions.create`` through ``cw.wrap(client)`` against the
  bare client's first call in another process (goal <= +50 ms), medians of ``--runs`` processes;
* memory: RSS after ``--calls`` calls through ``cw.wrap(client)`` against the bare client's (goal <= +60 MB),
  medians of ``--runs`` processes each: a burst of mocked calls outruns the tokenizer's load, and how many
  wait for it (what their objects leave behind in the allocator) moves a process's figure by +-2 MB;
* stdout: the bytes the observed program wrote (goal 0), with a model name LiteLLM does not know.

The client talks to an in-process ``MockTransport`` (no server, no network). Run:
``python benchmarks/footprint.py [--runs 5] [--calls 5000]``; the load is printed beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, os, resource, sys, time, threading
MODE, CALLS = sys.argv[1], int(sys.argv[2])
cpu = time.process_time
t0 = cpu()
import openai
import openai._base_client as base
transport_module = getattr(base, "httpx2", None) or base.httpx  # the HTTP library this openai release uses
t1 = cpu()
BODY = {"id": "c1", "object": "chat.completion", "created": 1, "model": "my-local-model",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}}
handler = lambda request: transport_module.Response(200, json=BODY)
client = openai.OpenAI(api_key="k", base_url="http://127.0.0.1:9/v1",
                       http_client=transport_module.Client(transport=transport_module.MockTransport(handler)))
out = {"import_openai": t1 - t0}
if MODE == "instrument":
    import cw_middleware as cw
    start = cpu()
    cw.instrument()
    from cw_middleware._counting.rules import _tiktoken
    _tiktoken.encoding("o200k_base")  # wait for the background load instrument() started
    out["instrument"] = cpu() - start
else:
    if MODE == "wrap":
        import cw_middleware as cw
        client = cw.wrap(client)
    messages = [{"role": "user", "content": "hello"}]
    start = cpu()
    client.chat.completions.create(model="my-local-model", messages=messages)
    out["first_call"] = cpu() - start
    for _ in range(CALLS - 1):
        client.chat.completions.create(model="my-local-model", messages=messages)
    if MODE == "wrap":
        cw.flush()
    with open("/proc/self/statm") as f:
        out["rss_mb"] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    out["litellm"] = "litellm" in sys.modules
print(json.dumps(out), file=sys.stderr)
"""


def run(mode: str, calls: int) -> tuple[dict, int]:
    env = {**os.environ, "CW_EXPORT": "none"}
    done = subprocess.run([sys.executable, "-c", CHILD, mode, str(calls)], capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    return json.loads(done.stderr.strip().splitlines()[-1]), len(done.stdout.encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5000)
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f}")
    instrument = [run("instrument", 1)[0]["instrument"] for _ in range(args.runs)]
    bare_first, wrap_first, stdout = [], [], 0
    for _ in range(args.runs):
        bare_first.append(run("bare", 1)[0]["first_call"])
        result, written = run("wrap", 1)
        wrap_first.append(result["first_call"])
        stdout += written
    bare_rss, wrap_rss, imported = [], [], set()
    for _ in range(args.runs):
        bare_rss.append(run("bare", args.calls)[0]["rss_mb"])
        wrapped, written = run("wrap", args.calls)
        wrap_rss.append(wrapped["rss_mb"])
        imported.add(wrapped["litellm"])
        stdout += written
    med = statistics.median
    runs = sorted(round(x * 1e3) for x in instrument)
    print(f"instrument() CPU over import openai: median {med(instrument) * 1e3:.0f} ms (runs: {runs})")
    print(
        f"first call: bare {med(bare_first) * 1e3:.1f} ms, wrap {med(wrap_first) * 1e3:.1f} ms, "
        f"+{(med(wrap_first) - med(bare_first)) * 1e3:.1f} ms (medians of {args.runs} processes)"
    )
    print(
        f"RSS after {args.calls} calls: bare {med(bare_rss):.1f} MB, wrap {med(wrap_rss):.1f} MB, "
        f"+{med(wrap_rss) - med(bare_rss):.1f} MB (medians of {args.runs} processes; wrap's runs: "
        f"{sorted(round(x, 1) for x in wrap_rss)}); LiteLLM imported: {any(imported)}"
    )
    print(f"stdout bytes of the observed programs: {stdout}")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
