"""The live page in a real browser: Debian's chromium driven by chromium-driver through selenium.

`cw-middleware serve` runs as its own process on a telemetry file that a real agent (LiteLLM with
mock_response, through `cw.completion`) keeps writing; the browser reaches it through a recording
proxy, so everything on the wire is searched for the prompt canary and the token. The page must
show the HTTP API's numbers, formatted as `show` formats them (the JavaScript rule is checked
against render.py's), update without a reload, ask for the token instead of showing data, and be
usable from the keyboard with text alternatives for its charts.

Needs chromium and chromedriver (.ci/steps/50-chromium): skipped without them, failed under
CW_CI=1. ~40 s. With CW_SCREENSHOT=PATH the first test saves the page there (README's picture).
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest
from embedded_helpers import embedded_runtime
from servers import require_binary

import cw_middleware as cw
from cw_middleware._kernel.formats import format_percent, format_tokens, format_usd

CANARY = "CANARY-page-91d2e7"
RUN = "run-page-1"
TOKEN = "page-t0ken-5ecret"  # noqa: S105 - a test token
HINT = "apt-get install -y --no-install-recommends chromium chromium-driver; CI: .ci/steps/50-chromium"
ROOT = Path(__file__).resolve().parents[1]


class Recorder:
    """A TCP proxy on 127.0.0.1 that forwards to the server and keeps every byte both ways."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.sent = bytearray()  # browser -> server
        self.received = bytearray()  # server -> browser
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(client, upstream, self.sent), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, self.received), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: bytearray) -> None:
        try:
            while chunk := src.recv(65536):
                with self.lock:
                    record.extend(chunk)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.closed = True
        self.listener.close()


class Serve:
    """``python -m cw_middleware serve`` on a free port, stopped by PID."""

    def __init__(self, backend: str, token: str | None = None, args: tuple[str, ...] = ()) -> None:
        argv = [sys.executable, "-m", "cw_middleware", "serve", "--backend", backend, "--port", "0", *args]
        env = {k: v for k, v in os.environ.items() if k != "CW_SERVE_TOKEN"}
        if token:
            env["CW_SERVE_TOKEN"] = token  # from the environment: never on a command line others can read
        self.process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 20
        line = ""
        while time.monotonic() < deadline:
            line = self.process.stderr.readline() if self.process.stderr else ""
            found = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
            if found:
                self.url = found.group(1)
                break
            if self.process.poll() is not None:
                raise RuntimeError(f"serve exited: {line}")
        else:
            raise RuntimeError("serve did not start in 20 s")
        self.token = token

    def api(self, path: str):
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        with urllib.request.urlopen(urllib.request.Request(self.url + path, headers=headers), timeout=10) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()


class Agent:
    """Real calls through cw.completion (LiteLLM, mock_response) into the served file."""

    def __init__(self, runtime) -> None:
        self.runtime = runtime
        self.turn = 0
        self.history: list[dict] = [
            cw.message("system", f"You review code. {CANARY}"),
            cw.message("user", f"Project notes {CANARY} " + "note " * 300, category=cw.Category.MEMORY, source="AGENTS.md"),
        ]

    TOOLS = [
        cw.tool({"type": "function", "function": {"name": "read_file", "description": f"Read a file. {CANARY} " + "text " * 80}}),
        cw.tool(
            {"type": "function", "function": {"name": "create_issue", "description": f"Open an issue. {CANARY} " + "x " * 300}},
            cw.ToolSource.mcp("github"),
        ),
    ]

    def call(self, stage: str = "review@1") -> None:
        self.turn += 1
        self.history.append({"role": "user", "content": f"step {self.turn} {CANARY} " + "word " * 150})
        with cw.stage(RUN, stage):
            reply = cw.completion(
                model="gpt-4o",
                messages=list(self.history),
                tools=self.TOOLS,
                mock_response=f"done {self.turn}",
                cw_context_window=8000,  # a small window, so the bar to scale shows it filling
            )
        self.history.append({"role": "assistant", "content": reply.choices[0].message.content})
        self.runtime.flush(5.0)


def _driver():
    chromium = require_binary("chromium", HINT)
    chromedriver = require_binary("chromedriver", HINT)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,1300"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)


@pytest.fixture
def browser():
    driver = _driver()
    yield driver
    driver.quit()


@pytest.fixture
def written(tmp_path):
    path = tmp_path / "telemetry.jsonl"
    with embedded_runtime(export=f"file:{path}") as runtime:
        agent = Agent(runtime)
        with cw.stage(RUN, "plan@1"):
            cw.completion(model="gpt-4o", messages=[{"role": "user", "content": f"plan {CANARY}"}], mock_response="ok")
        runtime.flush(5.0)
        agent.call()
        yield agent, f"file:{path}"


@pytest.fixture
def served(written):
    started = []

    def start(token=None):
        server = Serve(written[1], token)
        proxy = Recorder(("127.0.0.1", int(server.url.rsplit(":", 1)[1])))
        started.append((server, proxy))
        return server, proxy

    yield written[0], start
    for server, proxy in started:
        proxy.close()
        server.stop()


def _wait(driver, predicate, timeout=10.0, what="the page"):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda d: predicate(d), f"{what} did not settle")


def _shown(driver) -> dict:
    """What the page shows for the selected stage: exact numbers (data-tokens) and their text."""
    return driver.execute_script(
        """
        const q = (s) => document.querySelector(s);
        const total = q('[data-field=input_tokens]');
        if (!total) return null;
        const rows = {};
        document.querySelectorAll('[data-field=breakdown] tbody tr').forEach((tr) => {
          const cell = tr.querySelector('[data-tokens]');
          rows[tr.dataset.category] = [Number(cell.dataset.tokens), cell.textContent];
        });
        return {total: Number(total.dataset.tokens), text: total.textContent, usage: q('[data-field=usage]').textContent,
                rows: rows, stage: q('#stage h3').textContent, updates: Number(document.body.dataset.updates || 0)};
        """
    )


def _assert_matches_api(shown: dict, answer: dict) -> None:
    assert shown["total"] == answer["input_tokens"] and shown["text"] == format_tokens(answer["input_tokens"])
    window = answer["context_window_tokens"]
    expected_usage = f"{format_tokens(window)} tokens ({format_percent(answer['input_tokens'], window)})"
    assert shown["usage"].endswith(expected_usage), (shown["usage"], expected_usage)
    for item in answer["breakdown"]:
        assert shown["rows"][item["category"]] == [item["tokens"], format_tokens(item["tokens"])], item
    free = window - answer["input_tokens"]
    assert shown["rows"]["free"] == [free, format_tokens(free)]


@pytest.mark.system
def test_the_page_shows_the_apis_numbers_and_updates_live(served, browser):
    agent, start = served
    server, proxy = start()
    browser.get(f"{proxy.url}/runs/{RUN}#stage=review%401")
    _wait(browser, lambda d: (_shown(d) or {}).get("stage") == "Stage review@1")
    api = server.api(f"/api/v1/runs/{RUN}/stages/review@1/context-window")
    _assert_matches_api(_shown(browser), api)
    _wait(
        browser, lambda d: d.find_element("id", "conn").text == "streaming", what="the event stream"
    )  # not "live": a stage's word

    browser.execute_script("window.__not_reloaded = true")
    review = f"/api/v1/runs/{RUN}/stages/review@1/context-window"
    for _ in range(2):
        agent.call()
        expected = server.api(review)
        _wait(browser, lambda d, n=expected["input_tokens"]: _shown(d)["total"] == n, what="the new snapshot")
        _assert_matches_api(_shown(browser), expected)
    assert browser.execute_script("return window.__not_reloaded") is True
    assert len(browser.find_elements("css selector", ".timeline rect")) >= 3

    # Text alternatives and the keyboard.
    bars = browser.find_elements("css selector", ".bar[role=img]")
    assert bars and all("Conversation" in b.get_attribute("aria-label") for b in bars)
    assert "Input tokens of the last" in browser.find_element("css selector", ".timeline svg").get_attribute("aria-label")
    buttons = browser.find_elements("css selector", "#stages button")
    assert [b.get_attribute("data-stage") for b in buttons] == ["plan@1", "review@1"]
    from selenium.webdriver.common.keys import Keys

    buttons[1].send_keys(Keys.ARROW_UP)
    _wait(browser, lambda d: (_shown(d) or {}).get("stage") == "Stage plan@1", what="the keyboard selection")
    focused = browser.switch_to.active_element
    assert focused.get_attribute("data-stage") == "plan@1" and focused.get_attribute("aria-current") == "true"
    _assert_matches_api(_shown(browser), server.api(f"/api/v1/runs/{RUN}/stages/plan@1/context-window"))
    focused.send_keys(Keys.ARROW_DOWN)
    _wait(browser, lambda d: (_shown(d) or {}).get("stage") == "Stage review@1")

    if os.environ.get("CW_SCREENSHOT"):
        browser.set_window_size(1200, 1250)
        browser.save_screenshot(os.environ["CW_SCREENSHOT"])

    browser.get(proxy.url + "/")
    _wait(browser, lambda d: d.find_elements("css selector", "#runs-table tbody a"))
    assert browser.execute_script("return document.querySelector('#runs-table tbody a').textContent") == RUN

    dom = browser.page_source + browser.execute_script("return document.body.innerText")
    assert CANARY not in dom and "word word" not in dom
    with proxy.lock:
        wire = bytes(proxy.sent + proxy.received)
    assert b"/api/v1/runs/run-page-1/events" in wire and b"event: snapshot" in wire  # the stream went through the proxy
    assert CANARY.encode() not in wire and b"word word" not in wire


@pytest.mark.system
def test_the_page_mounted_under_a_path_in_a_host_app_works_the_same(written, browser):
    """cw.asgi_app() mounted at /cw in a Starlette app under uvicorn: the page's files, links, API calls and
    event stream all carry /cw, and it shows the API's numbers and the next snapshot without a reload."""
    import contextlib

    from http_servers import AsgiServer
    from starlette.applications import Starlette
    from starlette.routing import Mount

    agent, backend = written
    cw_app = cw.asgi_app(backend)

    @contextlib.asynccontextmanager
    async def lifespan(_):
        yield
        cw_app.close()

    server = AsgiServer(Starlette(routes=[Mount("/cw", app=cw_app)], lifespan=lifespan))
    try:
        browser.get(f"{server.url}/cw/")
        _wait(browser, lambda d: d.find_elements("css selector", "#runs-table tbody a"))
        href = browser.execute_script("return document.querySelector('#runs-table tbody a').href")  # re-rendered as it polls
        assert href == f"{server.url}/cw/runs/{RUN}"
        browser.get(href + "#stage=review%401")
        _wait(browser, lambda d: (_shown(d) or {}).get("stage") == "Stage review@1")
        review = f"{server.url}/cw/api/v1/runs/{RUN}/stages/review@1/context-window"
        _assert_matches_api(_shown(browser), json.loads(urllib.request.urlopen(review, timeout=10).read()))
        _wait(browser, lambda d: d.find_element("id", "conn").text == "streaming", what="the event stream")
        agent.call()
        expected = json.loads(urllib.request.urlopen(review, timeout=10).read())
        _wait(browser, lambda d: _shown(d)["total"] == expected["input_tokens"], what="the new snapshot")
        assert browser.current_url.startswith(f"{server.url}/cw/runs/")
    finally:
        server.close()


@pytest.mark.system
def test_a_page_without_the_token_asks_for_it_and_keeps_it_out_of_urls(served, browser):
    agent, start = served
    server, proxy = start(token=TOKEN)
    browser.get(f"{proxy.url}/runs/{RUN}")
    _wait(browser, lambda d: d.find_element("id", "signin").is_displayed(), what="the sign-in prompt")
    assert _shown(browser) is None and browser.find_elements("css selector", "#stages button") == []
    assert not browser.find_element("id", "run").is_displayed()

    field = browser.find_element("id", "token")
    field.send_keys("wrong")
    browser.find_element("css selector", "#signin-form button").click()
    _wait(browser, lambda d: "not accepted" in d.find_element("id", "signin-error").text)
    assert _shown(browser) is None

    field.send_keys(TOKEN)
    browser.find_element("css selector", "#signin-form button").click()
    _wait(browser, lambda d: (_shown(d) or {}).get("stage") == "Stage review@1")
    _assert_matches_api(_shown(browser), server.api(f"/api/v1/runs/{RUN}/stages/review@1/context-window"))
    _wait(browser, lambda d: d.find_element("id", "conn").text == "streaming", what="the authorised stream")
    before = _shown(browser)["total"]
    agent.call()
    _wait(browser, lambda d: _shown(d)["total"] > before, what="the new snapshot over the authorised stream")

    assert TOKEN not in browser.current_url
    urls = browser.execute_script("return performance.getEntries().map((e) => e.name)")
    assert urls and not any(TOKEN in u for u in urls)
    with proxy.lock:
        sent = bytes(proxy.sent)
    request_lines = [line for line in sent.split(b"\r\n") if re.match(rb"^[A-Z]+ /", line)]
    assert request_lines and not any(TOKEN.encode() in line for line in request_lines)
    assert sent.count(f"Authorization: Bearer {TOKEN}".encode()) >= 2  # the API calls and the stream carried it
    assert browser.execute_script("return sessionStorage.getItem('cw-middleware-token')") == TOKEN
    assert CANARY.encode() not in sent + bytes(proxy.received)


@pytest.mark.system
def test_the_pages_number_format_is_shows(served, browser):
    """format.js against render.py on edge values (exact ties round half to even in both) and random ones."""
    _, start = served
    server, _ = start()
    browser.get(server.url + "/")
    _wait(browser, lambda d: d.execute_script("return !!window.cwFormat"))
    rng = random.Random(7)
    numbers = [0, 1, 999, 1000, 9999, 10000, 10049, 10050, 10051, 10250, 10750, 12345, 99949, 99950, 99999, 100000]
    numbers += [999949, 999950, 999999, 1000000, 1049999, 1050000, 1250000, 1350000, 2500000, 12345678, 2**31]
    numbers += [rng.randrange(0, 10**k) for k in range(2, 10) for _ in range(60)]
    pairs = [(49, 400), (1, 8), (3, 8), (721, 128000), (1, 3), (2, 3), (127279, 128000), (5, 2000), (0, 5)]
    pairs += [(rng.randrange(0, w + 1), w) for w in (8000, 128000, 200000, 1047576) for _ in range(60)]
    got = browser.execute_script(
        "return [arguments[0].map(cwFormat.tokens), arguments[1].map((p) => cwFormat.percent(p[0], p[1]))]", numbers, pairs
    )
    assert got[0] == [format_tokens(n) for n in numbers]
    assert got[1] == [format_percent(a, b) for a, b in pairs]


def test_a_cost_is_never_written_as_zeros_four_decimals_or_cents():
    """One rule for dollars (format.js's usd agrees: test_page_usage): "$0" for none, two significant digits below a
    hundredth of a cent (never "$0.000000", which reads as none), four decimals under a dollar, cents above."""
    from cw_middleware._kernel.formats import format_usd

    assert [format_usd(v) for v in (None, 0, 0.0, 4e-7, 0.000058, 7.7e-05, 0.0001, 0.0026, 0.99994, 1, 1234.5)] == [
        "-",
        "$0",
        "$0",
        "$0.00000040",
        "$0.000058",
        "$0.000077",
        "$0.0001",
        "$0.0026",
        "$0.9999",
        "$1.00",
        "$1,234.50",
    ]


@pytest.mark.system
def test_the_run_page_shows_sub_agents_as_a_tree(written, browser):
    """Issue 39 item 3 on the page: a sub-agent's stage sits under its parent in the stage list (indented, marked),
    its view names its parent and the parent's its sub-agents, each a button to that stage."""
    agent, backend = written
    with cw.stage(RUN, "review@1"):
        with cw.stage(RUN, "subagent@1"):
            cw.completion(model="gpt-4o", messages=[{"role": "user", "content": f"look it up {CANARY}"}], mock_response="ok")
    agent.runtime.flush(5.0)
    server = Serve(backend)
    try:
        browser.get(f"{server.url}/runs/{RUN}#stage=subagent%401")
        _wait(browser, lambda d: (_shown(d) or {}).get("stage") == "Stage subagent@1")
        rows = browser.execute_script(
            """return [...document.querySelectorAll('#stages li')].map((li) =>
                 [li.querySelector('button').dataset.stage, Number(li.dataset.depth), li.getBoundingClientRect().left,
                  li.querySelector('button').getBoundingClientRect().left]);"""
        )
        order = [r[0] for r in rows]
        assert order.index("subagent@1") == order.index("review@1") + 1, order
        depth = {r[0]: r for r in rows}
        assert depth["subagent@1"][1] == 1 and depth["review@1"][1] == 0
        assert depth["subagent@1"][3] > depth["review@1"][3]  # indented under its parent
        family = browser.find_element("css selector", "[data-field=family]").text
        assert family == "Sub-agent of review@1"
        browser.find_element("css selector", "[data-field=family] button[data-stage='review@1']").click()
        _wait(browser, lambda d: (_shown(d) or {}).get("stage") == "Stage review@1")
        api = server.api(f"/api/v1/runs/{RUN}/stages/review@1/context-window")
        assert api["child_stage_ids"] == ["subagent@1"]
        rolled = next(r for r in server.api(f"/api/v1/runs/{RUN}/summary")["stages"] if r["stage_id"] == "review@1")["rolled_up"]
        expected = (
            f"Sub-agents: subagent@1. With them: {rolled['calls']} call(s), {format_tokens(rolled['input_tokens'])} "
            f"input tokens, {format_usd(rolled['input_cost'])} input"
        )
        _wait(browser, lambda d: d.find_element("css selector", "[data-field=family]").text == expected, what="the roll-up")
        assert rolled["calls"] == 2  # review@1's own call and its sub-agent's
    finally:
        server.stop()


class HostPage:
    """Another origin: a plain HTTP server on a port of its own whose one page embeds the element from serve."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        owner = self
        self.html = ""

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                body = owner.html.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


XSS = '<img src=x onerror="window.__xss=1">"\'&'


def _element(driver, selector: str) -> dict:
    """What one <cw-context-window> shows: its ring, its button's label and state, its popover's rows and text."""
    return driver.execute_script(
        """
        const host = document.querySelector(arguments[0]);
        const root = host && host.shadowRoot;
        if (!root) return null;
        const q = (s) => root.querySelector(s);
        const pop = q('.pop');
        const rows = {};
        root.querySelectorAll('tr[data-category]').forEach((tr) => { rows[tr.dataset.category] = tr.cells[1].textContent; });
        return {pct: q('.pct').textContent, win: q('.win').textContent, label: q('button').getAttribute('aria-label'),
                expanded: q('button').getAttribute('aria-expanded'), open: !pop.hidden, rows: rows,
                title: (q('h2') || {}).textContent || null, text: pop.textContent,
                focused: root.activeElement === q('button'), imgs: root.querySelectorAll('img').length};
        """,
        selector,
    )


@pytest.mark.system
def test_the_embedded_element_on_another_origin_shows_the_stage_live_and_stays_inert(written, browser):
    """README's three lines on a page of another origin, served by a `serve` told that origin (--allow-origin),
    with the token set as a property (so every request is preflighted): the ring shows the API's usage_percent, the
    popover the seven categories and the top sources, a new snapshot updates it without a reload, Escape closes it
    and gives the focus back, ids stay text, and nothing runs past a 320 px container. Then serve's own /embed
    preview, which takes the token the live page keeps in the tab."""
    from docs_blocks import block
    from selenium.webdriver.common.keys import Keys

    agent, backend = written
    readme = block("embed-element")
    assert "http://127.0.0.1:8765/embed.js" in readme.code and 'run="run-42" stage="implement@1"' in readme.code
    agent.call(stage=XSS)  # a stage whose id is markup
    agent.runtime.flush(5.0)

    def implement() -> None:  # README's ids: run-42, implement@1
        with cw.stage("run-42", "implement@1"):
            cw.completion(model="gpt-4o", messages=list(agent.history), tools=agent.TOOLS, mock_response="ok")
        agent.history.append({"role": "user", "content": f"more {CANARY} " + "word " * 200})
        agent.runtime.flush(5.0)

    implement()
    host = HostPage()
    server = Serve(backend, TOKEN, ("--allow-origin", host.url))
    mine = "cw-context-window:not(#xss)"
    try:
        window_path = "/api/v1/runs/run-42/stages/implement@1/context-window"
        attr = lambda v: v.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")  # noqa: E731
        host.html = f"""<!doctype html><html><body style="margin:0">
<div id="box" style="width:320px"><p>chat</p>
{readme.code.replace("http://127.0.0.1:8765", server.url)}
<cw-context-window id="xss" run="{RUN}" stage="{attr(XSS)}" src="{server.url}"></cw-context-window>
</div>
<script>document.querySelectorAll("cw-context-window").forEach(function (e) {{ e.token = "{TOKEN}"; }});</script>
</body></html>"""
        browser.set_window_size(1000, 900)
        browser.get(host.url + "/")
        api = server.api(window_path)
        _wait(browser, lambda d: (_element(d, mine) or {}).get("pct") == f"{api['usage_percent']:.1f}%", what="the ring")
        shown = _element(browser, mine)
        assert shown["win"] == f"{format_tokens(api['input_tokens'])} / {format_tokens(api['context_window_tokens'])}"
        assert "implement@1" in shown["label"] and f"{api['usage_percent']:.1f}% used" in shown["label"]
        browser.execute_script("window.__not_reloaded = true")

        button = browser.execute_script("return document.querySelector(arguments[0]).shadowRoot.querySelector('button')", mine)
        button.click()
        shown = _element(browser, mine)
        assert shown["open"] and shown["expanded"] == "true" and shown["title"] == "implement@1"
        tokens = {b["category"]: b["tokens"] for b in api["breakdown"]}
        categories = ["system_prompt", "tools", "mcp_tools", "skills", "memory", "conversation", "other"]
        assert shown["rows"] == {c: format_tokens(tokens.get(c, 0)) for c in categories}
        assert "github" in shown["text"]  # the top sources name the MCP server
        geometry = browser.execute_script(
            """const box = document.getElementById('box').getBoundingClientRect();
               const pop = document.querySelector(arguments[0]).shadowRoot.querySelector('.pop').getBoundingClientRect();
               return {box: [box.left, box.right], pop: [pop.left, pop.right],
                       scroll: document.documentElement.scrollWidth, width: document.documentElement.clientWidth};""",
            mine,
        )
        assert geometry["box"][0] - 0.5 <= geometry["pop"][0] and geometry["pop"][1] <= geometry["box"][1] + 0.5, geometry
        assert geometry["scroll"] <= geometry["width"], geometry

        button.send_keys(Keys.ESCAPE)
        _wait(browser, lambda d: not _element(d, mine)["open"], what="Escape")
        assert _element(browser, mine)["focused"] and _element(browser, mine)["expanded"] == "false"

        implement()  # a new snapshot: the event stream brings it
        api = server.api(window_path)
        expected = f"{api['usage_percent']:.1f}%"
        _wait(browser, lambda d: _element(d, mine)["pct"] == expected, timeout=15, what="the next snapshot")
        assert _element(browser, mine)["win"].startswith(format_tokens(api["input_tokens"]) + " / ")
        assert browser.execute_script("return window.__not_reloaded") is True

        _wait(browser, lambda d: (_element(d, "#xss") or {}).get("pct", "–") not in ("–", "…"), what="the markup stage")
        browser.execute_script("return document.getElementById('xss').shadowRoot.querySelector('button')").click()
        shown = _element(browser, "#xss")
        assert shown["title"] == XSS and shown["imgs"] == 0 and XSS in shown["label"]
        assert browser.execute_script("return window.__xss") is None

        # serve's own preview page: on the server's origin the element takes the token the live page keeps.
        browser.get(f"{server.url}/embed?run=run-42&stage=implement%401")
        browser.execute_script(f"sessionStorage.setItem('cw-middleware-token', '{TOKEN}')")
        browser.refresh()
        _wait(browser, lambda d: (_element(d, "cw-context-window") or {}).get("pct") == expected, what="the preview")
    finally:
        server.stop()
        host.close()


def test_the_page_ships_in_the_wheel_and_nothing_loads_from_elsewhere(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
        + ["-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    wheel = next(tmp_path.glob("cw_middleware-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    static = ROOT / "cw_middleware" / "_serve" / "static"
    shipped = {f"cw_middleware/_serve/static/{p.name}" for p in static.iterdir() if p.is_file()}
    assert {"cw_middleware/_serve/static/index.html", "cw_middleware/_serve/static/app.js"} <= shipped <= names
    for path in static.iterdir():
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"(?:src|href)=\"(?:https?:)?//|url\((?:https?:)?//|@import", text), path.name
        assert not re.search(r"fetch\(\s*['\"]https?:", text), path.name


@pytest.mark.system
def test_without_streaming_the_page_polls_and_still_updates(served, browser):
    agent, start = served
    server, _ = start()
    # A browser without fetch streaming (TextDecoderStream missing): the page must fall back to polling.
    browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": "delete window.TextDecoderStream;"})
    browser.get(f"{server.url}/runs/{RUN}#stage=review%401")
    _wait(browser, lambda d: (_shown(d) or {}).get("stage") == "Stage review@1")
    assert "polling" in browser.find_element("id", "conn").text
    agent.call()
    expected = server.api(f"/api/v1/runs/{RUN}/stages/review@1/context-window")
    _wait(browser, lambda d: _shown(d)["total"] == expected["input_tokens"], timeout=10, what="the polled snapshot")
    _assert_matches_api(_shown(browser), expected)


# Machado, Oliveira & Fernandes (2009), severity 1.0, on linear RGB: what protanopes, deuteranopes and tritanopes see.
_SIMULATIONS = {
    "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]],
    "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]],
    "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]],
}


def _lab(hex_colour: str, matrix) -> tuple[float, float, float]:
    def linear(c: int) -> float:
        v = c / 255
        return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4

    rgb = [linear(int(hex_colour[i : i + 2], 16)) for i in (1, 3, 5)]
    r, g, b = (max(0.0, min(1.0, sum(matrix[row][k] * rgb[k] for k in range(3)))) for row in range(3))
    x, y, z = 0.4124 * r + 0.3576 * g + 0.1805 * b, 0.2126 * r + 0.7152 * g + 0.0722 * b, 0.0193 * r + 0.1192 * g + 0.9505 * b

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    fx, fy, fz = f(x / 0.95047), f(y), f(z / 1.08883)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def _closest_pair(colours: dict[str, str]) -> dict[str, float]:
    """The smallest CIELAB distance (delta E 1976) between any two colours, per simulated deficiency."""
    import itertools

    out = {}
    for name, matrix in _SIMULATIONS.items():
        labs = [_lab(c, matrix) for c in colours.values()]
        out[name] = min(sum((a - b) ** 2 for a, b in zip(p, q)) ** 0.5 for p, q in itertools.combinations(labs, 2))
    return out


def test_the_category_colours_stay_apart_under_colour_blindness_simulation():
    css = (ROOT / "cw_middleware" / "_serve" / "static" / "app.css").read_text()
    names = ["system_prompt", "tools", "mcp_tools", "skills", "memory", "conversation", "other", "free"]
    palette = {n: re.search(rf"--{n}:\s*(#[0-9A-Fa-f]{{6}})", css).group(1) for n in names}
    closest = _closest_pair(palette)
    assert all(d >= 12 for d in closest.values()), closest  # clearly distinct (2.3 is just noticeable)
    # The check can fail: matplotlib's default palette puts orange and green within 5 for protanopes.
    tab10 = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#f1f1f1"]
    assert min(_closest_pair(dict(zip(names, tab10))).values()) < 12


# ---------------------------------------------------------------- issue 36 item 7: the page's defects, and the advice


def _local(iso: str, offset_minutes: int) -> str:
    """An API time as the page writes it: local time to the second and the zone as an explicit UTC offset."""
    from datetime import datetime, timedelta, timezone

    at = datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(timezone(timedelta(minutes=offset_minutes)))
    sign, minutes = ("+" if offset_minutes >= 0 else "-"), abs(offset_minutes)
    zone = "UTC" if not offset_minutes else f"UTC{sign}{minutes // 60:02d}:{minutes % 60:02d}"
    return f"{at:%Y-%m-%d %H:%M:%S} {zone}"


def _fits(driver) -> dict:
    return driver.execute_script(
        """const d = document.documentElement, nav = document.querySelector('#run nav'), box = document.getElementById('stage');
           const right = Math.max(...[...box.querySelectorAll('*')].map((e) => e.getBoundingClientRect().right));
           return {scroll: d.scrollWidth, width: d.clientWidth, right: right,
                   nav: nav.getBoundingClientRect().right, article: box.getBoundingClientRect().left};"""
    )


@pytest.mark.system
def test_the_stage_page_fits_800_px_its_call_labels_sit_under_their_bars_and_its_times_say_their_zone(served, browser):
    """At 800 px nothing runs past the window (no horizontal scroll, the right column whole), at 1200 the two columns
    stand side by side; each "call N" label of the stage over time is centred under its bar; every time says its zone
    (an explicit UTC offset, here India's +05:30) and keeps the ISO time in its title; the header says "streaming"."""
    agent, start = served
    server, _ = start()
    agent.call()
    agent.call()
    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Asia/Kolkata"})
    browser.set_window_size(800, 1000)
    browser.get(f"{server.url}/runs/{RUN}#stage=review%401")
    review = f"/api/v1/runs/{RUN}/stages/review@1"
    history = server.api(f"{review}/history")["snapshots"]
    _wait(
        browser, lambda d: len(d.find_elements("css selector", "[data-field=history] rect")) == len(history), what="the history"
    )
    _wait(browser, lambda d: d.find_element("id", "conn").text == "streaming", what="the event stream")
    fits = _fits(browser)
    assert fits["scroll"] <= fits["width"] and fits["right"] <= fits["width"] + 0.5, fits

    labels = browser.execute_script(
        """const svg = document.querySelector('[data-field=history] svg');
           const box = (e) => e.getBoundingClientRect();
           const bars = [...svg.querySelectorAll('rect')].map((r) => [box(r).left, box(r).right]);
           return {bars: bars, labels: [...svg.querySelectorAll('text')].filter((t) => /^call /.test(t.textContent)).map((t) => {
             const b = t.getBoundingClientRect(); return [t.textContent, (b.left + b.right) / 2]; })};"""
    )
    assert [t for t, _ in labels["labels"]] == ["call 1", f"call {len(history)}"], labels
    for text, centre in labels["labels"]:
        left, right = labels["bars"][int(text.split()[1]) - 1]
        assert left <= centre <= right, (text, centre, left, right)

    answer = server.api(f"{review}/context-window")
    taken = browser.find_element("css selector", "[data-field=count_method] time")
    assert taken.text == _local(answer["generated_at"], 330) and taken.get_attribute("datetime") == answer["generated_at"]
    assert taken.get_attribute("title") == answer["generated_at"]

    browser.set_window_size(1200, 1000)
    _wait(browser, lambda d: _fits(d)["nav"] <= _fits(d)["article"], what="two columns at 1200 px")
    fits = _fits(browser)
    assert fits["scroll"] <= fits["width"] and fits["right"] <= fits["width"] + 0.5, fits

    browser.get(server.url + "/")
    _wait(browser, lambda d: d.find_elements("css selector", f"#runs-table tr[data-run='{RUN}'] time"), what="the runs list")
    run = next(r for r in server.api("/api/v1/runs")["runs"] if r["run_id"] == RUN)
    seen = browser.execute_script(
        "const t = document.querySelector(arguments[0]); return [t.textContent, t.getAttribute('title')];",
        f"#runs-table tr[data-run='{RUN}'] time",
    )
    assert seen == [_local(run["last_seen_at"], 330), run["last_seen_at"]]


def _fill(agent, stage: str, window: int) -> None:
    """Two calls of a growing conversation in ``stage``, in a window of ``window`` tokens."""
    messages = [cw.message("system", "You review code."), {"role": "user", "content": "word " * 300}]
    for extra in ("", "more " * 200):
        with cw.stage(RUN, stage):
            cw.completion(
                model="gpt-4o",
                messages=[*messages, {"role": "user", "content": "next " + extra}],
                mock_response="ok",
                cw_context_window=window,
            )
        agent.runtime.flush(5.0)


def _advice(driver) -> dict:
    return driver.execute_script(
        """const q = (s) => document.querySelector(s);
           const fill = q('[data-field=fill]');
           return {stage: (q('#stage h3') || {}).textContent, fill: fill ? fill.textContent : null,
                   state: q('#stage').dataset.fill || null,
                   legend: (q('[data-field=legend]') || {}).textContent || null,
                   marks: [...document.querySelectorAll('.bar .mark')].map((m) => [m.dataset.mark, m.style.left]),
                   forecast: (q('[data-field=forecast]') || {}).textContent || null,
                   suggestions: [...document.querySelectorAll('[data-field=suggestions] li')].map((l) => l.textContent),
                   small: (q('[data-field=too-small]') || {}).textContent || null,
                   smallCategories: ((q('[data-field=too-small]') || {dataset: {}}).dataset.categories || '')
                     .split(' ').filter(Boolean)};"""
    )


def _pick(driver, stage: str) -> None:
    """Click a stage's button in the page itself: the list is redrawn as events arrive (no stale element)."""
    script = "const b = document.querySelector(arguments[0]); if (b) b.click(); return !!b;"
    _wait(driver, lambda d: d.execute_script(script, f"#stages button[data-stage='{stage}']"), what=f"the button of {stage}")


@pytest.mark.system
def test_a_filling_stage_shows_its_marks_legend_fill_state_forecast_and_suggestions(served, browser):
    """The window bar's marks have a legend; a stage at the forecast's threshold says "near full", one at 95% "full";
    the forecast (a mark at its threshold, its line as `show` prints it) and the suggestions are the API's; a window
    almost empty names the categories too small to draw, as `show` does beside its bar."""
    from cw_middleware._cli.render import _bar
    from cw_middleware._cli.render_usage import forecast_line
    from cw_middleware._kernel.contract import Forecast
    from cw_middleware._kernel.formats import LABEL

    agent, start = served
    server, _ = start()
    agent.call()  # review@1's second call: a forecast
    _fill(agent, "probe@1", 1_000_000)
    tokens = server.api(f"/api/v1/runs/{RUN}/stages/probe@1/context-window")["input_tokens"]
    _fill(agent, "near@1", round(tokens / 0.86))
    _fill(agent, "full@1", round(tokens / 0.97))
    browser.get(f"{server.url}/runs/{RUN}#stage=near%401")

    for stage, text, state in (("near@1", "near full", "near-full"), ("full@1", "full", "full"), ("review@1", None, None)):
        answer = server.api(f"/api/v1/runs/{RUN}/stages/{stage}/context-window")
        _pick(browser, stage)
        _wait(browser, lambda d, s=stage: _advice(d)["stage"] == f"Stage {s}", what=stage)
        shown = _advice(browser)
        assert (shown["fill"], shown["state"]) == (text, state), (stage, answer["usage_percent"], shown)
        assert "80%" in shown["legend"] and "95%" in shown["legend"], shown
        forecast = answer["forecast"]
        assert forecast is not None and forecast["threshold_percent"] == 80.0
        assert shown["forecast"] == forecast_line(Forecast(**forecast)), (shown, forecast)
        assert shown["suggestions"] == [s["message"] for s in answer["suggestions"]] and shown["suggestions"]
        threshold = [m for m in shown["marks"] if m[0] in ("80", "threshold")]
        assert threshold and float(threshold[0][1].rstrip("%")) == pytest.approx(
            100
            * forecast["threshold_percent"]
            / 100
            * answer["context_window_tokens"]
            / max(answer["context_window_tokens"], answer["input_tokens"])
        )
        tokens = {b["category"]: b["tokens"] for b in answer["breakdown"]}
        small = _bar(tokens, max(answer["context_window_tokens"], answer["input_tokens"]))[1]
        assert shown["smallCategories"] == small and all(LABEL[c] in (shown["small"] or "") for c in small), shown

    # plan@1: one short request in gpt-4o's 128k window: every category is under one cell of the bar, and named.
    _pick(browser, "plan@1")
    _wait(browser, lambda d: _advice(d)["stage"] == "Stage plan@1", what="plan@1")
    plan = server.api(f"/api/v1/runs/{RUN}/stages/plan@1/context-window")
    tokens = {b["category"]: b["tokens"] for b in plan["breakdown"]}
    small = _bar(tokens, plan["context_window_tokens"])[1]
    shown = _advice(browser)
    assert set(small) == {c for c in tokens if tokens[c]} and shown["smallCategories"] == small, shown
    assert "under one cell" in shown["small"] and all(LABEL[c] in shown["small"] for c in small), shown
    assert shown["fill"] is None and shown["forecast"] is None  # one call: no forecast


@pytest.mark.system
def test_the_runs_list_updates_within_a_second_and_the_polling_says_its_interval(served, browser):
    """The runs list asks again every second (README: "within a second"), and says so; without streaming the run's
    page polls at the interval it names. The gaps are read from the browser's own request timings, the smallest of
    several: a loaded machine only lengthens them."""
    agent, start = served
    server, _ = start()

    def gaps(driver, suffix: str) -> list[float]:
        starts = driver.execute_script(
            "return performance.getEntriesByType('resource').filter((e) => e.name.endsWith(arguments[0]))"
            ".map((e) => e.startTime)",
            suffix,
        )
        return [b - a for a, b in zip(starts, starts[1:])]

    browser.get(server.url + "/")
    _wait(browser, lambda d: len(gaps(d, "/api/v1/runs")) >= 3, timeout=30, what="four asks for the runs")
    said = re.search(r"every (\d+(?:\.\d+)?) s", browser.find_element("id", "conn").text)
    assert said and float(said.group(1)) <= 1, browser.find_element("id", "conn").text
    assert min(gaps(browser, "/api/v1/runs")) < 1500
    # Asked every second, the list is redrawn only when it changed: a focused link keeps its focus.
    row = f"#runs-table tr[data-run='{RUN}']"
    _wait(
        browser, lambda d: d.execute_script("return document.querySelector(arguments[0]).textContent", f"{row} [data-field=cost]")
    )
    browser.execute_script("document.querySelector(arguments[0]).focus()", f"{row} a")
    asked = len(gaps(browser, "/api/v1/runs"))
    _wait(browser, lambda d: len(gaps(d, "/api/v1/runs")) >= asked + 2, timeout=30, what="two more asks")
    assert browser.execute_script("const a = document.activeElement; return a.tagName + ' ' + a.textContent") == f"A {RUN}"
    with cw.stage("run-page-new", "one@1"):
        cw.completion(model="gpt-4o", messages=[{"role": "user", "content": "one"}], mock_response="ok")
    agent.runtime.flush(5.0)
    _wait(browser, lambda d: d.find_elements("css selector", "#runs-table tr[data-run='run-page-new']"), what="the new run")

    browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": "delete window.TextDecoderStream;"})
    browser.get(f"{server.url}/runs/{RUN}#stage=review%401")
    _wait(browser, lambda d: len(gaps(d, f"/api/v1/runs/{RUN}/stages")) >= 4, timeout=30, what="the load and four polls")
    said = re.search(r"polling every (\d+(?:\.\d+)?) s", browser.find_element("id", "conn").text)
    assert said, browser.find_element("id", "conn").text
    interval = 1000 * float(said.group(1))
    polls = gaps(browser, f"/api/v1/runs/{RUN}/stages")[1:]  # the first: the page's load, then the first poll at once
    assert interval * 0.9 <= min(polls) < interval * 1.5, polls
