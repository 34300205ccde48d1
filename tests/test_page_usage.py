"""The live page's issue-21 parts in a real browser: tools, unused, cost and cache columns, the stage over time with
compactions, the window marks, every source on demand, the runs list's summary, following the newest live stage,
and a run opened before it exists. Fixtures and helpers are test_page's (chromium through selenium)."""

from __future__ import annotations

import os

import pytest
from test_page import RUN, _shown, _wait, browser, served, written  # noqa: F401 - the fixtures

import cw_middleware as cw
from cw_middleware._kernel.formats import format_tokens, format_usd

pytestmark = pytest.mark.system  # a real browser: the system tier


def _cells(driver, selector: str) -> list[str]:
    """The texts of the matching cells, read at once in the page (the runs list is redrawn every second)."""
    return driver.execute_script("return [...document.querySelectorAll(arguments[0])].map((c) => c.textContent)", selector)


def test_the_stage_shows_its_tools_cost_history_and_every_source(served, browser):  # noqa: F811
    agent, start = served
    server, _ = start()
    agent.call()
    agent.history = agent.history[:2]  # the agent summarises: the next request carries less conversation
    agent.call()
    browser.get(f"{server.url}/runs/{RUN}#stage=review%401")
    review = f"/api/v1/runs/{RUN}/stages/review@1"
    answer = server.api(f"{review}/context-window")
    history = server.api(f"{review}/history")["snapshots"]
    _wait(
        browser, lambda d: len(d.find_elements("css selector", "[data-field=history] rect")) == len(history), what="the history"
    )
    # The tools table, unused ones marked (the agent never calls them), and what they cost.
    rows = browser.find_elements("css selector", "[data-field=tools] tbody tr")
    assert [r.get_attribute("data-tool") for r in rows] == [t["name"] for t in answer["tools"]]
    assert all(r.find_elements("css selector", "[data-field=unused-mark]") for r in rows)
    unused = browser.find_element("css selector", "[data-field=unused]").text
    assert f"{len(answer['unused_tools'])} tool definition(s) never called" in unused
    assert format_tokens(sum(u["stage_definition_tokens"] for u in answer["unused_tools"])) in unused
    # Cost per category, as the API says it, in the breakdown table; the stage so far.
    costs = _cells(browser, "[data-field=breakdown] tbody tr:not([data-category=free]) [data-field=cost]")
    assert costs == [format_usd(answer["cost"]["by_category"][c]) for c in answer["cost"]["by_category"]]
    totals = browser.find_element("css selector", "[data-field=stage_totals]").text
    assert f"{answer['stage_totals']['calls']} call(s)" in totals and format_usd(answer["stage_totals"]["input_cost"]) in totals
    assert "1 compaction(s)" in totals
    # The stage over time: every call, axes, the compaction marked where the API says.
    assert len(browser.find_elements("css selector", "[data-field=history] line.compaction")) == 1
    assert [p["compaction"] is not None for p in history].count(True) == 1
    assert browser.find_elements("css selector", "[data-field=history] .axis")
    assert "1 compaction(s)" in browser.find_element("css selector", "[data-field=compactions]").text
    # The window bar marks 80% and 95% of the window.
    assert sorted(m.get_attribute("data-mark") for m in browser.find_elements("css selector", ".bar .mark")) == ["80", "95"]
    if os.environ.get("CW_SCREENSHOT_USAGE"):  # README's picture of these parts: CW_SCREENSHOT_USAGE=docs/live-page-usage.png
        browser.set_window_size(1200, 1650)
        browser.save_screenshot(os.environ["CW_SCREENSHOT_USAGE"])
        browser.set_window_size(1200, 1300)

    # A request with more sources than the top 8: every one on demand; and one that does not fit its window.
    notes = [cw.segment(f"notes {i} " * (40 + i), "memory", f"notes-{i}.md") for i in range(12)]
    with cw.stage(RUN, "many@1"):
        cw.completion(model="gpt-4o", messages=[cw.message("user", notes)], mock_response="ok", cw_context_window=1000)
    agent.runtime.flush(5.0)
    many = server.api(f"/api/v1/runs/{RUN}/stages/many@1/context-window")
    _wait(browser, lambda d: d.find_elements("css selector", "#stages button[data-stage='many@1']"), what="the new stage")[
        0
    ].click()
    _wait(browser, lambda d: (_shown(d) or {}).get("stage") == "Stage many@1", what="the stage many@1")
    assert len(browser.find_elements("css selector", "[data-field=details] tbody tr")) == 8
    browser.find_element("css selector", "[data-field=more-sources]").click()
    _wait(browser, lambda d: len(d.find_elements("css selector", "[data-field=details] tbody tr")) == len(many["details"]))
    assert browser.find_elements("css selector", ".bar .mark.window-end")  # where the 1000-token window ends

    browser.get(server.url + "/")
    _wait(
        browser, lambda d: _cells(d, f"#runs-table tr[data-run='{RUN}'] [data-field=cost]") not in ([], [""]), what="the summary"
    )
    report = server.api(f"/api/v1/runs/{RUN}/summary")
    row = f"#runs-table tr[data-run='{RUN}']"
    assert _cells(browser, f"{row} [data-field=cost]") == [format_usd(report["totals"]["input_cost"])]
    assert _cells(browser, f"{row} [data-field=model]") == [report["model"]]
    assert _cells(browser, f"{row} [data-field=peak]")[0].endswith("%")


def test_a_run_opened_before_it_exists_appears_and_the_page_follows_its_newest_live_stage(served, browser):  # noqa: F811
    agent, start = served
    server, _ = start()
    later = "run-page-later"
    browser.get(f"{server.url}/runs/{later}")
    _wait(browser, lambda d: "not in the backend yet" in d.find_element("id", "notice").text, what="the waiting notice")
    with cw.stage(later, "first@1"):
        cw.completion(model="gpt-4o", messages=[{"role": "user", "content": "one"}], mock_response="ok")
    agent.runtime.flush(5.0)
    _wait(browser, lambda d: (_shown(d) or {}).get("stage") == "Stage first@1", timeout=15, what="the run, once it appeared")
    assert not browser.find_element("id", "notice").is_displayed()
    with cw.stage(later, "second@1"):  # a live stage, newer than the one shown: the page follows it
        cw.completion(model="gpt-4o", messages=[{"role": "user", "content": "two"}], mock_response="ok")
        agent.runtime.flush(5.0)
        _wait(browser, lambda d: (_shown(d) or {}).get("stage") == "Stage second@1", timeout=15, what="the newest live stage")
    # once the user picks a stage, the page stays on it
    _wait(browser, lambda d: d.find_elements("css selector", "#stages button[data-stage='first@1']"))[0].click()
    _wait(browser, lambda d: (_shown(d) or {}).get("stage") == "Stage first@1")
    with cw.stage(later, "third@1"):
        cw.completion(model="gpt-4o", messages=[{"role": "user", "content": "three"}], mock_response="ok")
        agent.runtime.flush(5.0)
        _wait(browser, lambda d: d.find_elements("css selector", "#stages button[data-stage='third@1']"), what="the new stage")
    assert _shown(browser)["stage"] == "Stage first@1"


@pytest.mark.parametrize(
    "value", [0, 0.0, 0.000058, 0.00001, 1e-9, 0.00009999, 0.0001, 0.0026, 0.99994, 1, 1234.5, 0.0080001, None]
)
def test_the_pages_dollars_are_shows(served, browser, value):  # noqa: F811
    _, start = served
    server, _ = start()
    browser.get(server.url + "/")
    _wait(browser, lambda d: d.execute_script("return !!window.cwFormat"))
    assert browser.execute_script("return cwFormat.usd(arguments[0])", value) == format_usd(value)
