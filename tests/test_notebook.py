"""A snapshot and a stage's answer in a notebook (issue 40 item 5): HTML for Jupyter, text for IPython's terminal.

The view shows the window to scale, the categories and the top sources, with no script and
nothing fetched, every value escaped; its numbers are those of the object it renders.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from embedded_helpers import embedded_runtime

import cw_middleware as cw
from cw_middleware._kernel.formats import COLOUR, format_tokens

HOSTILE = '<img src=x onerror="alert(1)">'


def _request(stage_source: str = "AGENTS.md"):
    return dict(
        model="gpt-4o",
        messages=[
            cw.message(
                "system",
                [cw.segment("You are careful. " * 20, "system_prompt"), cw.segment("Rule. " * 60, "memory", source=stage_source)],
            ),
            {"role": "user", "content": "Fix the failing test. " * 10},
        ],
    )


class _Tags(HTMLParser):
    """Every tag and attribute the HTML holds, as a browser's parser would see them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attributes += [(k, v or "") for k, v in attrs]


def _parsed(html: str) -> _Tags:
    parser = _Tags()
    parser.feed(html)
    return parser


def test_a_snapshot_renders_the_window_to_scale_with_no_script_and_nothing_fetched():
    snap = cw.estimate(**_request())
    html = snap._repr_html_()
    tags = _parsed(html)
    assert not {"script", "img", "link", "iframe", "style", "object"} & set(tags.tags)
    assert not [a for a in tags.attributes if a[0] in ("src", "href") or a[0].startswith("on")]
    window = snap.context_window_tokens
    assert window and snap.input_tokens > 0
    for item in snap.breakdown:
        if item.tokens:
            # Each category's segment: its share of the window, in its colour.
            assert f"width:{100 * item.tokens / window:.3f}%;background:{COLOUR[item.category.value]}" in html
            assert f"{100 * item.tokens / window:.1f}%" in html
    assert format_tokens(snap.input_tokens) in html and "AGENTS.md" in html  # the top sources


def test_ids_and_source_labels_are_data_never_markup():
    with cw.stage(HOSTILE, HOSTILE):
        snap = cw.estimate(**_request(stage_source=HOSTILE))
    html = snap._repr_html_()
    assert "<img" not in html and "&lt;img" in html
    assert "img" not in _parsed(html).tags


def test_a_stages_answer_shows_its_forecast_and_suggestions(tmp_path):
    path = tmp_path / "t.jsonl"
    with embedded_runtime(export=f"file:{path}"):
        with cw.stage("nb-run", "agent@1"):
            messages = _request()["messages"]
            tools = [cw.tool({"type": "function", "function": {"name": "never_used", "description": "x " * 40}})]
            for turn in range(4):
                messages = [*messages, {"role": "user", "content": f"turn {turn} " + "more " * 300}]
                cw.completion(model="gpt-4o", messages=messages, tools=tools, mock_response="ok")
    answer = cw.reader(f"file:{path}").context_window("nb-run", "agent@1")
    assert answer.forecast is not None and answer.suggestions
    html = answer._repr_html_()
    assert f"+{format_tokens(answer.forecast.growth_per_call_tokens)} tokens a call" in html
    first = answer.suggestions[0].message
    assert re.sub(r"&#x27;|&quot;", "", html).count(first.replace("'", "").replace('"', "")[:40]) == 1
    text = _pretty(answer)
    assert text.splitlines()[0].startswith("agent@1 (openai/gpt-4o): ") and "Forecast:" in text


def test_an_unavailable_stage_says_why():
    window = cw.StageContextWindow.unavailable("review@1", cw.UnavailableReason.NOT_OBSERVED)
    assert "unavailable: not observed" in window._repr_html_()
    assert _pretty(window) == "review@1 (model unknown): unavailable: not_observed"


def _pretty(obj) -> str:
    """What IPython's pretty printer writes for ``obj`` (its printer protocol: ``text``)."""

    class Printer:
        def __init__(self) -> None:
            self.out = ""

        def text(self, value: str) -> None:
            self.out += value

    printer = Printer()
    obj._repr_pretty_(printer, False)
    return printer.out


def test_the_text_view_lists_each_category_with_its_tokens():
    snap = cw.estimate(**_request())
    lines = _pretty(snap).splitlines()
    assert len(lines) == 1 + len(snap.breakdown)
    for line, item in zip(lines[1:], snap.breakdown):
        assert format_tokens(item.tokens) in line


def test_the_palette_is_the_pages():
    css = (Path(cw.__file__).parent / "_serve" / "static" / "app.css").read_text()
    page = dict(re.findall(r"--(\w+): (#[0-9A-Fa-f]{6})", css))
    assert {k: page[k] for k in COLOUR} == COLOUR
