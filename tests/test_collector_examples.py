"""examples/collector: what can be checked without a Collector (none installs here).

The YAML parses; every component is a documented type used with documented keys (the
lists below are taken from the Collector's and collector-contrib's READMEs: otlp
receiver, batch/memory_limiter/transform/filter processors, otlp_grpc/prometheus/file
exporters); every pipeline names components that are defined once the files are merged as
the Collector merges them; the content-stripping pattern deletes what other
instrumentations write and keeps every key of ours; the compose file publishes on
loopback only, pins its images and mounts files that exist.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "collector"

# type -> keys its README documents (nested keys checked one level down where listed).
KNOWN: dict[str, dict[str, set[str]]] = {
    "receivers": {"otlp": {"protocols"}},
    "processors": {
        "batch": {"timeout", "send_batch_size", "send_batch_max_size", "metadata_keys", "metadata_cardinality_limit"},
        "memory_limiter": {"check_interval", "limit_mib", "spike_limit_mib", "limit_percentage", "spike_limit_percentage"},
        "transform": {"error_mode", "trace_statements", "metric_statements", "log_statements", "profile_statements"},
        "filter": {"error_mode", "traces", "metrics", "logs"},
    },
    "exporters": {
        "otlp_grpc": {"endpoint", "tls", "compression", "timeout", "retry_on_failure", "sending_queue", "headers"},
        "otlp_http": {"endpoint", "tls", "compression", "timeout", "retry_on_failure", "sending_queue", "headers"},
        "prometheus": {
            "endpoint",
            "const_labels",
            "namespace",
            "send_timestamps",
            "metric_expiration",
            "resource_constant_labels",
            "enable_open_metrics",
            "without_scope_info",
            "translation_strategy",
            "tls",
        },
        "file": {"path", "rotation", "format", "compression", "append", "flush_interval", "group_by"},
        "debug": {"verbosity", "sampling_initial", "sampling_thereafter"},
    },
}
FILTER_CONTEXTS = {"traces": {"span", "spanevent"}, "metrics": {"metric", "datapoint"}, "logs": {"log_record"}}
OTLP_PROTOCOLS = {"grpc", "http"}
PIPELINE_SIGNALS = {"traces", "metrics", "logs"}

# What other instrumentations write (must go) and what we write (must stay).
CONTENT_KEYS = [
    "gen_ai.prompt",
    "gen_ai.prompt.0.content",
    "gen_ai.prompt.1.role",
    "gen_ai.completion.0.content",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gen_ai.tool.definitions",
    "llm.input_messages.0.message.content",
    "llm.output_messages.0.message.content",
    "llm.prompts",
    "llm.prompt_template.template",
    "llm.prompt_template.variables",
    "llm.tools.0.tool.json_schema",
    "input.value",
    "output.value",
    "tool.parameters",
    "traceloop.entity.input",
    "traceloop.entity.output",
]
OUR_KEYS = [
    "agent.run.id",
    "agent.stage.id",
    "agent.context_window.tokens.conversation",
    "agent.context_window.details.source",
    "agent.context_window.input_tokens",
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.cache_read.input_tokens",
    "error.type",
    "input.mime_type",
    "llm.token_count.prompt",
    "llm.model_name",
]


def _load(name: str) -> Any:
    return yaml.safe_load((EXAMPLES / name).read_text())


def _merge(base: Any, extra: Any) -> Any:
    """The Collector's merge of several --config files: maps merge deeply, anything else is replaced."""
    if isinstance(base, dict) and isinstance(extra, dict):
        out = dict(base)
        for key, value in extra.items():
            out[key] = _merge(out[key], value) if key in out else value
        return out
    return extra


PIPELINE_CONFIGS = ["otel-collector.yaml", "file-export.yaml"]


@pytest.mark.parametrize("name", PIPELINE_CONFIGS)
def test_pipeline_configs_use_documented_components_all_defined(name):
    config = _merge(_load(name), _load("strip-prompt-content.yaml"))
    for section, known in KNOWN.items():
        for component, settings in (config.get(section) or {}).items():
            kind = component.split("/", 1)[0]
            assert kind in known, f"{section}.{component}: not a documented component type"
            unknown = set(settings or {}) - known[kind]
            assert not unknown, f"{section}.{component}: undocumented keys {unknown}"
            if kind == "otlp":
                assert set(settings["protocols"]) <= OTLP_PROTOCOLS
            if kind == "filter":
                for signal, contexts in settings.items():
                    if signal != "error_mode":
                        assert set(contexts) <= FILTER_CONTEXTS[signal], f"{component}: {signal} contexts"
    pipelines = config["service"]["pipelines"]
    assert set(pipelines) <= PIPELINE_SIGNALS and "traces" in pipelines
    used = set()
    for signal, pipeline in pipelines.items():
        for role in ("receivers", "processors", "exporters"):
            for component in pipeline.get(role, []):
                assert component in (config.get(role) or {}), f"{signal} pipeline names undefined {role[:-1]} {component!r}"
                used.add((role, component))
        assert pipeline["processors"][-1] == "batch", "batch goes last"
        assert pipeline["processors"][0] == "memory_limiter", "memory_limiter goes first"
    for role in ("receivers", "exporters"):
        assert {c for c in config[role]} == {c for r, c in used if r == role}, f"an unused {role[:-1]}"
    for signal in ("traces", "logs"):
        if signal in pipelines:
            assert {"transform/strip_prompt_content", "filter/drop_prompt_content"} <= set(pipelines[signal]["processors"])


def _strip_patterns() -> list[re.Pattern[str]]:
    processor = _load("strip-prompt-content.yaml")["processors"]["transform/strip_prompt_content"]
    statements = processor["trace_statements"] + processor["log_statements"]
    patterns = [re.search(r'delete_matching_keys\((\w+)\.attributes, "(.*)"\)$', s) for s in statements]
    assert all(patterns) and {p.group(1) for p in patterns if p} == {"span", "spanevent", "log"}
    # OTTL string literals escape backslashes: "\\." in the YAML value is the regex \.
    return [re.compile(p.group(2).replace("\\\\", "\\")) for p in patterns if p]


def test_prompt_content_keys_are_deleted_and_ours_kept():
    for pattern in _strip_patterns():
        kept = [k for k in CONTENT_KEYS if not pattern.search(k)]
        assert not kept, f"content keys that would survive: {kept}"
        deleted = [k for k in OUR_KEYS if pattern.search(k)]
        assert not deleted, f"keys of ours (or harmless metadata) that would be deleted: {deleted}"


def test_content_events_and_log_records_are_dropped():
    processor = _load("strip-prompt-content.yaml")["processors"]["filter/drop_prompt_content"]
    assert 'name == "gen_ai.content.prompt"' in processor["traces"]["spanevent"]
    assert 'name == "gen_ai.content.completion"' in processor["traces"]["spanevent"]
    user_message = re.search(r'IsMatch\(event_name, "(.*)"\)', processor["logs"]["log_record"][0])
    assert user_message is not None
    pattern = re.compile(user_message.group(1).replace("\\\\", "\\"))
    assert all(pattern.search(f"gen_ai.{role}.message") for role in ("system", "user", "assistant", "tool"))
    assert not pattern.search("agent.context_window.snapshot")


def test_the_collector_keeps_the_scrape_endpoints_metric_names():
    """unit "1" would get the Collector's `_ratio` suffix; the dashboards use the SDK endpoint's names."""
    statements = _load("otel-collector.yaml")["processors"]["transform/prometheus_names"]["metric_statements"]
    assert statements == ['set(metric.unit, "") where metric.name == "agent.context_window.utilization"']


def test_file_export_writes_what_the_file_reader_reads():
    exporter = _load("file-export.yaml")["exporters"]["file"]
    assert exporter["format"] == "json" and "compression" not in exporter and "rotation" not in exporter


def test_compose_is_loopback_only_pinned_and_complete():
    compose = _load("docker-compose.yaml")
    services = compose["services"]
    assert set(services) == {"otel-collector", "jaeger", "tempo", "prometheus", "grafana"}
    for name, service in services.items():
        image = service["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name}: pin the image"
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                target = (EXAMPLES / source).resolve()
                assert target.exists() or target.name == "dashboards", f"{name} mounts missing {source}"
    configs = [a.split("=", 1)[1] for a in services["otel-collector"]["command"]]
    mounted = {v.split(":")[1]: v.split(":")[0] for v in services["otel-collector"]["volumes"]}
    assert all(c in mounted and (EXAMPLES / mounted[c]).exists() for c in configs)
    collector = _merge(_load("otel-collector.yaml"), _load("strip-prompt-content.yaml"))
    targets = {e["endpoint"].split(":")[0] for e in collector["exporters"].values() if "endpoint" in e}
    assert {"jaeger", "tempo"} <= targets and targets <= set(services) | {"0.0.0.0"}
    scrape = _load("prometheus.yaml")["scrape_configs"][0]["static_configs"][0]["targets"]
    assert scrape == [f"otel-collector:{collector['exporters']['prometheus']['endpoint'].rsplit(':', 1)[1]}"]


def test_grafana_provisioning_names_every_backend():
    sources = yaml.safe_load((EXAMPLES / "grafana/provisioning/datasources/datasources.yaml").read_text())
    assert sources["apiVersion"] == 1
    expected = {("prometheus", "prometheus"), ("tempo", "tempo"), ("jaeger", "jaeger")}
    assert {(s["type"], s["uid"]) for s in sources["datasources"]} == expected
    dashboards = yaml.safe_load((EXAMPLES / "grafana/provisioning/dashboards/dashboards.yaml").read_text())
    assert dashboards["providers"][0]["type"] == "file"
    assert dashboards["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    tempo = _load("tempo.yaml")
    assert tempo["server"]["http_listen_port"] == 3200 and "otlp" in tempo["distributor"]["receivers"]
