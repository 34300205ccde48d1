"""A stage's forecast (issue 39 item 1): when its window fills at its recent growth, read from what the backend holds.

Real LiteLLM calls to the local OpenAI-compatible server, which reports the input tokens the test chooses
for each call, exported to a telemetry file and read back. The expected numbers are worked out here from
those chosen totals and the model's window (gpt-4o: the window the answer reports).
"""

from __future__ import annotations

import math

from embedded_helpers import embedded_runtime
from providers import CHAT, provider  # noqa: F401 - the fixture

import cw_middleware as cw
from cw_middleware._cli import main as cli


def _stage(provider, path, totals: list[int], stage_id: str, **settings):  # noqa: F811
    with embedded_runtime(export=f"file:{path}", **settings) as runtime:
        with cw.stage("forecast", stage_id):
            for i, total in enumerate(totals):
                provider[CHAT].tokens = total
                cw.completion(
                    model="openai/gpt-4o",
                    messages=[{"role": "user", "content": f"step {i}"}],
                    api_base=f"{provider.url}/v1",
                    api_key="sk-test",
                )
        assert runtime.flush(10)
        return runtime


def test_a_growing_stage_says_how_many_calls_are_left_to_the_threshold_and_to_a_full_window(tmp_path, provider):  # noqa: F811
    path = tmp_path / "t.jsonl"
    totals = [1_000, 1_500, 2_000, 2_500]
    _stage(provider, path, totals, "grows@1")
    answer = cw.reader(f"file:{path}").context_window("forecast", "grows@1")
    window = answer.context_window_tokens
    forecast = answer.forecast
    assert forecast is not None and forecast.threshold_percent == 80
    assert forecast.growth_per_call_tokens == 500 and forecast.basis_calls == 4
    assert forecast.calls_until_threshold == math.ceil((0.8 * window - 2_500) / 500)
    assert forecast.calls_until_full == math.ceil((window - 2_500) / 500)


def test_one_compaction_or_an_outlier_does_not_change_the_growth(tmp_path, provider):  # noqa: F811
    path = tmp_path / "t.jsonl"
    _stage(provider, path, [1_000, 1_400, 1_800, 600, 1_000, 9_000, 9_400, 9_800], "compacts@1")
    forecast = cw.reader(f"file:{path}").context_window("forecast", "compacts@1").forecast
    assert forecast is not None and forecast.growth_per_call_tokens == 400  # steps 400 x5, one of 8,000, one down


def test_a_stage_that_does_not_grow_has_no_calls_left_and_the_threshold_is_configurable(tmp_path, provider, monkeypatch):  # noqa: F811
    path = tmp_path / "t.jsonl"
    _stage(provider, path, [2_000, 2_000, 1_900], "flat@1")
    flat = cw.reader(f"file:{path}").context_window("forecast", "flat@1").forecast
    assert flat is not None and flat.growth_per_call_tokens == 0
    assert flat.calls_until_threshold is None and flat.calls_until_full is None
    _stage(provider, path, [10_000, 20_000], "threshold@1")
    monkeypatch.setenv("CW_THRESHOLD_PERCENT", "50")
    answer = cw.reader(f"file:{path}").context_window("forecast", "threshold@1")
    assert answer.forecast.threshold_percent == 50
    assert answer.forecast.calls_until_threshold == math.ceil((0.5 * answer.context_window_tokens - 20_000) / 10_000)


def test_show_prints_the_forecast_and_the_writer_sets_the_gauge(tmp_path, provider, capsys):  # noqa: F811
    path = tmp_path / "t.jsonl"
    runtime = _stage(provider, path, [1_000, 3_000], "shown@1")
    assert cli.main(["show", "forecast", "shown@1", "--backend", f"file:{path}"]) == 0
    out = capsys.readouterr().out
    window = cw.reader(f"file:{path}").context_window("forecast", "shown@1").context_window_tokens
    left = math.ceil((0.8 * window - 3_000) / 2_000)
    assert f"Forecast: +2,000 tokens a call (last 2 calls): ≈{left} call(s) to 80%" in out
    assert runtime is not None
    assert b"agent.context_window.calls_until_threshold" in path.read_bytes()
