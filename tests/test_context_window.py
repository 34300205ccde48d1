"""The context window of a request: per call (cw_context_window), configured (context_windows), or LiteLLM's map."""

from __future__ import annotations

import logging

import litellm
import pytest

import cw_middleware as cw
from cw_middleware._kernel.config import resolve

MSGS = [{"role": "user", "content": "Say hi."}]
GPT4O_WINDOW = litellm.get_model_info("gpt-4o")["max_input_tokens"]


@pytest.mark.parametrize(("given", "window"), [(4096, 4096), ("2000", 2000), (" 3000 ", 3000)])
def test_an_unambiguous_override_applies(runtime, given, window):
    cw.completion(model="gpt-4o", messages=MSGS, mock_response="ok", cw_context_window=given)
    snap = cw.snapshots()[-1]
    assert snap.context_window_tokens == window and "invalid_context_window" not in snap.warning_codes()


def test_a_bad_override_falls_back_with_a_warning_and_one_log_line(runtime, caplog):
    bad = ["big", -5, 0, "0", "-5", 2.5, True, [2000]]
    with caplog.at_level(logging.WARNING, logger="cw_middleware"):
        for value in bad:
            cw.completion(model="gpt-4o", messages=MSGS, mock_response="ok", cw_context_window=value)
            snap = cw.snapshots()[-1]
            assert snap.context_window_tokens == GPT4O_WINDOW, value
            assert "invalid_context_window" in snap.warning_codes(), value
            assert "invalid_context_window" in cw.estimate(model="gpt-4o", messages=MSGS, cw_context_window=value).warning_codes()
    lines = [r.getMessage() for r in caplog.records if r.name == "cw_middleware"]
    assert len(lines) == 1 and "cw_context_window" in lines[0] and "big" not in lines[0]


@pytest.mark.parametrize(
    ("windows", "model", "provider", "expected"),
    [
        ({"my-model": 5000}, "openai/my-model", None, 5000),
        ({"my-model": 5000}, "my-model", "openai", 5000),
        ({"openai/my-model": 7000}, "my-model", "openai", 7000),
        ({"openai/my-model": 7000, "my-model": 5000}, "openai/my-model", None, 7000),  # the exact key first
        ({"openai/my-model": 7000, "my-model": 5000}, "my-model", "openai", 5000),
        ({"hosted_vllm/qwen": 32768}, "hosted_vllm/qwen", None, 32768),
    ],
)
def test_configured_windows_match_with_and_without_the_provider_prefix(runtime, windows, model, provider, expected):
    runtime.config = resolve(export="none", environ={}, context_windows=windows)
    extra = {"custom_llm_provider": provider} if provider else {}
    snap = cw.estimate(model=model, messages=MSGS, **extra)
    assert snap.context_window_tokens == expected
    assert "unknown_context_window" not in snap.warning_codes()
