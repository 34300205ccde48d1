"""A forked child's SIGTERM exports its telemetry first (issue 20 item 8), and changes nothing else.

``with multiprocessing.Pool() as pool:`` ends with ``terminate()``: SIGTERM to every worker,
which skips exit hooks, so the spans a worker had queued were lost. Now, in a forked child
where SIGTERM's handler is still the default, cw's handler exports, then ends the process as
SIGTERM would have. Each test runs Python processes of its own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import cw_middleware as cw

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(not hasattr(os, "fork") or not hasattr(signal, "SIGTERM"), reason="os.fork and SIGTERM are POSIX"),
]


def _env(path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "CW_EXPORT": f"file:{path}", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


# Issue 37: every start method, ended by terminate() (``with Pool()``) or by close(); join(). A spawn or
# forkserver worker imports cw after it starts, so no at-fork hook ran there: it joins at import (runtime.py).
@pytest.mark.parametrize("end", ["with", "close"])
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_every_call_of_pool_workers_is_read_back_whatever_started_and_ended_them(tmp_path, method, end):
    path = tmp_path / "telemetry.jsonl"
    workers, calls = 4, 40
    with open(tmp_path / "stderr.txt", "w") as errors:
        proc = subprocess.run(
            [sys.executable, str(ROOT / "tests" / "pool_terminate.py"), str(path), str(workers), str(calls), method, end],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            timeout=180,
            env=_env(path),
        )
    assert proc.returncode == 0, (tmp_path / "stderr.txt").read_text()[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["calls"] == calls
    assert set(report["exit_codes"]) <= {0, -signal.SIGTERM}  # ended by the exit hook or by SIGTERM, as before
    reader = cw.reader(f"file:{path}")
    stages = {s.stage_id for s in reader.stages("pool")}
    assert stages == {f"s{i}" for i in range(calls)}
    missing = [i for i in range(calls) if reader.context_window("pool", f"s{i}").count_method is None]
    assert missing == []


_RULES = r"""
import json, os, signal, sys
import cw_middleware as cw

def child_handler():
    pid = os.fork()
    if pid == 0:
        os.write(w, type(signal.getsignal(signal.SIGTERM)).__name__.encode())
        os._exit(0)
    os.waitpid(pid, 0)
    return os.read(r, 100).decode()

r, w = os.pipe()
out = {"parent_default": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL}
out["child_of_default"] = child_handler()
mine = lambda signum, frame: None
signal.signal(signal.SIGTERM, mine)
out["child_of_own_handler"] = child_handler()
out["parent_after"] = signal.getsignal(signal.SIGTERM) is mine
signal.signal(signal.SIGTERM, signal.SIG_IGN)
out["child_of_ignored"] = child_handler()
print(json.dumps(out))
"""


def test_the_handler_goes_only_where_sigterm_was_the_default_and_never_into_the_parent(tmp_path):
    proc = subprocess.run([sys.executable, "-c", _RULES], capture_output=True, text=True, timeout=120, env=_env(tmp_path / "t"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {
        "parent_default": True,  # importing cw changes nothing in the process itself
        "child_of_default": "Handler",
        "child_of_own_handler": "function",  # the application's, inherited: never replaced
        "parent_after": True,
        "child_of_ignored": "Handlers",
    }


_CHILD = r"""
import os, signal, sys, time
import litellm
import cw_middleware as cw
from cw_middleware._embedded import sink
mode = sys.argv[1]
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    if mode == "during-exit":
        # The exit hook is writing the child's spans when SIGTERM comes (a Pool worker given its
        # sentinel, then terminate()): the write must finish, then the process ends by SIGTERM.
        append = sink.JsonLinesFile.append
        def append_after_sigterm(self, line, *args, **kwargs):
            if not getattr(self, "signalled", False):
                self.signalled = True
                os.kill(os.getpid(), signal.SIGTERM)
                import time
                time.sleep(0.3)  # the handler runs meanwhile, on the main thread
            return append(self, line, *args, **kwargs)
        sink.JsonLinesFile.append = append_after_sigterm
    with cw.stage("terminated", mode):
        cw.completion(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], mock_response="ok")
    os.write(w, b"called")
    if mode == "during-exit":
        sys.exit(0)  # the exit hook runs, and is interrupted
    while True:  # waits for the parent's SIGTERM, as an idle Pool worker waits for its next task
        # Not signal.pause(): it returns only for a signal delivered to this thread, and the kernel may give
        # the process's SIGTERM to a thread of LiteLLM's; Python runs the handler here at the next bytecode.
        time.sleep(0.05)
os.close(w)
assert os.read(r, 10) == b"called"
if sys.argv[1] == "idle":
    os.kill(pid, signal.SIGTERM)
_, status = os.waitpid(pid, 0)
print(os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM)
"""


@pytest.mark.parametrize("mode", ["idle", "during-exit"])
def test_a_child_ended_by_sigterm_exports_first_and_still_ends_by_sigterm(tmp_path, mode):
    path = tmp_path / "telemetry.jsonl"
    proc = subprocess.run([sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, timeout=120, env=_env(path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["True"]  # killed by SIGTERM, as without cw
    window = cw.reader(f"file:{path}").context_window("terminated", mode)
    assert window.available and window.count_method is not None


_KILLED_MID_CALL = r"""
import os, signal, sys, threading, time
sys.path.insert(0, sys.argv[2])
from providers import CHAT, running_provider
import cw_middleware as cw
cw.completion(model="gpt-4o", messages=[{"role": "user", "content": "warm-up"}], mock_response="ok")
cw.flush()  # the tokenizer is loaded: the held call's estimate is there at once, as in a running agent
serving = running_provider()  # held, never left: the provider holds the call until the process ends
provider = serving.__enter__()
provider.hold(CHAT)
def call():
    with cw.stage("killed", "mid-call@1"):
        cw.completion(model="openai/gpt-4o", messages=[{"role": "user", "content": "hi"}],
                      api_base=provider.url + "/v1", api_key="sk-test")
threading.Thread(target=call, daemon=True).start()
provider.wait_for_hits(CHAT, 1, timeout=30)
time.sleep(float(sys.argv[1]))
if sys.argv[3] == "exit":
    sys.exit(0)  # the interpreter's exit: atexit runs; the call's thread is a daemon, still waiting
os.kill(os.getpid(), signal.SIGTERM)  # the default action: no exit hook runs
time.sleep(30)
"""


@pytest.mark.parametrize("how", ["exit", "sigterm"])
def test_a_process_that_ends_mid_call_leaves_the_calls_first_snapshot_in_the_file(tmp_path, how):
    """Issue 36 item 1: the live snapshot is in the backend within a second of the send, so an exit (or a SIGTERM
    that runs no exit hook) while the provider still holds the call leaves the call there."""
    path = tmp_path / "telemetry.jsonl"
    env = _env(path)
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED_MID_CALL, "1.0", str(ROOT / "tests"), how],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode in (0, -signal.SIGTERM), proc.stderr[-3000:]
    window = cw.reader(f"file:{path}").context_window("killed", "mid-call@1")
    assert window.available and window.count_method.value == "local_estimate"
