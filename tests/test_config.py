"""Settings (cw_middleware/_kernel/config.py): one table, one precedence, the same export rule on both sides."""

from __future__ import annotations

import dataclasses

import pytest

import cw_middleware as cw
from cw_middleware._kernel.config import (
    DEFAULT_TELEMETRY_FILE,
    READ_SETTINGS,
    SETTINGS,
    Config,
    ReadConfig,
    environment_export,
    resolve,
    resolve_read,
)


def test_every_setting_is_written_down_once_with_its_meaning() -> None:
    assert [f.name for f in dataclasses.fields(Config)] == [s.name for s in SETTINGS]
    borrowed = {"export", "threshold_percent"}  # the write side's settings, read by the read side as they are
    assert [f.name for f in dataclasses.fields(ReadConfig) if f.name not in borrowed] == [s.name for s in READ_SETTINGS]
    variables = [v for s in (*SETTINGS, *READ_SETTINGS) for v in s.env]
    assert len(variables) == len(set(variables)), "one variable, one setting"
    assert all(s.doc.strip() for s in (*SETTINGS, *READ_SETTINGS))


def test_argument_beats_environment_beats_default() -> None:
    env = {"CW_PROVIDER_COUNT": "never", "OTEL_SERVICE_NAME": "from-env"}
    assert resolve(environ={}).provider_count is cw.ProviderCountPolicy.AUTO
    assert resolve(environ=env).provider_count is cw.ProviderCountPolicy.NEVER
    assert resolve(environ=env, provider_count="always").provider_count is cw.ProviderCountPolicy.ALWAYS
    assert resolve(environ=env).service_name == "from-env"
    assert resolve(environ=env, service_name="billing-bot").service_name == "billing-bot"


def test_the_first_variable_set_wins_and_blank_ones_do_not_count() -> None:
    env = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": " ", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    assert resolve(environ=env).otlp_protocol == "grpc"
    env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
    assert resolve(environ=env).otlp_protocol == "http/protobuf"


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"CW_PROVIDER_COUNT_TIMEOUT": "5s"}, "CW_PROVIDER_COUNT_TIMEOUT"),
        ({"CW_METRIC_RUN_LABELS": "maybe"}, "CW_METRIC_RUN_LABELS"),
        ({"OTEL_BSP_MAX_QUEUE_SIZE": "-3"}, "OTEL_BSP_MAX_QUEUE_SIZE"),
        ({"CW_EXPORT": "s3://bucket"}, "CW_EXPORT"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
        ({"CW_EXIT_TIMEOUT": "inf"}, "CW_EXIT_TIMEOUT"),
    ],
)
def test_a_bad_variable_is_an_error_naming_it(env: dict[str, str], named: str) -> None:
    with pytest.raises(cw.ConfigError, match=named):
        resolve(environ=env)


def test_an_unknown_setting_is_an_error_listing_the_real_ones() -> None:
    with pytest.raises(cw.ConfigError, match="unknown setting 'exprot'.*export"):
        resolve(environ={}, exprot="none")


def test_flags_read_words_and_otel_sdk_disabled_reads_as_the_specification_says() -> None:
    assert resolve(environ={"CW_LOG_EVENTS": "true"}).log_events is True
    assert resolve(environ={"CW_LOG_EVENTS": "0"}).log_events is False
    assert resolve(environ={"OTEL_SDK_DISABLED": "TRUE"}).sdk_disabled is True
    assert resolve(environ={"OTEL_SDK_DISABLED": "1"}).sdk_disabled is False  # only "true" switches the SDK off


def test_write_and_read_side_follow_one_export_rule() -> None:
    """With only the standard OTLP endpoint set, the writer exports over OTLP: the reader must not look in a file."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert resolve(environ=env).export == "otlp"
    with pytest.raises(cw.ConfigError, match="CW_BACKEND"):
        resolve_read(environ=env).backend_url()
    assert resolve_read(environ={**env, "CW_BACKEND": "jaeger+http://127.0.0.1:16686"}).backend_url().startswith("jaeger+")
    assert resolve_read(environ={"CW_EXPORT": "file:/data/t.jsonl"}).backend_url() == "file:/data/t.jsonl"
    assert resolve_read(environ={}).backend_url() == "file:cw-telemetry.jsonl"
    with pytest.raises(cw.ConfigError, match="CW_EXPORT=none"):
        resolve_read(environ={"CW_EXPORT": "none"}).backend_url()


def test_read_settings_parse_their_variables() -> None:
    read = resolve_read(
        environ={"CW_STALE_AFTER": "60", "CW_BACKEND_HEADERS": "x-org=a%20b,x-team=c", "XDG_CACHE_HOME": "/cache"}
    )
    assert read.stale_after == 60.0
    assert dict(read.backend_headers) == {"x-org": "a b", "x-team": "c"}
    assert read.index_dir == "/cache/cw-middleware/file-index"
    with pytest.raises(cw.ConfigError, match="CW_STALE_AFTER"):
        resolve_read(environ={"CW_STALE_AFTER": "soon"})


def test_the_environments_export_is_read_by_the_settings_rule():
    assert environment_export({"CW_EXPORT": " none "}) == "none"
    assert environment_export({"CW_EXPORT": "file:/tmp/x.jsonl"}) == "file:/tmp/x.jsonl"
    assert environment_export({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}) == "otlp"
    assert environment_export({}) == f"file:{DEFAULT_TELEMETRY_FILE}"
    assert environment_export({"CW_EXPORT": "nowhere"}) == f"file:{DEFAULT_TELEMETRY_FILE}"  # refused by the writer
