"""Calls outside any stage: the service's default run, one stage per UTC day, readable from the export."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from embedded_helpers import embedded_runtime

import cw_middleware as cw
from cw_middleware._capture.runtime import Runtime, set_runtime
from cw_middleware._capture.stages import default_stage
from cw_middleware._kernel.config import resolve
from cw_middleware._kernel.contract import StageInfo

MSGS = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]


def _today() -> str:
    return datetime.now(UTC).date().isoformat()


def test_the_default_stage_is_the_utc_day_of_the_service():
    evening_in_new_york = datetime(2026, 1, 2, 21, 30, tzinfo=timezone(timedelta(hours=-5)))
    assert default_stage("billing-bot", now=evening_in_new_york) == StageInfo("default:billing-bot", "2026-01-03", "agent")
    # The proxy callback's case: a run id from a header, no stage id.
    assert default_stage("svc", run_id="team-a", now=evening_in_new_york).run_id == "team-a"


def test_the_day_turns_at_utc_midnight():
    midnight = datetime(2026, 1, 3, tzinfo=UTC)
    assert default_stage("svc", now=midnight - timedelta(milliseconds=1)).stage_id == "2026-01-02"
    assert default_stage("svc", now=midnight).stage_id == "2026-01-03"
    assert default_stage("svc", now=midnight + timedelta(seconds=86399.9)).stage_id == "2026-01-03"


def test_calls_outside_a_stage_carry_the_default_ids_and_open_no_stage_span(telemetry):
    rt = Runtime(
        resolve(export="none", service_name="billing-bot", environ={}), telemetry.tracer_provider, telemetry.meter_provider
    )
    previous = set_runtime(rt)
    try:
        cw.completion(model="gpt-4o", messages=MSGS, mock_response="ok")
        assert cw.current_stage() is None  # no stage is opened; the call is attributed
    finally:
        set_runtime(previous)
    assert {(s.run_id, s.stage_id) for s in rt.snapshots()} == {("default:billing-bot", _today())}
    spans = telemetry.spans.get_finished_spans()
    assert [s.name for s in spans] == ["chat gpt-4o"]
    attrs = spans[0].attributes
    assert (attrs["agent.run.id"], attrs["agent.stage.id"], attrs["agent.stage.kind"]) == (
        "default:billing-bot",
        _today(),
        "agent",
    )


def test_the_default_run_reads_back_from_the_embedded_file(tmp_path):
    path = tmp_path / "t.jsonl"
    with embedded_runtime(export=f"file:{path}"):
        cw.completion(model="gpt-4o", messages=MSGS, mock_response="ok")
    answer = cw.reader(f"file:{path}").context_window("default:cw-middleware", _today())
    assert answer.available and answer.input_tokens == cw.estimate(model="gpt-4o", messages=MSGS).input_tokens
    assert [s.stage_id for s in cw.reader(f"file:{path}").stages("default:cw-middleware")] == [_today()]
