"""One telemetry-fault scenario in a process of its own: calls, flushes, then exit, reported as JSON.

``python fault_child.py SPEC.json`` runs one scenario in a fresh interpreter.
``python fault_child.py --zygote SPEC.json ...`` imports LiteLLM once, then forks one child
per scenario and reaps them all (importing LiteLLM costs seconds of CPU a process; a fork
costs milliseconds); a child ends as the interpreter does up to its teardown (see
`zygote`), printing ``{case: exit_wall_time}`` as one JSON line (None for a child that is
`overdue`: it is killed).

Each scenario has deadlines of its own, from its own progress, never one for the whole run (on
a loaded machine the last scenario to be scheduled would be called hung for the others'
slowness): `CALLS_DEADLINE` from its start to its last statement, then `EXIT_DEADLINE` from its
last statement to its exit. Both are far beyond any bound the tests assert (those are measured
against bare LiteLLM's in the same run): past them a scenario does not exit at all.

A scenario (a JSON object): ``name``, ``out`` (result file), ``log`` (the child's stderr),
``env`` (set before configuring), ``configure`` (``cw.configure`` arguments), ``calls``,
``flush_timeout``, ``flushes``, ``barrier`` (``{"dir", "n"}``: wait for all ``n`` scenarios
before flushing), ``fifo_reader`` (open this FIFO for reading and never read:
a telemetry file whose writes block once the pipe is full), ``bare`` (no cw_middleware at
all: the process-exit baseline; ``exit_with_others``: seconds it waits after the barrier,
so that it exits beside the others).

The result file holds the calls' outcome compared with bare LiteLLM's, each flush's
duration and answer, thread counts, ``last_statement_at`` (the wall time of the scenario's
last statement, from which the parent measures how long exit took), and when cw's own
exit hook started and ended (``exit_hook_start_at``, ``exit_hook_done_at``): the process's
teardown after it is the interpreter's and LiteLLM's, and on a busy machine it varies.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]
CALLS_DEADLINE = 600.0  # seconds from a scenario's start to its last statement (~5-40 s here, load 1-20)
EXIT_DEADLINE = 60.0  # seconds from its last statement to its exit (bounded to ~2 s by cw; the tests assert that)


def _comparable(response: Any) -> dict[str, Any]:
    dump = response.model_dump()
    for key in ("id", "created"):
        dump.pop(key, None)
    return dump


def run(spec: dict[str, Any]) -> None:
    os.environ.update(spec.get("env", {}))
    # Every logger's lines on stderr with their names, as a plain application would show them.
    logging.basicConfig(level=logging.WARNING, format="LOG %(levelname)s %(name)s: %(message)s")
    import litellm

    result: dict[str, Any] = {"name": spec["name"], "mismatches": 0}
    keep = None
    if spec.get("fifo_reader"):
        keep = os.open(spec["fifo_reader"], os.O_RDONLY | os.O_NONBLOCK)  # held open, never read
    if not spec.get("bare"):
        # cw's exit hook runs between these two marks (atexit runs the last registered first).
        atexit.register(_mark, result, "exit_hook_done_at", spec["out"])
        import cw_middleware as cw

        atexit.register(_mark, result, "exit_hook_start_at", spec["out"])

        cw.configure(**spec.get("configure", {}))
        result["threads_at_start"] = threading.active_count()
        calls = spec.get("calls", 20)
        started = time.monotonic()
        with cw.stage("run-faults", "agent@1"):
            for _ in range(calls):
                ours = cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="ok")
                bare = litellm.completion(model="gpt-4o", messages=MESSAGES, mock_response="ok")
                result["mismatches"] += _comparable(ours) != _comparable(bare)
        result["calls_s"] = time.monotonic() - started
        time.sleep(spec.get("sleep", 0.0))
        _barrier(spec)  # the CPU-heavy part is over everywhere: flushes and exits are timed on a quiet machine
        result["threads_before_flush"] = threading.active_count()
        result["flushes"] = []
        for _ in range(spec.get("flushes", 2)):
            t = time.monotonic()
            ok = cw.flush(timeout=spec.get("flush_timeout", 2.0))
            result["flushes"].append({"seconds": time.monotonic() - t, "ok": ok})
        result["threads_after_flush"] = threading.active_count()
        result["thread_names"] = sorted(t.name for t in threading.enumerate())
    else:
        litellm.completion(model="gpt-4o", messages=MESSAGES, mock_response="ok")
        _barrier(spec)
        time.sleep(spec.get("exit_with_others", 0.0))  # exit when the cw processes do: the same load
    result["last_statement_at"] = time.time()
    with open(spec["out"], "w") as f:
        json.dump(result, f)
    del keep  # the FIFO's read end stays open until the process is gone


def _barrier(spec: dict[str, Any]) -> None:
    """Wait (at most 60 s) until every scenario of the run has reached this point."""
    barrier = spec.get("barrier")
    if not barrier:
        return
    open(os.path.join(barrier["dir"], spec["name"]), "w").close()
    deadline = time.monotonic() + 60
    while len(os.listdir(barrier["dir"])) < barrier["n"] and time.monotonic() < deadline:
        time.sleep(0.01)


def _mark(result: dict[str, Any], key: str, out: str) -> None:
    result[key] = time.time()
    with open(out, "w") as f:
        json.dump(result, f)


def _redirect(spec: dict[str, Any]) -> None:
    fd = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 2)
    os.dup2(fd, 1)
    os.close(fd)


def last_statement_at(spec: dict[str, Any]) -> float | None:
    """When the scenario ran its last statement (wall time), once its result file says so."""
    try:
        with open(spec["out"]) as f:
            return float(json.load(f)["last_statement_at"])
    except (OSError, ValueError, KeyError):  # not yet written, or being written
        return None


def overdue(spec: dict[str, Any], started_at: float, now: float) -> bool:
    """Past the scenario's own deadline (wall times): it will not exit by itself."""
    last = last_statement_at(spec)
    return now > (started_at + CALLS_DEADLINE if last is None else last + EXIT_DEADLINE)


def zygote(paths: list[str]) -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    # Imported once, inherited by every child. cw_middleware itself is imported by each child,
    # after it registered the first of the two marks around cw's exit hook.
    import litellm  # noqa: F401
    import opentelemetry.exporter.otlp.proto.grpc.metric_exporter  # noqa: F401
    import opentelemetry.exporter.otlp.proto.grpc.trace_exporter  # noqa: F401
    import opentelemetry.exporter.otlp.proto.http.metric_exporter  # noqa: F401
    import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
    import opentelemetry.sdk.metrics  # noqa: F401
    import opentelemetry.sdk.trace  # noqa: F401

    specs = [json.load(open(p)) for p in paths]
    children: dict[int, dict[str, Any]] = {}
    started_at = time.time()
    for spec in specs:
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _redirect(spec)
                run(spec)
            except BaseException:  # noqa: BLE001
                import traceback

                traceback.print_exc()
                code = 1
            # The interpreter's exit up to its teardown: wait for non-daemon threads, run the atexit
            # hooks (cw's among them). The teardown itself is skipped: in a forked child it frees the
            # whole inherited heap page by page (seconds of CPU each, with many children at once),
            # and it is the interpreter's, the same with or without cw (fresh processes measure it).
            threading._shutdown()  # type: ignore[attr-defined]
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        children[pid] = spec
    exited: dict[str, float | None] = {}
    next_check = 0.0
    while children:
        pid, _ = os.waitpid(-1, os.WNOHANG)
        if pid:
            exited[children.pop(pid)["name"]] = time.time()
            continue
        now = time.time()
        if now >= next_check:  # a child past its own deadline is reported as such, then killed
            next_check = now + 0.5
            for pid, spec in list(children.items()):
                if overdue(spec, started_at, now):
                    exited[spec["name"]] = None
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    del children[pid]
        time.sleep(0.005)
    print(json.dumps(exited))


if __name__ == "__main__":
    if sys.argv[1] == "--zygote":
        zygote(sys.argv[2:])
    else:
        spec = json.load(open(sys.argv[1]))
        run(spec)
