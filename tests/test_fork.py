"""Fork under load: a child forked while other threads are inside cw makes its call, exports and exits.

Gunicorn, Celery prefork and multiprocessing fork a process whose threads may hold any
of cw's locks (the estimator's, the telemetry file's, the SDK's metric locks) at that
instant. Each child here makes a call in a stage of its own and flushes; none may hang,
each call returns what LiteLLM returns, and each child's snapshot is read back from the
file, so its telemetry pipeline (its own, built after the fork) works. One process of
fork_load.py per mode (~10 s each, most of it importing LiteLLM).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import cw_middleware as cw

SCRIPT = Path(__file__).with_name("fork_load.py")


@pytest.mark.system
@pytest.mark.parametrize(("mode", "children"), [("fork", 40), ("multiprocessing", 12)])
def test_children_forked_under_load_neither_hang_nor_lose_telemetry(tmp_path, mode, children):
    path = tmp_path / "telemetry.jsonl"
    # stderr to a file, not a pipe: the children's copies of the parent's event loops are garbage
    # there, and asyncio logs each pending task it collects (LiteLLM's logging worker: thousands
    # of lines) -- a pipe read by one reader would block them on their writes.
    with open(tmp_path / "stderr.txt", "w") as errors:
        proc = subprocess.run(
            [sys.executable, str(SCRIPT), str(path), str(children), mode],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            timeout=120,
            env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin"},
        )
    assert proc.returncode == 0, (tmp_path / "stderr.txt").read_text()[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"\n{mode}: {report}")
    assert report["hung"] == [], report
    assert report["failed"] == {}, report
    assert report["calls_during_forks"] >= children  # the threads kept calling through cw while it forked
    reader = cw.reader(f"file:{path}")
    missing = [i for i in range(children) if not reader.context_window("forked", f"child-{i}").available]
    assert missing == []


_ONE_HOOK = r"""
import json, os, sys
registered = []
real = os.register_at_fork
def counting(**hooks):
    frame = sys._getframe(1)
    registered.append(frame.f_globals.get("__name__", "?"))
    return real(**hooks)
os.register_at_fork = counting
import cw_middleware as cw  # every module of the package the call path loads
from cw_middleware import wrapper, estimator, embedded, provider_count  # noqa: F401
from cw_middleware.rules import _tiktoken
with _tiktoken.calls_in_flight():  # a call in flight in the parent while it forks
    pid = os.fork()
    if pid == 0:
        os._exit(0 if _tiktoken.calls_in_flight().count == 0 else 3)
_, status = os.waitpid(pid, 0)
print(json.dumps({"hooks": [m for m in registered if m.startswith("cw_middleware")], "child": os.waitstatus_to_exitcode(status)}))
"""


def test_one_at_fork_hook_owns_the_childs_reset():
    """process.py is the one owner: a second hook elsewhere would run in an order nobody chose."""
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = subprocess.run([sys.executable, "-c", _ONE_HOOK], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["hooks"] == ["cw_middleware.process"]
    # The child starts with none of its parent's calls: its tokenizer loader does not hold back for them.
    assert report["child"] == 0


_HELD_AT_FORK = r"""
import json, os, signal, threading
import cw_middleware as cw
from cw_middleware import _log
from cw_middleware.apis import chat
from cw_middleware.process import PROCESS

with cw.stage("fork-locks", "warm-up"):  # the call path makes its parts of the process state
    cw.completion(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], mock_response="ok")
cw.instrument()
cw.uninstrument()
chat.remember_refusal("openai", {"api_base": "http://refusing"})
parts = list(PROCESS._parts.values())
LOCKS = (type(threading.Lock()), type(threading.RLock()))
locks = [v for part in parts for v in vars(part).values() if isinstance(v, LOCKS)]
locks += [log._lock for log in PROCESS.part(_log._EveryLog).logs]
held, release = threading.Event(), threading.Event()

def inside_cw():  # a thread holding every lock of the process state while the process forks
    for lock in locks:
        lock.acquire()
    held.set()
    release.wait()

threading.Thread(target=inside_cw, daemon=True).start()
held.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(20)  # a lock copied held would hang the child: the alarm ends it with a failure
    renewed = [v for part in parts for v in vars(part).values() if isinstance(v, LOCKS)]
    renewed += [log._lock for log in PROCESS.part(_log._EveryLog).logs]
    free = all(lock.acquire(timeout=1) for lock in renewed)
    for lock in renewed:
        lock.release()
    cw.instrument()
    cw.uninstrument()
    chat.remember_refusal("openai", {"api_base": "http://child"})
    with cw.stage("fork-locks", "child"):
        cw.completion(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], mock_response="ok")
    os._exit(0 if free and cw.flush(10) else 4)
_, status = os.waitpid(pid, 0)
print(json.dumps({"locks": len(locks), "child": os.waitstatus_to_exitcode(status)}))
"""


@pytest.mark.system
def test_a_fork_renews_every_lock_of_the_process_state(tmp_path):
    """A thread holding cw's locks while the process forks: the child's copies would stay held without the hook."""
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "CW_EXPORT": f"file:{tmp_path / 'telemetry.jsonl'}"}
    proc = subprocess.run([sys.executable, "-c", _HELD_AT_FORK], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["locks"] >= 6  # the install lock, the patches', the refusals', the litellm import's, the loader's, logs'
    assert report["child"] == 0
    window = cw.reader(f"file:{tmp_path / 'telemetry.jsonl'}").context_window("fork-locks", "child")
    assert window.available
