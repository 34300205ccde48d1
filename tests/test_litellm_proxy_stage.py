"""The proxy callback's reading of the stage from a request (the proxy process itself: tests/frameworks)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from types import SimpleNamespace

import litellm
import pytest

import cw_middleware as cw
from cw_middleware._capture import litellm_proxy
from cw_middleware._capture.litellm_proxy import ProxyHandler, stage_of_request


def _data(headers=None, metadata=None, field="metadata"):
    data = {"model": "gpt-4o", "messages": [], "proxy_server_request": {"headers": headers or {}}}
    if metadata is not None:
        data[field] = metadata
    return data


def test_headers_name_the_stage_case_insensitively():
    info = stage_of_request(_data({"X-CW-Run-Id": "r1", "x-cw-stage-id": "s1", "x-cw-stage-kind": "planner"}), "svc")
    assert (info.run_id, info.stage_id, info.kind) == ("r1", "s1", "planner")


def test_body_metadata_names_the_stage_and_headers_win():
    assert stage_of_request(_data(metadata={"cw_run_id": "r2", "cw_stage_id": "s2"}), "svc").stage_id == "s2"
    responses_api = _data(metadata={"cw_run_id": "r3", "cw_stage_id": "s3"}, field="litellm_metadata")
    assert (stage_of_request(responses_api, "svc").run_id, stage_of_request(responses_api, "svc").kind) == ("r3", "agent")
    both = _data({"x-cw-run-id": "from-header", "x-cw-stage-id": "h"}, {"cw_run_id": "from-body", "cw_stage_id": "b"})
    assert (stage_of_request(both, "svc").run_id, stage_of_request(both, "svc").stage_id) == ("from-header", "h")


def test_no_ids_is_the_default_a_run_alone_its_day_and_a_stage_alone_is_refused():
    assert stage_of_request(_data(), "svc") is None
    run_only = stage_of_request(_data({"x-cw-run-id": "r"}), "svc")
    assert (run_only.run_id, run_only.stage_id) == ("r", datetime.now(UTC).strftime("%Y-%m-%d"))
    with pytest.raises(cw.ConfigError, match="x-cw-stage-id needs x-cw-run-id"):
        stage_of_request(_data({"x-cw-stage-id": "s"}), "svc")
    with pytest.raises(cw.ConfigError, match="x-cw-run-id must be at most 256"):
        stage_of_request(_data({"x-cw-run-id": "r" * 257, "x-cw-stage-id": "s"}), "svc")
    with pytest.raises(cw.ConfigError, match="cw_run_id|x-cw-run-id"):
        stage_of_request(_data(metadata={"cw_run_id": 7, "cw_stage_id": "s"}), "svc")


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


async def test_per_user_and_per_team_handlers_group_requests_that_name_no_stage(runtime):
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    key = SimpleNamespace(user_id="alice", team_id="research")
    try:
        by_user, by_team = litellm_proxy.handler_per_user, litellm_proxy.handler_per_team
        assert litellm_proxy.handler_per_user is by_user  # one instance per name, made on first look-up
        await by_user.async_pre_call_hook(key, None, _data(), "acompletion")
        assert (cw.current_stage().run_id, cw.current_stage().stage_id) == ("user:alice", today)
        await by_team.async_pre_call_hook(key, None, _data(), "acompletion")
        assert cw.current_stage().run_id == "team:research"
        await by_user.async_pre_call_hook(SimpleNamespace(user_id=None), None, {**_data(), "user": "bob"}, "acompletion")
        assert cw.current_stage().run_id == "user:bob"  # the request's end user when the key has none
        await by_team.async_pre_call_hook(SimpleNamespace(team_id=None), None, _data(), "acompletion")
        assert cw.current_stage() is None  # no team: the service's default run
        named = _data({"x-cw-run-id": "r", "x-cw-stage-id": "s"})
        await by_team.async_pre_call_hook(key, None, named, "acompletion")
        assert cw.current_stage().run_id == "r"  # a stage the request names wins
    finally:
        cw.uninstrument()


def test_a_bad_group_is_refused():
    with pytest.raises(cw.ConfigError, match="group must be"):
        ProxyHandler("org")
