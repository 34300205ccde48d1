"""`serve` stays up while its telemetry file is truncated and rewritten under a scan (copytruncate
rotation): every answer is JSON (200, 404 or a 502/503 error), never a dead process. The server
runs as its own process, so a crash is seen as one. (~25 s)"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from embedded_helpers import embedded_runtime

import cw_middleware as cw


@pytest.mark.system  # seconds of sockets and threads: the fast tier stays under 3 minutes
def test_serve_survives_a_file_truncated_during_scans(tmp_path):
    path = tmp_path / "t.jsonl"
    with embedded_runtime(export=f"file:{path}") as runtime:
        for i in range(5):
            with cw.stage("run-trunc", f"agent@{i}"):
                cw.completion(model="gpt-4o", messages=[{"role": "user", "content": "hi " * 50}], mock_response="ok")
        runtime.flush(5.0)
    big = path.read_bytes() * 300  # a few MB: scans take long enough to be cut
    path.write_bytes(big)
    argv = [sys.executable, "-m", "cw_middleware", "serve", "--backend", f"file:{path}", "--port", "0"]
    server = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stderr.readline() if server.stderr else ""
        url = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
        assert url, line
        answers: dict[object, int] = {}
        stop = threading.Event()

        def hammer() -> None:
            while not stop.is_set():
                try:
                    with urllib.request.urlopen(url.group(1) + "/api/v1/runs/run-trunc/stages", timeout=10) as r:
                        json.loads(r.read())
                        status: object = r.status
                except urllib.error.HTTPError as err:
                    status = (err.code, json.loads(err.read())["error"]["code"])
                except OSError as err:
                    status = type(err).__name__
                answers[status] = answers.get(status, 0) + 1

        threads = [threading.Thread(target=hammer) for _ in range(3)]
        for t in threads:
            t.start()
        for _ in range(20):
            with open(path, "r+b") as f:
                f.truncate(len(big) // 3)
            time.sleep(0.05)
            with open(path, "ab") as f:
                f.write(big[len(big) // 3 :])
            time.sleep(0.05)
        stop.set()
        for t in threads:
            t.join()
        assert server.poll() is None, f"serve died (exit {server.returncode}); answers: {answers}"
        assert answers.get(200, 0) > 0
        assert all(isinstance(k, int) or (isinstance(k, tuple) and k[0] in (404, 502, 503, 504)) for k in answers), answers
    finally:
        server.terminate()
        server.wait(5)
