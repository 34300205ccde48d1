"""Staleness ages out: a stage whose process died reads as stored after the horizon; runs are listed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
from embedded_helpers import embedded_runtime

import cw_middleware as cw
from cw_middleware._kernel.contract import Staleness
from cw_middleware._readback.fold import Horizon
from cw_middleware._readback.otlp_file import OtlpFileReader

MESSAGES = [{"role": "user", "content": "hi"}]

CRASHING_AGENT = textwrap.dedent(
    """
    import os, signal, sys
    import cw_middleware as cw
    cw.configure(export="file:" + sys.argv[1], export_interval_ms=10)
    with cw.stage("crash-run", "implement@1"):
        cw.completion(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], mock_response="ok")
        cw.flush()
        os.kill(os.getpid(), signal.SIGKILL)  # dies inside the stage: its end is never exported
    """
)


@pytest.mark.system
def test_a_killed_process_leaves_a_live_stage_that_ages_out(tmp_path):
    path = tmp_path / "t.jsonl"
    done = subprocess.run([sys.executable, "-c", CRASHING_AGENT, str(path)], capture_output=True, timeout=120)
    assert done.returncode == -9, done.stderr[-2000:]
    fresh = cw.reader(f"file:{path}").context_window("crash-run", "implement@1")
    assert fresh.available and fresh.staleness is Staleness.LIVE
    assert "stage_end_not_seen" not in [w.code for w in fresh.warnings]

    later = time.time_ns() + 31 * 60 * 10**9  # past the documented 30-minute horizon
    reader = OtlpFileReader(str(path), Horizon(now_ns=later))
    aged = reader.latest("crash-run", "implement@1")
    assert aged is not None and aged.available and aged.staleness is Staleness.STORED
    assert "stage_end_not_seen" in [w.code for w in aged.warnings]
    assert aged.input_tokens == fresh.input_tokens  # the numbers stay, only the state changes
    [summary] = reader.stages("crash-run")
    assert summary.staleness is Staleness.STORED
    # The horizon is an option of the reader, too: a quiet second is enough here.
    time.sleep(1.1)
    short = cw.reader(f"file:{path}", stale_after=1).context_window("crash-run", "implement@1")
    assert short.staleness is Staleness.STORED


def test_an_ended_stage_never_carries_the_warning(tmp_path):
    path = tmp_path / "t.jsonl"
    with embedded_runtime(export=f"file:{path}", export_interval_ms=10):
        with cw.stage("ok-run", "s@1"):
            cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="ok")
    later = time.time_ns() + 10 * 3600 * 10**9
    answer = OtlpFileReader(str(path), Horizon(now_ns=later)).latest("ok-run", "s@1")
    assert answer is not None and answer.staleness is Staleness.STORED
    assert "stage_end_not_seen" not in [w.code for w in answer.warnings]


def test_bad_horizon_is_a_config_error(monkeypatch):
    with pytest.raises(cw.ConfigError, match="stale_after"):
        cw.reader("file:x.jsonl", stale_after=-1)
    monkeypatch.setenv("CW_STALE_AFTER", "soon")
    with pytest.raises(cw.ConfigError, match="CW_STALE_AFTER"):
        cw.reader("file:x.jsonl")


def test_runs_are_listed_newest_first(tmp_path):
    path = tmp_path / "t.jsonl"
    with embedded_runtime(export=f"file:{path}", export_interval_ms=10) as rt:
        for run_id in ("run-old", "run-new"):
            with cw.stage(run_id, "a@1"):
                cw.completion(model="gpt-4o", messages=MESSAGES, mock_response="ok")
            with cw.stage(run_id, "b@1", kind="tool"):
                pass
            rt.flush(5)
            time.sleep(0.01)
        with cw.stage("run-open", "a@1"):
            rt.flush(5)
            runs = cw.reader(f"file:{path}").runs()
    assert [r.run_id for r in runs] == ["run-open", "run-new", "run-old"]
    by_id = {r.run_id: r for r in runs}
    assert by_id["run-new"].stages == 2 and by_id["run-new"].live_stages == 0
    assert by_id["run-open"].live_stages == 1
    assert set(by_id["run-old"].as_dict()) == {"run_id", "stages", "live_stages", "first_seen_at", "last_seen_at"}
    assert cw.reader(f"file:{tmp_path / 'none.jsonl'}").runs() == []
