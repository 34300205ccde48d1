"""dashboards/: the Grafana dashboard (generated from code) and the Prometheus alert rules.

Every panel's PromQL and every alert expression runs on a real Prometheus (and the panels
on VictoriaMetrics too) fed by the real agent run of `servers.agent_metrics`.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import yaml
from servers import free_port, require_binary
from servers.agent_metrics import RUN

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "dashboards" / "cw-context-window.json"
ALERTS = ROOT / "dashboards" / "alerts.yml"
SCHEMA = ROOT / "tests" / "fixtures" / "grafana" / "dashboard-11.6.0.schema.json"
# What Grafana substitutes in the queries: every variable at "All", the rate interval of a short range.
VARIABLES = {"$service": ".*", "$model": ".*", "$run": ".*", "$stage": ".*", "$__rate_interval": "1m"}


def _build_module() -> Any:
    spec = importlib.util.spec_from_file_location("dashboards_build", ROOT / "dashboards" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _substitute(expr: str) -> str:
    for name in sorted(VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, VARIABLES[name])
    assert "$" not in expr, expr
    return expr


def _targets() -> list[tuple[str, dict[str, Any]]]:
    return [(panel["title"], target) for panel in _dashboard()["panels"] for target in panel["targets"]]


def _has_values(result: list[dict[str, Any]]) -> bool:
    values = [v for item in result for _, v in (item.get("values") or [item["value"]])]
    return any(v not in ("NaN", "+Inf", "-Inf") for v in values)


# ---------------------------------------------------------------- the JSON itself


def test_the_committed_dashboard_is_what_the_code_builds():
    assert DASHBOARD.read_text() == _build_module().render(), "run: python dashboards/build.py"


def test_the_dashboard_passes_grafanas_dashboard_schema():
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    assert [e.message for e in validator.iter_errors(_dashboard())] == []
    broken = {**_dashboard(), "panels": [{"title": "no type"}], "graphTooltip": "sometimes"}
    wrong = {e.json_path for e in validator.iter_errors(broken)}  # the schema does check: a panel without a type, a bad enum
    assert wrong == {"$.panels[0]", "$.graphTooltip"}


def test_the_dashboard_has_the_panels_the_readme_lists():
    titles = [p["title"] for p in _dashboard()["panels"]]
    assert titles == [
        "Context window by category",
        "Utilization of the context window",
        "Context window size by model",
        "Top models and agents by utilization",
        "Stages above 95%",
        "Stages by utilization (click a stage for its snapshot spans)",
        "Snapshots per second by count method",
        "Provider count failures",
        "Input tokens per call (p50, p95)",
        "Input cost by category (USD)",
        "Input cost by run (USD)",
        "Unused tool definitions (tokens per request)",
        "Share of input served from the prompt cache",
    ]
    panels = {p["title"]: p for p in _dashboard()["panels"]}
    assert panels["Context window by category"]["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
    steps = panels["Utilization of the context window"]["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["value"] for s in steps] == [None, 0.8, 0.95]
    links = panels["Stages by utilization (click a stage for its snapshot spans)"]["fieldConfig"]["defaults"]["links"]
    assert [link["title"] for link in links] == ["Snapshot spans in Tempo", "Snapshot spans in Jaeger"]
    for link in links:
        assert "${__data.fields.agent_run_id}" in link["url"] and "${__data.fields.agent_stage_id}" in link["url"]
    assert "span.agent.run.id" in links[0]["url"] and "agent.run.id%3D" in links[1]["url"]
    assert {v["name"] for v in _dashboard()["templating"]["list"]} == {"datasource", "service", "model", "run", "stage"}


# ---------------------------------------------------------------- on real servers


@pytest.mark.system
@pytest.mark.parametrize("backend", ["prometheus", "victoria-metrics"])
def test_every_panel_query_returns_data(agent_metrics, backend):
    server = agent_metrics.prometheus if backend == "prometheus" else agent_metrics.victoria_metrics
    # VictoriaMetrics leaves the newest points out of range queries: let the run's data be a few seconds old.
    time.sleep(max(0.0, agent_metrics.done_at + 5 - time.time()))
    end = time.time()
    empty = []
    for title, target in _targets():
        expr = _substitute(target["expr"])
        if target.get("instant"):
            result = server.query(expr)
        else:
            result = server.api("query_range", query=expr, start=end - 120, end=end, step=2)["result"]
        if not _has_values(result):
            empty.append((title, expr))
    assert empty == []


@pytest.mark.system
def test_panels_show_the_engineered_stages(agent_metrics):
    prom = agent_metrics.prometheus
    targets = dict(_targets())
    (hot,) = prom.query(_substitute(targets["Stages above 95%"]["expr"]))
    assert hot["value"][1] == "2"  # hot@1 (98.7%) and exceeded@1 (123.4%)
    table = prom.query(_substitute(targets["Stages by utilization (click a stage for its snapshot spans)"]["expr"]))
    ranked = sorted(table, key=lambda r: -float(r["value"][1]))
    assert [r["metric"]["agent_stage_id"] for r in ranked[:2]] == ["exceeded@1", "hot@1"]
    # Rows are the stages exported now: not the exited process's run, and no row for the unlabelled one.
    assert {r["metric"]["agent_run_id"] for r in ranked} == {RUN}


@pytest.mark.system
def test_the_new_panels_show_the_engineered_stages(agent_metrics):
    """Cost, unused tools and the cache share (issue 21) against what the file reader says of the same run."""
    import cw_middleware as cw

    prom = agent_metrics.prometheus
    targets = dict(_targets())
    spans = cw.reader(f"file:{agent_metrics.agent_file}")
    cost = {
        r["metric"]["agent_context_window_category"]: float(r["value"][1])
        for r in prom.query(
            _substitute(
                targets["Input cost by category (USD)"]["expr"].replace(
                    "agent_context_window_cost_total{", 'agent_context_window_cost_total{agent_run_id="' + RUN + '",'
                )
            )
        )
    }
    report = spans.summary(RUN)
    for category, totals in report.totals.by_category.items():
        assert cost.get(category.value, 0.0) == pytest.approx(totals.cost or 0.0), category
    unused = {
        r["metric"]["agent_stage_id"]: float(r["value"][1])
        for r in prom.query(_substitute(targets["Unused tool definitions (tokens per request)"]["expr"]))
    }
    assert unused["canary@1"] == spans.context_window(RUN, "canary@1").unused_tool_tokens > 0
    (share,) = prom.query(_substitute(targets["Share of input served from the prompt cache"]["expr"]))
    assert float(share["value"][1]) == pytest.approx(1024 / 1234)  # cached@1, the one request whose response reported cache


@pytest.mark.system
def test_every_variable_query_has_values(agent_metrics):
    prom = agent_metrics.prometheus
    for variable in _dashboard()["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"]["query"])
        assert match, variable["query"]
        selector, label = _substitute(match.group(1)), match.group(2)
        assert prom.api(f"label/{label}/values", **{"match[]": selector}), variable["name"]


@pytest.mark.system
def test_promtool_accepts_the_alert_rules():
    promtool = require_binary("promtool", "apt-get install -y --no-install-recommends prometheus")
    done = subprocess.run([promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    rules = yaml.safe_load(ALERTS.read_text())
    count = sum(len(group["rules"]) for group in rules["groups"])
    assert count >= 5 and f"SUCCESS: {count} rules found" in done.stdout


def _rules() -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"]}


@pytest.mark.system
def test_each_alert_fires_for_exactly_what_was_engineered(agent_metrics):
    prom = agent_metrics.prometheus
    rules = _rules()
    fired = {name: prom.query(rule["expr"]) for name, rule in rules.items()}
    stages = {name: sorted(r["metric"].get("agent_stage_id", "") for r in result) for name, result in fired.items()}
    assert stages["ContextWindowAbove80Percent"] == ["exceeded@1", "hot@1"]
    assert stages["ContextWindowAbove95Percent"] == ["exceeded@1", "hot@1"]
    assert stages["ContextWindowExceeded"] == ["exceeded@1"]
    (failing,) = fired["ProviderCountFailuresRising"]
    assert (failing["metric"]["gen_ai_provider_name"], failing["metric"]["gen_ai_request_model"]) == (
        "anthropic",
        "claude-sonnet-4-5",
    )
    assert fired["RunInputCostAbove5USD"] == []  # the run's mocked calls cost cents, not dollars
    # ... and with the threshold under the run's cost, it fires for that run alone (the exited process's is not exported)
    (spent,) = prom.query(f"sum({rules['RunInputCostAbove5USD']['expr'].split(' > ')[0].strip()})")
    lowered = rules["RunInputCostAbove5USD"]["expr"].replace("> 5", f"> {float(spent['value'][1]) / 2}")
    assert [r["metric"]["agent_run_id"] for r in prom.query(lowered)] == [RUN]
    # The thresholds are the dashboard's.
    build = _build_module()
    assert f"> {build.WARN}" in rules["ContextWindowAbove80Percent"]["expr"]
    assert f"> {build.CRITICAL}" in rules["ContextWindowAbove95Percent"]["expr"]


@pytest.mark.system
def test_prometheus_loads_the_rules_and_raises_the_alerts(agent_metrics):
    prom = agent_metrics.prometheus
    deadline = time.monotonic() + 20
    while True:
        groups = prom.api("rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        alerts = {a["labels"]["alertname"]: a["state"] for a in prom.api("alerts")["alerts"]}
        if len(alerts) == 4 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert sorted(r["name"] for r in rules) == sorted(_rules()) and {r["health"] for r in rules} == {"ok"}
    assert alerts["ContextWindowExceeded"] == "firing" and alerts["ProviderCountFailuresRising"] == "firing"
    assert alerts["ContextWindowAbove80Percent"] == "pending" and alerts["ContextWindowAbove95Percent"] in ("pending", "firing")


# ---------------------------------------------------------------- inhibition (dashboards/alertmanager.yml)

ALERTMANAGER = ROOT / "dashboards" / "alertmanager.yml"
CONTEXT_ALERTS = ("ContextWindowExceeded", "ContextWindowAbove95Percent", "ContextWindowAbove80Percent")


def test_amtool_accepts_the_alertmanager_config():
    amtool = require_binary("amtool", "apt-get install -y --no-install-recommends prometheus-alertmanager")
    done = subprocess.run([amtool, "check-config", str(ALERTMANAGER)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 inhibit rules" in done.stdout


def test_the_inhibition_rules_name_the_alerts_and_the_labels_they_group_by():
    rules = _rules()
    grouped_by = {
        name: set(re.search(r"max by \(([^)]*)\)", rules[name]["expr"])[1].replace(" ", "").split(",")) for name in CONTEXT_ALERTS
    }
    for rule in yaml.safe_load(ALERTMANAGER.read_text())["inhibit_rules"]:
        assert set(rule["equal"]) == grouped_by["ContextWindowExceeded"] == grouped_by["ContextWindowAbove80Percent"]
        for matcher in rule["source_matchers"] + rule["target_matchers"]:
            pattern = matcher.split("=", 1)[1].lstrip("~").strip('"')
            assert any(re.fullmatch(pattern, name) for name in CONTEXT_ALERTS), matcher


@pytest.mark.system
def test_a_real_alertmanager_holds_back_the_weaker_alerts_of_an_overfull_stage(tmp_path):
    binary = require_binary("prometheus-alertmanager", "apt-get install -y --no-install-recommends prometheus-alertmanager")
    port = free_port()
    log = open(tmp_path / "alertmanager.log", "wb")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={ALERTMANAGER}",
            f"--storage.path={tmp_path}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/api/v2"
    try:
        _wait_ready(f"http://127.0.0.1:{port}/-/ready", process)
        stage = {"service_name": "agents", "gen_ai_provider_name": "openai", "gen_ai_request_model": "gpt-4o"}
        full = {**stage, "agent_run_id": "run-1", "agent_stage_id": "exceeded@1"}
        hot = {**stage, "agent_run_id": "run-1", "agent_stage_id": "hot@1"}
        alerts = [{"labels": {"alertname": name, **full}} for name in CONTEXT_ALERTS]
        alerts += [{"labels": {"alertname": name, **hot}} for name in CONTEXT_ALERTS[1:]]
        assert httpx.post(f"{url}/alerts", json=alerts, timeout=10).status_code == 200
        deadline = time.monotonic() + 20
        while True:
            state = {
                (a["labels"]["alertname"], a["labels"]["agent_stage_id"]): a["status"]["state"]
                for a in httpx.get(f"{url}/alerts", timeout=10).json()
            }
            if len(state) == 5 and list(state.values()).count("suppressed") == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert state == {
            ("ContextWindowExceeded", "exceeded@1"): "active",
            ("ContextWindowAbove95Percent", "exceeded@1"): "suppressed",
            ("ContextWindowAbove80Percent", "exceeded@1"): "suppressed",
            ("ContextWindowAbove95Percent", "hot@1"): "active",  # another stage: nothing above it fires
            ("ContextWindowAbove80Percent", "hot@1"): "suppressed",
        }
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def _wait_ready(ready: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert process.poll() is None, "alertmanager exited"
        try:
            if httpx.get(ready, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError("alertmanager was not ready in 20 s")


def test_the_documented_panel_table_says_which_panels_are_rates():
    from docs_blocks import documents

    rows: dict[str, str] = {}
    for path in documents():
        text = path.read_text(encoding="utf-8")
        if "| panel | shows |" in text:
            table = text.split("| panel | shows |", 1)[1].split("\n\n", 1)[0]
            rows.update(re.findall(r"^\| ([^|]+?) \| (.+) \|$", table, flags=re.M))
    assert rows, "no document lists the dashboard's panels"
    for panel in _dashboard()["panels"]:
        title = panel["title"].split(" (click")[0]
        shows = rows[title]
        if any("rate(" in target["expr"] for target in panel["targets"]):
            assert "a rate" in shows, title
        elif any(word in panel["title"].lower() for word in ("failures", "per call")):
            assert "a total" in shows, title
