"""The OTLP JSON lines file reader: tail scan, tolerance, late snapshots."""

from __future__ import annotations

import json

import pytest
from embedded_helpers import embedded_runtime

import cw_middleware as cw
from cw_middleware._counting.model_facts import RequestMeta
from cw_middleware._kernel.contract import Category, CountMethod, Staleness
from cw_middleware._readback import Missing
from cw_middleware._readback.otlp_file import OtlpFileReader
from cw_middleware._snapshots.build import SnapshotParts, build_snapshot

PARTS = SnapshotParts()

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]


def _write_stages(path, stages):
    with embedded_runtime(export=f"file:{path}", export_interval_ms=10) as rt:
        for run_id, stage_id in stages:
            with cw.stage(run_id, stage_id):
                cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="ok")
            rt.flush(5)  # one export batch a stage: many lines


def test_reads_among_many_lines_and_skips_metric_and_damaged_lines(tmp_path):
    path = tmp_path / "t.jsonl"
    stages = [("run-a", "s@1"), ("run-b", "s@1"), ("run-a", "s@2"), ("run-a", "ünïcode stage/1")]
    _write_stages(path, stages)
    with open(path, "ab") as f:
        f.write(b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"half-writ')  # a line being written
    lines = path.read_bytes().splitlines()
    assert any(line.startswith(b'{"resourceMetrics"') for line in lines)
    reader = cw.reader(f"file:{path}")
    for run_id, stage_id in stages:
        answer = reader.context_window(run_id, stage_id)
        assert answer.available and answer.stage_id == stage_id and answer.staleness is Staleness.STORED
    assert [s.stage_id for s in reader.stages("run-a")] == ["s@1", "s@2", "ünïcode stage/1"]
    with pytest.raises(cw.NotFound):
        reader.context_window("run-b", "s@2")


def test_missing_file_is_not_found(tmp_path):
    reader = cw.reader(f"file:{tmp_path / 'absent.jsonl'}")
    with pytest.raises(cw.NotFound):
        reader.context_window("r", "s")
    assert OtlpFileReader(str(tmp_path / "absent.jsonl")).latest("r", "s") is Missing.RUN


def test_a_directory_or_no_path_is_an_input_mistake(tmp_path):
    with pytest.raises(cw.ConfigError, match="is a directory"):
        cw.reader(f"file:{tmp_path}")
    with pytest.raises(cw.ConfigError, match="needs a path"):
        cw.reader("file://")


def test_a_well_formed_line_with_damaged_values_is_skipped(tmp_path):
    path = tmp_path / "t.jsonl"
    _write_stages(path, [("r", "s")])
    good = cw.reader(f"file:{path}").context_window("r", "s")
    damaged = {"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "zz", "spanId": 5, "name": "chat gpt-4o", "startTimeUnixNano": "n/a", "endTimeUnixNano": {"x": 1},
        "attributes": [{"key": "agent.run.id", "value": {"stringValue": "r"}},
                       {"key": "agent.stage.id", "value": {"stringValue": "s"}}],
        "events": [{"name": "agent.context_window.snapshot", "timeUnixNano": [], "attributes": "nope"}],
    }]}]}]}  # fmt: skip
    with open(path, "a") as f:
        f.write(json.dumps(damaged) + "\n")
    assert cw.reader(f"file:{path}").context_window("r", "s") == good


def test_url_forms(tmp_path):
    path = tmp_path / "t.jsonl"
    _write_stages(path, [("r", "s")])
    for url in (f"file:{path}", f"file://{path}", str(path)):
        assert cw.reader(url).context_window("r", "s").available
    with pytest.raises(cw.ConfigError):
        cw.reader("jaeger2:http://x")
    with pytest.raises(cw.ConfigError):
        cw.reader(f"file:{path}").context_window("r", "bad\nid")


def test_late_snapshot_reaches_the_file_and_is_the_latest(tmp_path):
    path = tmp_path / "t.jsonl"
    with embedded_runtime(export=f"file:{path}") as rt:
        tel = rt.telemetry
        with cw.stage("run-late", "agent@1") as stage:
            call = tel.start_call("chat", "openai", "gpt-4o", stage)
            meta = RequestMeta(stage.run_id, stage.stage_id, "openai", "gpt-4o", 128000)
            by_source = {(Category.SYSTEM_PROMPT, "system"): 10, (Category.CONVERSATION, "user"): 30}
            call.record(build_snapshot(by_source, meta, CountMethod.LOCAL_ESTIMATE, parts=PARTS))
            call.end(input_tokens=41)
        # The stage is over; the slow provider count arrives now.
        late = build_snapshot(by_source, meta, CountMethod.PROVIDER_API_SCALED_BREAKDOWN, total=44, parts=PARTS)
        call.record(late)
    spans = [
        s
        for line in path.read_text().splitlines()
        if line.startswith('{"resourceSpans"')
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
    ]
    late_spans = [s for s in spans if s["name"] == "agent.context_window.late_snapshot"]
    assert (
        len(late_spans) == 1
        and late_spans[0]["links"][0]["spanId"] == call.span.get_span_context().span_id.to_bytes(8, "big").hex()
    )
    answer = cw.reader(f"file:{path}").context_window("run-late", "agent@1")
    assert answer.count_method is CountMethod.PROVIDER_API_SCALED_BREAKDOWN
    assert answer.input_tokens == 44 and answer.event_seq == late.event_seq
    assert answer.staleness is Staleness.STORED


def test_a_snapshot_with_damaged_values_is_skipped_and_an_older_good_one_wins(tmp_path):
    path = tmp_path / "t.jsonl"
    _write_stages(path, [("r", "s")])
    good = cw.reader(f"file:{path}").context_window("r", "s")

    def attr(key, value):
        kind = "intValue" if isinstance(value, int) else "doubleValue" if isinstance(value, float) else "stringValue"
        return {"key": key, "value": {kind: value}}

    for damage in (
        [attr("agent.context_window.limit_tokens", 1e999)],
        [{"key": "agent.context_window.details.category", "value": {"intValue": 7}}],
        [{"key": "agent.context_window.provider", "value": {"intValue": 1}}],
    ):
        event = {
            "name": "agent.context_window.snapshot",
            "timeUnixNano": "99999999999999999999999",
            "attributes": [
                attr("agent.run.id", "r"),
                attr("agent.stage.id", "s"),
                attr("agent.context_window.generated_at", "2999-01-01T00:00:00+00:00"),
                *damage,
            ],
        }
        span = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "chat gpt-4o", "events": [event],
                "attributes": [attr("agent.run.id", "r"), attr("agent.stage.id", "s")]}  # fmt: skip
        with open(path, "a") as f:
            f.write(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}) + "\n")
        reader = cw.reader(f"file:{path}")
        answer = reader.context_window("r", "s")
        assert (answer.input_tokens, answer.event_seq) == (good.input_tokens, good.event_seq)
        assert [s.stage_id for s in reader.stages("r")] == ["s"]


def test_a_file_without_any_otlp_json_line_is_a_response_error(tmp_path):
    other = tmp_path / "notes.txt"
    other.write_text("just some notes\nnot telemetry at all\n")
    reader = cw.reader(f"file:{other}")
    with pytest.raises(cw.BackendResponseError, match="not an OTLP JSON file"):
        reader.context_window("r", "s")
    with pytest.raises(cw.BackendResponseError, match="not an OTLP JSON file"):
        reader.runs()
    # A real telemetry file with a damaged or half-written line, or metrics only, is still OTLP JSON.
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"resourceMetrics":[]}\ngarbage\n{"resourceSpans":[{"scopeSpans":[{"spans":[{"na')
    with pytest.raises(cw.NotFound):
        cw.reader(f"file:{metrics}").context_window("r", "s")
    assert cw.reader(f"file:{metrics}").runs() == []
