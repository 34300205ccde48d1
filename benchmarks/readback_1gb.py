"""Read-back on a 1 GB telemetry file: cold and warm timings and peak memory, against the pre-index reader.

    python benchmarks/readback_1gb.py [--mb 1024] [--file PATH] [--keep] [--no-baseline]
    python benchmarks/readback_1gb.py generate PATH [--mb N] [--seed-calls N]
    python benchmarks/readback_1gb.py query PATH QUERY [--baseline]      (one query, one JSON line)
    python benchmarks/readback_1gb.py build PATH                         (a cold index build alone, one JSON line)

The file is written once into a temporary directory (or PATH): a seed through the real embedded
pipeline (Telemetry -> BatchSpanProcessor -> OTLP JSON lines, 512 spans a line, two snapshots a
call), many runs of ten stages each (one run in four with a non-ASCII id, as our writer stores it:
raw UTF-8), plus one long run (`run-long`) that is present throughout; then the seed is repeated
with its run ids renamed per copy (`run-7` -> `run-k3-7`) and the long run given a new stage per
copy, up to the size asked for.

Each query runs in a fresh process (peak RSS is that process's high-water mark, VmHWM): ``cold`` with an empty
index directory (the first query builds the index), ``warm`` in a new process with the index on disk,
``again`` the same query a second time in that process (what `serve` pays per request), and the
baseline (`baseline_file_reader.py`, the reader before the index) in its own process.

Before the queries, the cold index build alone (a fresh process, an empty index directory) against
the floor of reading the file once: ``cat FILE > /dev/null`` and a Python loop of 8 MB reads, in
the same run (the file is in the page cache by then: what is measured is the CPU cost).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LONG_RUN = "run-long"


def non_ascii(run: int) -> bool:
    return run % 4 == 3


def run_name(run: int, copy: int = 0) -> str:
    prefix = "rün" if non_ascii(run) else "run"
    tag = f"k{copy}-" if copy else ""
    return f"{prefix}-{tag}{run}-ü" if non_ascii(run) else f"{prefix}-{tag}{run}"


def write_seed(path: str, calls: int) -> int:
    """The seed through the real pipeline; returns the number of runs it holds."""
    from cw_middleware._counting.model_facts import RequestMeta
    from cw_middleware._embedded import install
    from cw_middleware._kernel.config import resolve
    from cw_middleware._kernel.contract import Category, CountMethod, StageInfo
    from cw_middleware._snapshots.build import SnapshotParts, build_snapshot
    from cw_middleware._snapshots.telemetry import Telemetry

    cfg = resolve(export=f"file:{path}", environ={}, export_queue_size=1_000_000)
    parts = SnapshotParts()
    pipeline = install(cfg)
    tel = Telemetry(cfg, pipeline.tracer_provider, pipeline.meter_provider)
    by_source = {
        (Category.SYSTEM_PROMPT, "system"): 1200,
        (Category.TOOLS, "native"): 3400,
        (Category.MCP_TOOLS, "mcp:github"): 900,
        (Category.MEMORY, "AGENTS.md"): 700,
        (Category.CONVERSATION, "user"): 5000,
        (Category.SKILLS, "skill:pdf"): 300,
    }
    long_stage = StageInfo(LONG_RUN, "watch@1")
    long_cm = tel.stage_span(long_stage)
    long_cm.__enter__()
    done, run = 0, 0
    while done < calls:
        for s in range(10):
            info = StageInfo(run_name(run), f"stage-{s}@1", "agent" if s % 5 else "tool")
            with tel.stage_span(info):
                if info.kind != "agent":
                    continue
                for c in range(20):
                    stage = long_stage if c == 0 else info  # the long run gets a call now and then
                    meta = RequestMeta(stage.run_id, stage.stage_id, "openai", "gpt-4o", 128000)
                    call = tel.start_call("chat", "openai", "gpt-4o", stage)
                    call.record(build_snapshot(by_source, meta, CountMethod.LOCAL_ESTIMATE, parts=parts))
                    total = 11000 + c
                    call.record(
                        build_snapshot(by_source, meta, CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN, total=total, parts=parts)
                    )
                    call.end(input_tokens=total, output_tokens=10)
                    done += 1
        run += 1
    long_cm.__exit__(None, None, None)
    pipeline.flush(600)
    pipeline.shutdown()
    return run


def generate(path: str, mb: int, seed_calls: int) -> dict[str, object]:
    """Write the file; what the queries need to know about it."""
    started = time.perf_counter()
    seed_path = path + ".seed"
    runs = write_seed(seed_path, seed_calls)
    with open(seed_path, "rb") as f:
        seed = f.read()
    os.remove(seed_path)
    copies = max(1, -(-mb * 1_000_000 // len(seed)))
    with open(path, "wb") as out:
        for k in range(copies):
            block = seed
            if k:
                block = block.replace(b'"run-', b'"run-k%d-' % k).replace(b'"r\xc3\xbcn-', b'"r\xc3\xbcn-k%d-' % k)
                block = block.replace(b'"run-k%d-long"' % k, b'"run-long"').replace(b'"watch@1"', b'"watch@%d"' % (k + 1))
            out.write(block)
    info = {"path": path, "bytes": os.path.getsize(path), "seed_bytes": len(seed), "runs_per_copy": runs, "copies": copies}
    info["seconds"] = round(time.perf_counter() - started, 1)
    return info


def queries(copies: int, runs: int) -> dict[str, tuple[str, ...]]:
    """Query name -> (method, args...): in the middle of the file, so neither end is favoured."""
    mid = copies // 2
    ascii_run = next(r for r in range(runs // 2, runs) if not non_ascii(r))
    other_run = next(r for r in range(runs // 2, runs) if non_ascii(r))
    return {
        "runs": ("runs",),
        "stages of the run present throughout": ("stages", LONG_RUN),
        "one stage": ("context_window", run_name(ascii_run, mid), "stage-3@1"),
        "missing stage": ("context_window", run_name(ascii_run, mid), "no-such-stage"),
        "missing stage, non-ASCII run": ("context_window", run_name(other_run, mid), "no-such-stage"),
    }


def query(path: str, call: list[str], baseline: bool, repeat: int) -> dict[str, object]:
    """Run one query `repeat` times in this process: seconds of each, peak RSS, a summary of the answer."""
    import cw_middleware as cw
    from cw_middleware._readback import Reader

    if baseline:
        sys.path.insert(0, HERE)
        from baseline_file_reader import OtlpFileReader as Baseline

        reader = Reader(Baseline(path))
    else:
        reader = cw.reader(f"file:{path}")
    rss_before = peak_rss_mb()
    seconds, answer = [], ""
    for _ in range(repeat):
        t = time.perf_counter()
        try:
            found = getattr(reader, call[0])(*call[1:])
            answer = f"{len(found)} items" if isinstance(found, list) else f"{found.count_method}"
        except cw.NotFound:
            answer = "not found"
        seconds.append(round(time.perf_counter() - t, 3))
    reader.close()
    return {"seconds": seconds, "peak_rss_mb": round(peak_rss_mb()), "rss_before_mb": round(rss_before), "answer": answer}


def build(path: str) -> dict[str, object]:
    """A cold index build alone, in this process (the caller gives it an empty CW_INDEX_DIR)."""
    from cw_middleware._readback.file_index import FileIndex

    started, cpu = time.perf_counter(), time.process_time()
    index = FileIndex(path)
    index.refresh()
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    index.close()
    return {"seconds": round(seconds, 2), "cpu_seconds": round(cpu_seconds, 2), "peak_rss_mb": round(peak_rss_mb())}


def read_floor(path: str) -> dict[str, float]:
    """Seconds to read the file once: `cat` to /dev/null, and a Python loop of 8 MB reads."""
    started = time.perf_counter()
    with open(os.devnull, "wb") as sink:
        subprocess.run(["cat", path], stdout=sink, check=True)
    cat = time.perf_counter() - started
    started = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.read(8 << 20):
            pass
    return {"cat": round(cat, 2), "python": round(time.perf_counter() - started, 2)}


def peak_rss_mb() -> float:
    """This process's peak RSS. Not ru_maxrss: Linux carries that over from the parent through vfork and exec."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _subprocess_query(path: str, call: tuple[str, ...], env: dict[str, str], baseline: bool = False) -> dict[str, object]:
    argv = [sys.executable, os.path.abspath(__file__), "query", path, json.dumps(list(call))]
    if baseline:
        argv.append("--baseline")
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "generate":
        p = argparse.ArgumentParser(prog="readback_1gb.py generate")
        p.add_argument("path")
        p.add_argument("--mb", type=int, default=1024)
        p.add_argument("--seed-calls", type=int, default=5000)
        a = p.parse_args(sys.argv[2:])
        print(json.dumps(generate(a.path, a.mb, a.seed_calls)))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "build":
        print(json.dumps(build(sys.argv[2])))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "query":
        p = argparse.ArgumentParser(prog="readback_1gb.py query")
        p.add_argument("path")
        p.add_argument("call", help="a JSON list: method, args...")
        p.add_argument("--baseline", action="store_true")
        p.add_argument("--repeat", type=int, default=2)
        a = p.parse_args(sys.argv[2:])
        print(json.dumps(query(a.path, json.loads(a.call), a.baseline, a.repeat)))
        return 0

    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=1024)
    parser.add_argument("--seed-calls", type=int, default=5000)
    parser.add_argument("--file", help="reuse (or write) the file here")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--no-baseline", action="store_true", help="skip the pre-index reader (minutes on 1 GB)")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="cw-bench-1gb-")
    path = args.file or os.path.join(workdir, "telemetry.jsonl")
    meta_path = path + ".json"
    if os.path.exists(path) and os.path.exists(meta_path):
        with open(meta_path) as f:
            info = json.load(f)
        print(f"reusing {path} ({info['bytes'] / 1e6:.0f} MB)")
    else:
        info = generate(path, args.mb, args.seed_calls)
        with open(meta_path, "w") as f:
            json.dump(info, f)
        print(f"wrote {info['bytes'] / 1e6:.0f} MB in {info['seconds']} s ({info['copies']} copies of the seed): {path}")

    env = {k: v for k, v in os.environ.items() if k != "CW_INDEX_DIR"}
    index_dir = os.path.join(workdir, "index")
    floor = read_floor(path)  # first: it brings the file into the page cache for what follows
    floor = read_floor(path)
    shutil.rmtree(index_dir, ignore_errors=True)
    argv = [sys.executable, os.path.abspath(__file__), "build", path]
    done = subprocess.run(argv, env={**env, "CW_INDEX_DIR": index_dir}, capture_output=True, text=True, check=True)
    cold = json.loads(done.stdout.strip().splitlines()[-1])
    after = read_floor(path)
    reads = min(floor["python"], after["python"]), min(floor["cat"], after["cat"])
    print(
        f"cold index build: {cold['seconds']} s ({cold['cpu_seconds']} s CPU), peak RSS {cold['peak_rss_mb']} MB; "
        f"reading the file once: {reads[0]} s in Python, {reads[1]} s with cat: the build is "
        f"{cold['seconds'] / max(reads[0], 1e-3):.0f}x the Python read"
    )
    print(f"{'query':<32} {'cold s':>8} {'warm s':>8} {'again s':>8} {'RSS MB':>7} {'base s':>8} {'base MB':>8} {'x':>7}  answer")
    for label, call in queries(int(info["copies"]), int(info["runs_per_copy"])).items():
        shutil.rmtree(index_dir, ignore_errors=True)
        env["CW_INDEX_DIR"] = index_dir
        cold = _subprocess_query(path, call, env)
        warm = _subprocess_query(path, call, env)
        rss = max(int(cold["peak_rss_mb"]), int(warm["peak_rss_mb"]))  # type: ignore[call-overload]
        line = f"{label:<32} {cold['seconds'][0]:>8.2f} {warm['seconds'][0]:>8.2f} {warm['seconds'][1]:>8.3f} {rss:>7}"  # type: ignore[index]
        if not args.no_baseline:
            base = _subprocess_query(path, call, env, baseline=True)
            ratio = base["seconds"][0] / max(warm["seconds"][0], 1e-3)  # type: ignore[index]
            line += f" {base['seconds'][0]:>8.2f} {base['peak_rss_mb']:>8} {ratio:>6.0f}x"  # type: ignore[index]
        print(f"{line}  {warm['answer']}", flush=True)
    print(f"index on disk: {sum(os.path.getsize(os.path.join(index_dir, n)) for n in os.listdir(index_dir)) / 1e6:.1f} MB")
    if not args.keep and not args.file:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
