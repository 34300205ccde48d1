"""The first call of each model family through each official client, bare and observed (issue 38).

    python benchmarks/first_calls.py [--runs 5]

Each measurement is a fresh process: it imports the client's SDK and cw_middleware (outside the
timing, as an application has them loaded when it serves its first request), makes the client on an
httpx ``MockTransport`` answering in the provider's format (no server, no network), reaches the
resource the call goes through (made on first use; ``wrap()`` makes it), and times its first
``create`` / ``generate_content`` until it returns (wall time, as an agent waits for its first answer):
bare, then in another process the same through ``cw.wrap(client)``, alternating, the embedded default
export to a temporary file. cw's estimate of a first call waits for its tokenizer off the caller's
thread, so what the caller pays is the call's return. Reported: the medians and what cw added (goal: at
most +50 ms), with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
MODE, SDK = sys.argv[1], sys.argv[2]
BODIES = {
    "openai": {"id": "c1", "object": "chat.completion", "created": 1, "model": "gpt-4o",
               "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}],
               "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}},
    "anthropic": {"id": "m1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                  "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn", "stop_sequence": None,
                  "usage": {"input_tokens": 9, "output_tokens": 1}},
    "google": {"candidates": [{"content": {"role": "model", "parts": [{"text": "hi"}]}, "finishReason": "STOP"}],
               "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 1, "totalTokenCount": 10},
               "modelVersion": "gemini-2.5-flash"},
}
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi in one word."}]
if SDK == "google":
    from google import genai
    from google.genai import types
    import httpx
    http = httpx
else:
    import importlib
    module = importlib.import_module(SDK)
    base = importlib.import_module(f"{SDK}._base_client")
    http = getattr(base, "httpx2", None) or base.httpx
import cw_middleware as cw
transport = http.MockTransport(lambda request: http.Response(200, json=BODIES[SDK]))
if SDK == "openai":
    client = module.OpenAI(api_key="k", base_url="http://mock.invalid/v1", http_client=http.Client(transport=transport))
    send = lambda c: c.chat.completions.create(model="gpt-4o", messages=MESSAGES)
elif SDK == "anthropic":
    client = module.Anthropic(api_key="k", base_url="http://mock.invalid", http_client=http.Client(transport=transport))
    send = lambda c: c.messages.create(model="claude-sonnet-4-5", max_tokens=16, system=MESSAGES[0]["content"],
                                       messages=MESSAGES[1:])
else:
    client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url="http://mock.invalid",
                                                                       httpx_client=http.Client(transport=transport)))
    send = lambda c: c.models.generate_content(model="gemini-2.5-flash", contents=MESSAGES[1]["content"],
                                               config=types.GenerateContentConfig(system_instruction=MESSAGES[0]["content"]))
observed = cw.wrap(client) if MODE == "cw" else client
touch = {"openai": lambda c: c.chat.completions, "anthropic": lambda c: c.messages, "google": lambda c: c.models}[SDK]
touch(observed)  # the resource objects, made on first use: wrap() makes them, so the bare side does too, untimed
start = time.perf_counter()
send(observed)
spent = time.perf_counter() - start
print(json.dumps({"ms": spent * 1000}))
"""


def run(mode: str, sdk: str, folder: str) -> float:
    env = {**os.environ, "CW_EXPORT": f"file:{folder}/telemetry-{mode}-{sdk}.jsonl", "CW_PROVIDER_COUNT": "never"}
    done = subprocess.run([sys.executable, "-c", CHILD, mode, sdk], capture_output=True, text=True, env=env, timeout=300)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    return float(json.loads(done.stdout.strip().splitlines()[-1])["ms"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="cw-first-calls-")
    print(f"load average {os.getloadavg()[0]:.1f}, {args.runs} fresh processes each, the first call's wall time (ms)")
    for sdk, family in (("openai", "gpt-4o"), ("anthropic", "claude-sonnet-4-5"), ("google", "gemini-2.5-flash")):
        bare, observed = [], []
        for _ in range(args.runs):
            bare.append(run("bare", sdk, folder))
            observed.append(run("cw", sdk, folder))
        b, c = statistics.median(bare), statistics.median(observed)
        print(f"  {sdk:9} {family:18} bare {b:7.1f}  cw.wrap {c:7.1f}  added {c - b:+6.1f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
