"""Sub-agents (issue 39 item 3): a stage opened inside another stage of its run is that stage's child; the read side
shows the run as a tree, each parent with its own calls and its children's rolled up, in the reader's answers, the
stage listing, the run's summary (JSON and `cw-middleware summary`), the HTTP API and the LiteLLM Proxy's headers.

Real LiteLLM (mock_response) into the embedded file; each expected number comes from the snapshots the calls
published (``cw.snapshots()``), never from the code that folds them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request

import pytest
from embedded_helpers import exported_to

import cw_middleware as cw
from cw_middleware._serve.server import make_server

RUN = "run-tree"


def _call(text: str) -> cw.Snapshot:
    cw.completion(model="gpt-4o", messages=[{"role": "user", "content": text}], mock_response="ok")
    return cw.snapshots()[-1]


@pytest.fixture
def tree(tmp_path):
    """lead@1 calls once, starts research@1 (two calls, and its own sub-agent fetch@1, one call) and review@1 (named
    its parent outright, as a sub-agent run elsewhere would be); solo@1 is a stage of its own."""
    path = tmp_path / "telemetry.jsonl"
    finals: dict[str, list[cw.Snapshot]] = {}
    with exported_to(str(path)) as runtime:
        with cw.stage(RUN, "lead@1"):
            finals["lead@1"] = [_call("plan the work " + "w " * 40)]
            with cw.stage(RUN, "research@1"):
                finals["research@1"] = [_call("search " + "x " * 120), _call("search more " + "x " * 300)]
                with cw.stage(RUN, "fetch@1"):
                    finals["fetch@1"] = [_call("fetch " + "y " * 80)]
        with cw.stage(RUN, "review@1", parent_stage_id="lead@1"):
            finals["review@1"] = [_call("review " + "z " * 60)]
        with cw.stage(RUN, "solo@1"):
            finals["solo@1"] = [_call("alone")]
        with cw.stage("other-run", "child@1"):  # another run: no parent across runs
            with cw.stage(RUN, "elsewhere@1"):
                _call("elsewhere")
        runtime.flush(5.0)
    return f"file:{path}", finals


def test_a_nested_stage_names_its_parent_and_the_parent_its_children(tree):
    backend, _ = tree
    reader = cw.reader(backend)
    listing = {s.stage_id: s.parent_stage_id for s in reader.stages(RUN)}
    assert listing == {
        "lead@1": None, "research@1": "lead@1", "fetch@1": "research@1", "review@1": "lead@1", "solo@1": None,
        "elsewhere@1": None,
    }  # fmt: skip
    lead = reader.context_window(RUN, "lead@1")
    assert lead.parent_stage_id is None and sorted(lead.child_stage_ids) == ["research@1", "review@1"]
    research = reader.context_window(RUN, "research@1")
    assert research.parent_stage_id == "lead@1" and research.child_stage_ids == ["fetch@1"]
    fetch = reader.context_window(RUN, "fetch@1")
    assert fetch.parent_stage_id == "research@1" and fetch.child_stage_ids == []
    assert reader.context_window("other-run", "child@1").child_stage_ids == []


def test_the_summary_is_a_tree_each_parent_with_its_childrens_totals_rolled_up(tree):
    backend, finals = tree
    report = cw.reader(backend).summary(RUN)
    rows = {r.stage_id: r for r in report.stages}

    def tokens(*stages: str) -> int:
        return sum(s.input_tokens for stage in stages for s in finals[stage])

    assert rows["lead@1"].stage_totals.calls == 1 and rows["lead@1"].stage_totals.input_tokens == tokens("lead@1")
    family = ("lead@1", "research@1", "fetch@1", "review@1")
    assert rows["lead@1"].rolled_up.calls == 5 and rows["lead@1"].rolled_up.input_tokens == tokens(*family)
    assert rows["research@1"].rolled_up.input_tokens == tokens("research@1", "fetch@1")
    assert rows["fetch@1"].rolled_up is None and rows["solo@1"].rolled_up is None
    assert rows["fetch@1"].parent_stage_id == "research@1" and rows["research@1"].child_stage_ids == ["fetch@1"]
    # the run's totals count each stage once
    assert (
        report.totals.calls == 7
        and report.totals.input_tokens == tokens(*family, "solo@1") + rows["elsewhere@1"].stage_totals.input_tokens
    )

    done = subprocess.run(
        [sys.executable, "-m", "cw_middleware", "summary", RUN, "--backend", backend],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    names = []
    for line in done.stdout.splitlines():
        text = line.strip()
        name = "└" + text[2:].split()[0] if text.startswith("└ ") else (text.split() or [""])[0]
        if name.lstrip("└") in {"lead@1", "research@1", "fetch@1", "review@1", "solo@1"}:
            names.append(name)
    order = names
    assert order == ["lead@1", "└research@1", "└fetch@1", "└review@1", "solo@1"], done.stdout
    assert "with its 2 sub-agent stage(s): 5 call(s)" in done.stdout


def test_the_http_api_says_parent_and_children(tree):
    backend, _ = tree
    server = make_server(cw.reader(backend), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:

        def get(path: str) -> dict:
            with urllib.request.urlopen(server.url + path, timeout=10) as r:
                return json.loads(r.read())

        stages = {s["stage_id"]: s["parent_stage_id"] for s in get(f"/api/v1/runs/{RUN}/stages")["stages"]}
        assert stages["fetch@1"] == "research@1" and stages["lead@1"] is None
        window = get(f"/api/v1/runs/{RUN}/stages/research@1/context-window")
        assert window["parent_stage_id"] == "lead@1" and window["child_stage_ids"] == ["fetch@1"]
        summary = get(f"/api/v1/runs/{RUN}/summary")
        lead = next(s for s in summary["stages"] if s["stage_id"] == "lead@1")
        assert lead["rolled_up"]["calls"] == 5 and sorted(lead["child_stage_ids"]) == ["research@1", "review@1"]
    finally:
        server.shutdown()
        server.server_close()


def test_a_stage_cannot_be_its_own_parent():
    with pytest.raises(cw.ConfigError, match="its own parent"):
        with cw.stage(RUN, "a@1", parent_stage_id="a@1"):
            pass


def test_the_proxy_takes_the_parent_from_a_header_or_metadata():
    from cw_middleware._capture.litellm_proxy import stage_of_request

    by_header = {
        "proxy_server_request": {"headers": {"x-cw-run-id": RUN, "x-cw-stage-id": "sub@1", "x-cw-parent-stage-id": "lead@1"}}
    }
    assert stage_of_request(by_header, "svc").parent_stage_id == "lead@1"
    by_metadata = {"metadata": {"cw_run_id": RUN, "cw_stage_id": "sub@1", "cw_parent_stage_id": "lead@1"}}
    assert stage_of_request(by_metadata, "svc").parent_stage_id == "lead@1"
    assert stage_of_request({"metadata": {"cw_run_id": RUN, "cw_stage_id": "sub@1"}}, "svc").parent_stage_id is None
