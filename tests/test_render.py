"""Terminal rendering: the bar is drawn to scale, the provider is named once, an overflow is said in words."""

from __future__ import annotations

import random

from cw_middleware._cli.render import BAR_WIDTH, render
from cw_middleware._counting.model_facts import RequestMeta
from cw_middleware._kernel.contract import Category, CountMethod
from cw_middleware._snapshots.build import build_snapshot

FREE = "·"


def _snapshot(by_source, window=128_000, provider="openai", model="gpt-4o"):
    meta = RequestMeta("run", "stage", provider, model, window)
    return build_snapshot(by_source, meta, CountMethod.LOCAL_ESTIMATE)


def _bar(text: str) -> str:
    line = next(line for line in text.splitlines() if line.strip().startswith("["))
    return line[line.index("[") + 1 : line.index("]")]


def test_the_provider_is_named_once():
    prefixed = render(_snapshot({(Category.CONVERSATION, "user"): 10}, provider="openai", model="openai/my-model"))
    assert "openai/my-model" in prefixed and "openai/openai/" not in prefixed
    anthropic = render(
        _snapshot({(Category.CONVERSATION, "user"): 10}, provider="anthropic", model="anthropic/claude-sonnet-4-5")
    )
    assert "anthropic/claude-sonnet-4-5" in anthropic and "anthropic/anthropic/" not in anthropic
    bare = render(_snapshot({(Category.CONVERSATION, "user"): 10}, provider="openai", model="gpt-4o"))
    assert "openai/gpt-4o" in bare


def test_a_small_request_fills_no_cell_it_has_not_earned():
    # 1,008 of 128,000 tokens is 0.8% of the window: 0.39 of a 50-cell bar, so no cell at all.
    text = render(_snapshot({(Category.CONVERSATION, "user"): 1005, (Category.OTHER, "framing"): 3}))
    bar = _bar(text)
    assert len(bar) == BAR_WIDTH and bar == FREE * BAR_WIDTH
    # The categories still show beside the bar, named by their glyphs, without claiming space.
    assert "also: C O" in text


def test_filled_cells_match_the_used_share_for_random_breakdowns():
    rng = random.Random(12)
    for _ in range(300):
        window = rng.choice([8_000, 128_000, 200_000, 1_000_000])
        by_source = {(c, "x"): rng.choice([0, 0, 1, 7, 100, 2_000, 30_000]) for c in Category}
        total = sum(by_source.values())
        text = render(_snapshot(by_source, window=window))
        bar = _bar(text)
        scale = max(window, total)
        assert len(bar) == BAR_WIDTH
        filled = BAR_WIDTH - bar.count(FREE)
        assert filled == min(BAR_WIDTH, round(BAR_WIDTH * total / scale)), (by_source, window, bar)
        for category, glyph in (("system_prompt", "S"), ("conversation", "C"), ("tools", "T")):
            tokens = by_source[(Category(category), "x")]
            # Each category gets its quota rounded down or up, never a cell more.
            assert bar.count(glyph) <= int(BAR_WIDTH * tokens / scale) + 1


def test_a_request_larger_than_its_window_is_said_not_to_fit():
    snap = _snapshot({(Category.CONVERSATION, "tool"): 1_000_000, (Category.OTHER, "framing"): 3})
    assert "context_window_exceeded" in snap.warning_codes()
    text = render(snap)
    assert "does not fit" in text and "context_window_exceeded" in text
    within = _snapshot({(Category.CONVERSATION, "tool"): 128_000})
    assert "context_window_exceeded" not in within.warning_codes() and "does not fit" not in render(within)


def test_the_meta_line_has_no_unexplained_seq():
    text = render(_snapshot({(Category.CONVERSATION, "user"): 10}))
    meta = next(line for line in text.splitlines() if "count:" in line)
    assert "seq" not in meta
