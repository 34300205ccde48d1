"""The Grafana dashboard of dashboards/, as code: `python dashboards/build.py` rewrites the JSON.

Built with Grafana's own grafana-foundation-sdk (the dev extra, pinned to the Grafana 11.6
build); the committed `cw-context-window.json` must equal a fresh build (a test checks it,
runs every panel's PromQL on a real Prometheus fed by a real agent run, and validates the
JSON against Grafana's dashboard schema). Metric and label names come from the contract
(`cw_middleware/_kernel/names.py`), as our scrape endpoint and the Collector pipeline of
examples/collector/ store them.

Template variables: `datasource` (a Prometheus data source), `service` (service.name),
`model` (gen_ai.request.model), `run` and `stage` (only with metric_run_labels on;
"All" otherwise). The stage table links each stage to its snapshot spans in Tempo and
Jaeger (Grafana data sources with uids `tempo` and `jaeger`, as provisioned by
examples/collector/).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

from grafana_foundation_sdk.builders import bargauge, dashboard, prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders.common import GraphThresholdsStyleConfig, StackingConfig, VizLegendOptions
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models import prometheus as prom_model

from cw_middleware._kernel import names

OUT = Path(__file__).with_name("cw-context-window.json")
UID = "cw-context-window"

TOKENS, LIMIT, UTILIZATION = names.PROM_TOKENS, names.PROM_LIMIT, names.PROM_UTILIZATION
SNAPSHOTS, FAILURES = names.PROM_SNAPSHOTS, names.PROM_COUNT_FAILURES
TOKEN_USAGE_BUCKET = names.PROM_TOKEN_USAGE + "_bucket"
CATEGORY, METHOD, TOKEN_TYPE = names.PROM_CATEGORY, names.PROM_COUNT_METHOD, names.PROM_TOKEN_TYPE
PROVIDER, MODEL, SERVICE = names.PROM_PROVIDER, names.PROM_MODEL, names.PROM_SERVICE
RUN, STAGE = names.PROM_RUN, names.PROM_STAGE
COST, CACHED, UNUSED = names.PROM_COST, names.PROM_CACHED_TOKENS, names.PROM_UNUSED_TOOL_TOKENS

# Every panel's selector: the dashboard's variables. "All" is ".*", which also matches
# series without run/stage labels (metric_run_labels off).
FILTER = f'{SERVICE}=~"$service",{MODEL}=~"$model",{RUN}=~"$run",{STAGE}=~"$stage"'
DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
WARN, CRITICAL = 0.8, 0.95  # the alert rules' thresholds (dashboards/alerts.yml)


def _query(expr: str, legend: str = "", ref: str = "A", instant: bool = False) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).legend_format(legend or "__auto").ref_id(ref).datasource(DATASOURCE)
    return q.instant() if instant else q.range()


def _thresholds() -> dashboard.ThresholdsConfig:
    return (
        dashboard.ThresholdsConfig()
        .mode(model.ThresholdsMode.ABSOLUTE)
        .steps(
            [
                model.Threshold(value=None, color="green"),
                model.Threshold(value=WARN, color="orange"),
                model.Threshold(value=CRITICAL, color="red"),
            ]
        )
    )


def _trace_link(title: str, url: str) -> dashboard.DashboardLink:
    return dashboard.DashboardLink(title).type(model.DashboardLinkType.LINK).url(url).target_blank(True)


def _explore(datasource: str, query: dict[str, Any]) -> str:
    """A Grafana Explore URL for one query of a trace data source (Grafana interpolates the ${...} parts)."""
    queries = [{"refId": "A", "datasource": {"uid": datasource}, **query}]
    left = {"datasource": datasource, "queries": queries, "range": {"from": "now-24h", "to": "now"}}
    return "/explore?left=" + quote(json.dumps(left, separators=(",", ":")), safe="${}:,")


def _stage_links() -> list[cogbuilder.Builder[model.DashboardLink]]:
    run, stage = "${__data.fields.agent_run_id}", "${__data.fields.agent_stage_id}"
    traceql = f'{{ span.{names.ATTR_RUN_ID} = "{run}" && span.{names.ATTR_STAGE_ID} = "{stage}" }}'
    tags = f"{names.ATTR_RUN_ID}={run} {names.ATTR_STAGE_ID}={stage}"
    jaeger = {"queryType": "search", "service": "${__data.fields.service_name}", "tags": tags}
    return [
        _trace_link("Snapshot spans in Tempo", _explore("tempo", {"queryType": "traceql", "query": traceql, "limit": 20})),
        _trace_link("Snapshot spans in Jaeger", _explore("jaeger", jaeger)),
    ]


def panels() -> list[Any]:
    """The dashboard's panels, top to bottom."""
    tokens = (
        timeseries.Panel()
        .title("Context window by category")
        .description(
            "Input tokens of the latest request, stacked by category (summed over the selected series: "
            "pick one stage, or one model when run labels are off)."
        )
        .with_target(_query(f"sum by ({CATEGORY}) ({TOKENS}{{{FILTER}}})", f"{{{{{CATEGORY}}}}}"))
        .unit("short")
        .stacking(StackingConfig().mode(common.StackingMode.NORMAL))
        .fill_opacity(60)
        .legend(
            VizLegendOptions()
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.RIGHT)
            .show_legend(True)
        )
        .span(16)
        .height(9)
    )
    utilization = (
        timeseries.Panel()
        .title("Utilization of the context window")
        .description(f"Input tokens over the model's window; lines at {WARN:.0%} and {CRITICAL:.0%}, as the alert rules.")
        .with_target(_query(f"max by ({SERVICE}, {MODEL}) ({UTILIZATION}{{{FILTER}}})", f"{{{{{SERVICE}}}}} {{{{{MODEL}}}}}"))
        .unit("percentunit")
        .min(0)
        .thresholds(_thresholds())
        .thresholds_style(GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.LINE_AND_AREA))
        .span(8)
        .height(9)
    )
    limits = (
        bargauge.Panel()
        .title("Context window size by model")
        .with_target(_query(f"max by ({MODEL}) ({LIMIT}{{{FILTER}}})", f"{{{{{MODEL}}}}}", instant=True))
        .unit("short")
        .orientation(common.VizOrientation.HORIZONTAL)
        .display_mode(common.BarGaugeDisplayMode.BASIC)
        .span(8)
        .height(8)
    )
    top = (
        bargauge.Panel()
        .title("Top models and agents by utilization")
        .with_target(
            _query(
                f"topk(10, max by ({SERVICE}, {MODEL}) ({UTILIZATION}{{{FILTER}}}))",
                f"{{{{{SERVICE}}}}} {{{{{MODEL}}}}}",
                instant=True,
            )
        )
        .unit("percentunit")
        .min(0)
        .max(1)
        .thresholds(_thresholds())
        .orientation(common.VizOrientation.HORIZONTAL)
        .display_mode(common.BarGaugeDisplayMode.GRADIENT)
        .span(8)
        .height(8)
    )
    hot = (
        stat.Panel()
        .title(f"Stages above {CRITICAL:.0%}")
        .description("Needs metric_run_labels: without run labels, series are per model.")
        .with_target(
            _query(f"count(max by ({RUN}, {STAGE}) ({UTILIZATION}{{{FILTER}}}) > {CRITICAL}) or vector(0)", instant=True)
        )
        .thresholds(
            dashboard.ThresholdsConfig()
            .mode(model.ThresholdsMode.ABSOLUTE)
            .steps([model.Threshold(value=None, color="green"), model.Threshold(value=1, color="red")])
        )
        .span(8)
        .height(8)
    )
    stages = (
        table.Panel()
        .title("Stages by utilization (click a stage for its snapshot spans)")
        .description("Needs metric_run_labels. The links open the stage's spans in Tempo or Jaeger.")
        .with_target(
            _query(
                f'topk(20, max by ({SERVICE}, {RUN}, {STAGE}, {MODEL}) ({UTILIZATION}{{{FILTER},{RUN}!=""}}))',
                instant=True,
            ).format(prom_model.PromQueryFormat.TABLE)
        )
        .unit("percentunit")
        .thresholds(_thresholds())
        .data_links(_stage_links())
        .span(24)
        .height(9)
    )
    rate = (
        timeseries.Panel()
        .title("Snapshots per second by count method")
        .description("local_estimate before every call; response_usage and provider_api once the provider's count is known.")
        .with_target(_query(f"sum by ({METHOD}) (rate({SNAPSHOTS}{{{FILTER}}}[$__rate_interval]))", f"{{{{{METHOD}}}}}"))
        .unit("ops")
        .span(12)
        .height(8)
    )
    # The failures and token-usage panels are totals, not rates: with metric_run_labels every stage
    # has series of its own, born at their first value, and rate() needs a rise after the first
    # sample, so per-stage series would show nothing. The snapshots panel above is the one rate,
    # summed over all series by count method (it misses each series' first snapshot).
    failures = (
        timeseries.Panel()
        .title("Provider count failures")
        .description(
            "Failed or timed-out provider token counts since each process started "
            "(the series appears with the first failure; the alert rule watches it rise)."
        )
        .with_target(_query(f"sum by ({PROVIDER}, {MODEL}) ({FAILURES}{{{FILTER}}})", f"{{{{{PROVIDER}}}}} {{{{{MODEL}}}}}"))
        .unit("short")
        .span(12)
        .height(8)
    )
    usage = (
        timeseries.Panel()
        .title("Input tokens per call (p50, p95)")
        .description(
            "From gen_ai.client.token.usage, over the calls since each process started; "
            "calls with provider usage only (mocked calls report none)."
        )
        .with_target(
            _query(
                f'histogram_quantile(0.5, sum by (le, {MODEL}) ({TOKEN_USAGE_BUCKET}{{{TOKEN_TYPE}="input",{FILTER}}}))',
                f"p50 {{{{{MODEL}}}}}",
            )
        )
        .with_target(
            _query(
                f'histogram_quantile(0.95, sum by (le, {MODEL}) ({TOKEN_USAGE_BUCKET}{{{TOKEN_TYPE}="input",{FILTER}}}))',
                f"p95 {{{{{MODEL}}}}}",
                ref="B",
            )
        )
        .unit("short")
        .span(24)
        .height(8)
    )
    cost = (
        timeseries.Panel()
        .title("Input cost by category (USD)")
        .description(
            "agent.context_window.cost: each call's input cost once, from LiteLLM's own prices, since each process "
            "started (cache reads and writes at their prices; calls of a model without a price count nothing)."
        )
        .with_target(_query(f"sum by ({CATEGORY}) ({COST}{{{FILTER}}})", f"{{{{{CATEGORY}}}}}"))
        .unit("currencyUSD")
        .decimals(4)
        .stacking(StackingConfig().mode(common.StackingMode.NORMAL))
        .fill_opacity(40)
        .span(12)
        .height(8)
    )
    run_cost = (
        bargauge.Panel()
        .title("Input cost by run (USD)")
        .description("Needs metric_run_labels. The alert rule RunInputCostAbove5USD watches the same sum.")
        .with_target(_query(f"topk(10, sum by ({RUN}) ({COST}{{{FILTER}}}))", f"{{{{{RUN}}}}}", instant=True))
        .unit("currencyUSD")
        .decimals(4)
        .orientation(common.VizOrientation.HORIZONTAL)
        .display_mode(common.BarGaugeDisplayMode.BASIC)
        .span(12)
        .height(8)
    )
    unused = (
        bargauge.Panel()
        .title("Unused tool definitions (tokens per request)")
        .description(
            "agent.context_window.unused_tool_tokens: the definition tokens of the tools the latest request defines "
            "and neither it nor its response calls, the first thing to cut (`cw-middleware show` names them)."
        )
        .with_target(
            _query(
                f"topk(10, max by ({SERVICE}, {MODEL}, {RUN}, {STAGE}) ({UNUSED}{{{FILTER}}}))",
                f"{{{{{SERVICE}}}}} {{{{{RUN}}}}} {{{{{STAGE}}}}}",
                instant=True,
            )
        )
        .unit("short")
        .orientation(common.VizOrientation.HORIZONTAL)
        .display_mode(common.BarGaugeDisplayMode.BASIC)
        .span(12)
        .height(8)
    )
    cache = (
        timeseries.Panel()
        .title("Share of input served from the prompt cache")
        .description(
            "agent.context_window.cached_tokens over agent.context_window.tokens, by model: the latest requests whose "
            "response reported its cache (OpenAI, Gemini, Anthropic)."
        )
        .with_target(
            _query(
                f"sum by ({MODEL}) ({CACHED}{{{FILTER}}}) / sum by ({MODEL}) ({TOKENS}{{{FILTER}}} and on "
                f"({SERVICE}, {MODEL}, {RUN}, {STAGE}, {CATEGORY}) {CACHED}{{{FILTER}}})",
                f"{{{{{MODEL}}}}}",
            )
        )
        .unit("percentunit")
        .min(0)
        .max(1)
        .span(12)
        .height(8)
    )
    return [tokens, utilization, limits, top, hot, stages, rate, failures, usage, cost, run_cost, unused, cache]


def _variable(name: str, label: str, query: str) -> dashboard.QueryVariable:
    return (
        dashboard.QueryVariable(name)
        .label(label)
        .query({"query": query, "refId": name, "qryType": 1})
        .datasource(DATASOURCE)
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(model.VariableOption(selected=True, text="All", value="$__all"))
    )


def build() -> dict[str, Any]:
    """The dashboard as the JSON object Grafana imports."""
    board = (
        dashboard.Dashboard("cw-middleware: context window")
        .uid(UID)
        .description("What fills the context window of every LLM request, from cw-middleware's metrics.")
        .tags(["cw-middleware", "llm", "context-window"])
        .time("now-6h", "now")
        .refresh("30s")
        .timezone("browser")
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .with_variable(dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus"))
        .with_variable(_variable("service", "Service", f"label_values({SNAPSHOTS}, {SERVICE})"))
        .with_variable(_variable("model", "Model", f'label_values({SNAPSHOTS}{{{SERVICE}=~"$service"}}, {MODEL})'))
        .with_variable(_variable("run", "Run", f'label_values({SNAPSHOTS}{{{SERVICE}=~"$service"}}, {RUN})'))
        .with_variable(_variable("stage", "Stage", f'label_values({SNAPSHOTS}{{{SERVICE}=~"$service",{RUN}=~"$run"}}, {STAGE})'))
    )
    for panel in panels():
        board = board.with_panel(panel)
    document: dict[str, Any] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    return document


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if argv[1:] == ["--check"]:
        current = OUT.read_text() if OUT.exists() else ""
        if current != text:
            print(f"{OUT.name} is out of date: run python dashboards/build.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
