"""The first query on a file cw wrote, against the same file written by another program (issue 22 gap 4).

    nice -n 10 python benchmarks/readback_written.py [--mb 200] [--seed-calls 2000]

The file is `readback_1gb.py`'s (``generate``: a seed through the real pipeline, copied with its
run ids renamed up to ``--mb``), indexed once, as cw's exporter leaves it indexed after writing
each of its lines (the index its appends extend holds what a reader's build holds:
tests/readback/test_index_append.py). Then a process exporting through the embedded default
appends a new run (three stages), extending the index as it writes. Each query runs in a fresh
process on the file cw wrote (its index on disk) and on a copy nobody indexed (an empty index
directory: the first query indexes the file, today's path for a Collector's file). Bar: <= 1 s
for any query on the file cw wrote, whatever its size.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WRITER = r"""
import os, sys
sys.path.insert(0, {root!r})
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import cw_middleware as cw
cw.configure(export="file:" + sys.argv[1])
for s in range(3):
    with cw.stage("run-written", "s@%d" % s):
        for i in range(3):
            cw.completion(model="gpt-4o", messages=[{{"role": "user", "content": "turn %d" % i}}], mock_response="ok")
assert cw.flush(30)
"""
QUERIES = {
    "show a stage of the run just written": ["context_window", "run-written", "s@2"],
    "stages of the run present throughout": ["stages", "run-long"],
    "runs": ["runs"],
}


def _run(argv: list[str], index_dir: str) -> dict:
    env = {**os.environ, "CW_INDEX_DIR": index_dir}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--seed-calls", type=int, default=2000)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="cw-bench-written-")
    one_gb = os.path.join(HERE, "readback_1gb.py")
    written, foreign = os.path.join(work, "written.jsonl"), os.path.join(work, "foreign.jsonl")
    index, empty = os.path.join(work, "index"), os.path.join(work, "empty-index")
    try:
        generate = [sys.executable, one_gb, "generate", written, "--mb", str(args.mb), "--seed-calls", str(args.seed_calls)]
        info = _run(generate, index)
        shutil.rmtree(index, ignore_errors=True)
        _run([sys.executable, one_gb, "build", written], index)  # the index as cw's exporter leaves it
        _run([sys.executable, "-c", WRITER.format(root=ROOT), written], index)  # appends, extending it
        shutil.copyfile(written, foreign)
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        size = os.path.getsize(written) / 1e6
        print(f"{time.strftime('%Y-%m-%d %H:%M')}, load average {load}: {size:.0f} MB, {info['copies']} copies of the seed")
        print(f"{'first query in a fresh process':<40} {'cw wrote it':>12} {'nobody indexed it':>18}")
        ok = True
        for label, call in QUERIES.items():
            shutil.rmtree(empty, ignore_errors=True)
            ours = _run([sys.executable, one_gb, "query", written, json.dumps(call), "--repeat", "1"], index)
            theirs = _run([sys.executable, one_gb, "query", foreign, json.dumps(call), "--repeat", "1"], empty)
            assert ours["answer"] == theirs["answer"], (ours, theirs)
            ok = ok and ours["seconds"][0] <= 1.0
            print(f"{label:<40} {ours['seconds'][0]:>10.2f} s {theirs['seconds'][0]:>16.2f} s   {ours['answer']}")
        print(f"bar: <= 1 s on the file cw wrote  {'PASS' if ok else 'FAIL'}")
        return 0 if ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
