"""The proxy callback's reading of the stage from a request (the proxy process itself: tests/frameworks)."""

from __future__ import annotations

import logging

import litellm
import pytest

import cw_middleware as cw
from cw_middleware import litellm_proxy
from cw_middleware.litellm_proxy import ProxyHandler, stage_of_request


def _data(headers=None, metadata=None, field="metadata"):
    data = {"model": "gpt-4o", "messages": [], "proxy_server_request": {"headers": headers or {}}}
    if metadata is not None:
        data[field] = metadata
    return data


def test_headers_name_the_stage_case_insensitively():
    info = stage_of_request(_data({"X-CW-Run-Id": "r1", "x-cw-stage-id": "s1", "x-cw-stage-kind": "planner"}))
    assert (info.run_id, info.stage_id, info.kind) == ("r1", "s1", "planner")


def test_body_metadata_names_the_stage_and_headers_win():
    assert stage_of_request(_data(metadata={"cw_run_id": "r2", "cw_stage_id": "s2"})).stage_id == "s2"
    responses_api = _data(metadata={"cw_run_id": "r3", "cw_stage_id": "s3"}, field="litellm_metadata")
    assert (stage_of_request(responses_api).run_id, stage_of_request(responses_api).kind) == ("r3", "agent")
    both = _data({"x-cw-run-id": "from-header", "x-cw-stage-id": "h"}, {"cw_run_id": "from-body", "cw_stage_id": "b"})
    assert (stage_of_request(both).run_id, stage_of_request(both).stage_id) == ("from-header", "h")


def test_no_ids_is_the_default_and_a_broken_pair_or_id_is_refused():
    assert stage_of_request(_data()) is None
    with pytest.raises(cw.ConfigError, match="x-cw-stage-id is missing"):
        stage_of_request(_data({"x-cw-run-id": "r"}))
    with pytest.raises(cw.ConfigError, match="x-cw-run-id must be at most 256"):
        stage_of_request(_data({"x-cw-run-id": "r" * 257, "x-cw-stage-id": "s"}))
    with pytest.raises(cw.ConfigError, match="cw_run_id|x-cw-run-id"):
        stage_of_request(_data(metadata={"cw_run_id": 7, "cw_stage_id": "s"}))


def test_importing_the_module_instruments_nothing():
    assert not hasattr(litellm.completion, "_cw_saved")
    assert "handler" not in vars(litellm_proxy)


async def test_the_hook_sets_the_stage_and_a_bad_id_falls_back_with_a_warning(runtime, caplog):
    handler = ProxyHandler()
    try:
        assert hasattr(litellm.acompletion, "_cw_saved")  # making the handler instruments LiteLLM
        assert (
            await handler.async_pre_call_hook(None, None, _data({"x-cw-run-id": "r", "x-cw-stage-id": "s"}), "acompletion")
            is None
        )
        assert (cw.current_stage().run_id, cw.current_stage().stage_id) == ("r", "s")
        bad = _data({"x-cw-run-id": "r", "x-cw-stage-id": "bad\x01id"})
        with caplog.at_level(logging.WARNING, logger="cw_middleware"):
            await handler.async_pre_call_hook(None, None, bad, "acompletion")
        assert cw.current_stage() is None
        assert "x-cw-stage-id must not contain control characters" in caplog.text and "bad\x01id" not in caplog.text
    finally:
        cw.uninstrument()
