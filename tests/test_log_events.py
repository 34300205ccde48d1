"""Snapshots as log-based events (OTEP 4430), on request: same attributes, correlated with the call span."""

from __future__ import annotations

import json

from embedded_helpers import embedded_runtime

import cw_middleware as cw
from cw_middleware._kernel.config import resolve


def test_log_events_are_off_by_default():
    assert resolve(environ={}).log_events is False
    assert resolve(environ={"CW_LOG_EVENTS": "1"}).log_events is True


def test_each_snapshot_is_also_a_log_event_in_the_embedded_file(tmp_path):
    path = tmp_path / "t.jsonl"
    with embedded_runtime(export=f"file:{path}", log_events=True) as runtime:
        with cw.stage(run_id="run-log", stage_id="s"):
            cw.completion(model="gpt-4o", messages=[{"role": "user", "content": "hello"}], mock_response="ok")
        assert runtime.flush(5)
        snapshots = runtime.snapshots()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    records = [r for doc in lines for rl in doc.get("resourceLogs", []) for sl in rl["scopeLogs"] for r in sl["logRecords"]]
    spans = [s for doc in lines for rs in doc.get("resourceSpans", []) for ss in rs["scopeSpans"] for s in ss["spans"]]
    call_span = next(s for s in spans if s["name"].startswith("chat"))
    assert [r["eventName"] for r in records] == ["agent.context_window.snapshot"] * len(snapshots)
    for record, snap in zip(records, snapshots):
        attrs = {a["key"]: a["value"] for a in record["attributes"]}
        assert int(attrs["agent.context_window.input_tokens"]["intValue"]) == snap.input_tokens
        assert attrs["agent.stage.id"]["stringValue"] == "s"
        assert record["spanId"] == call_span["spanId"] and record["traceId"] == call_span["traceId"]
    # The file reader still reads the stage from the spans, skipping the log lines.
    assert cw.reader(f"file:{path}").context_window("run-log", "s").input_tokens == snapshots[-1].input_tokens
