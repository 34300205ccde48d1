"""How fast does the live page follow the agent, and what do open event streams cost `serve`?

    python benchmarks/live_page.py [--updates 20] [--streams 50] [--requests 2000]

`cw-middleware serve` runs as its own process on a telemetry file that a real agent writes
(`cw.completion` through LiteLLM with ``mock_response``, flushed after each call):

- page latency: headless Chromium (Debian's, through chromium-driver) shows the run's page;
  for each of ``--updates`` calls, the time from the flush returning (the snapshot is in
  the file) to the page showing the new number (the page stamps ``data-updated-at`` with
  ``Date.now()`` when it renders an event; same machine, same clock). Median and max.
  The serve default polls every 0.5 s, so the median is about half that plus the render.
- stream memory: RSS of the serve process (``/proc/PID/status``) idle, then with
  ``--streams`` open event streams on the run, each having received its first events.
- load: ``--requests`` requests over 20 threads against the JSON API; p50, p99, max.

Times on a shared 2-core machine are noisy; the memory figure is not.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import cw_middleware as cw  # noqa: E402

RUN = "bench-live"


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _serve(path: Path) -> tuple[subprocess.Popen[str], str]:
    argv = [sys.executable, "-m", "cw_middleware", "serve", "--backend", f"file:{path}", "--port", "0"]
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    line = process.stderr.readline() if process.stderr else ""
    found = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
    if not found:
        raise SystemExit(f"serve did not start: {line}")
    return process, found.group(1)


def _call(runtime, turn: int) -> None:
    with cw.stage(RUN, "agent@1"):
        cw.completion(model="gpt-4o", messages=[{"role": "user", "content": "word " * (50 * turn)}], mock_response="ok")
    runtime.flush(5.0)


def page_latency(url: str, runtime, updates: int) -> list[float]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=options)
    try:
        driver.get(f"{url}/runs/{RUN}")
        WebDriverWait(driver, 20).until(lambda d: d.execute_script("return document.querySelector('[data-field=input_tokens]')"))
        WebDriverWait(driver, 20).until(lambda d: d.find_element("id", "conn").text == "live")
        out = []
        for turn in range(2, updates + 2):
            before = int(driver.execute_script("return Number(document.body.dataset.updates || 0)"))
            _call(runtime, turn)
            written = time.time() * 1000
            WebDriverWait(driver, 20, poll_frequency=0.02).until(
                lambda d, b=before: d.execute_script("return Number(document.body.dataset.updates || 0)") > b
            )
            shown = int(driver.execute_script("return Number(document.body.dataset.updatedAt)"))
            out.append(max(0.0, shown - written))
            time.sleep(0.3)
        return out
    finally:
        driver.quit()


def stream_memory(url: str, pid: int, streams: int) -> tuple[int, int]:
    host, port = url.removeprefix("http://").split(":")
    idle = _rss_kib(pid)
    socks = []
    for _ in range(streams):
        s = socket.create_connection((host, int(port)), timeout=10)
        s.sendall(f"GET /api/v1/runs/{RUN}/events HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        data = b""
        while b"event: snapshot" not in data:
            data += s.recv(65536)
        socks.append(s)
    time.sleep(1.0)
    loaded = _rss_kib(pid)
    for s in socks:
        s.close()
    return idle, loaded


def load(url: str, requests: int) -> list[float]:
    paths = ["/healthz", "/api/v1/runs", f"/api/v1/runs/{RUN}/stages", f"/api/v1/runs/{RUN}/stages/agent@1/context-window"]

    def one(i: int) -> float:
        start = time.perf_counter()
        with urllib.request.urlopen(url + paths[i % len(paths)], timeout=30) as r:
            r.read()
        return time.perf_counter() - start

    with ThreadPoolExecutor(20) as pool:
        return sorted(pool.map(one, range(requests)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    from embedded_helpers import embedded_runtime

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "telemetry.jsonl"
        with embedded_runtime(export=f"file:{path}") as runtime:
            _call(runtime, 1)
            process, url = _serve(path)
            try:
                if os.path.exists("/usr/bin/chromium") and os.path.exists("/usr/bin/chromedriver"):
                    times = page_latency(url, runtime, args.updates)
                    print(
                        f"page update after a snapshot is written: median {statistics.median(times):.0f} ms, "
                        f"max {max(times):.0f} ms over {len(times)} (poll interval 500 ms)"
                    )
                else:
                    print("page latency: skipped (no /usr/bin/chromium or chromedriver; .ci/steps/50-chromium)")
                idle, loaded = stream_memory(url, process.pid, args.streams)
                print(
                    f"serve RSS: {idle / 1024:.1f} MiB idle, {loaded / 1024:.1f} MiB with {args.streams} open streams "
                    f"(+{(loaded - idle) / args.streams:.0f} KiB a stream)"
                )
                times = load(url, args.requests)
                print(
                    f"{args.requests} requests over 20 threads: p50 {statistics.median(times) * 1000:.1f} ms, "
                    f"p99 {times[int(len(times) * 0.99)] * 1000:.1f} ms, max {times[-1] * 1000:.1f} ms"
                )
            finally:
                process.terminate()
                process.wait(5)


if __name__ == "__main__":
    main()
