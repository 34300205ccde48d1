"""The contract's telemetry names: attribute keys, span, event and metric names, as OpenTelemetry and Prometheus spell them.

`contract.py` holds the models (`Snapshot`, `StageContextWindow`); `codec.py` says how they
travel as attributes; this module spells the names they travel under. Writers
(``_snapshots/telemetry.py``) and readers (``_readback/``) both import it and nothing of each
other: dashboards, alert rules and every backend reader depend on these names, so they are
spelled once, here (docs/reference/telemetry.md is generated from this file).

GenAI keys follow the OpenTelemetry GenAI semantic conventions v1.41
(https://opentelemetry.io/docs/specs/semconv/gen-ai/); our own keys live under
``agent.*``, never ``gen_ai.*``.
"""

from __future__ import annotations

SCHEMA_VERSION = 1

# ---------------------------------------------------------------- spans and events

SNAPSHOT_EVENT = "agent.context_window.snapshot"
ATTR_SCHEMA = "agent.context_window.schema"
ATTR_RUN_ID = "agent.run.id"
ATTR_STAGE_ID = "agent.stage.id"
ATTR_STAGE_KIND = "agent.stage.kind"
ATTR_PARENT_STAGE_ID = "agent.stage.parent_id"  # a sub-agent's stage: the stage of its run it was started from
# Stage lifecycle, readable from the backend alone. A span is exported only when it
# ends, so stage start is announced by a zero-duration marker span (STAGE_START_SPAN,
# child of the stage span, state "started"); the stage span itself is exported at the
# end with state "ended".
ATTR_STAGE_STATE = "agent.stage.state"
STAGE_STATE_STARTED = "started"
STAGE_STATE_ENDED = "ended"
STAGE_SPAN_PREFIX = "agent.stage"
STAGE_START_SPAN = "agent.stage.start"
AGENT_STAGE_KIND = "agent"
# A snapshot that arrives after its call span ended rides on a short linked span.
LATE_SNAPSHOT_SPAN = "agent.context_window.late_snapshot"
ATTR_LATE = "agent.context_window.late"
# A late snapshot whose call is no longer its stage's newest: kept (nothing is lost), never "latest".
ATTR_SUPERSEDED = "agent.context_window.superseded"
ATTR_INPUT_TOKENS = "agent.context_window.input_tokens"
ATTR_LIMIT_TOKENS = "agent.context_window.limit_tokens"
ATTR_UTILIZATION = "agent.context_window.utilization"
ATTR_COUNT_METHOD = "agent.context_window.count_method"
ATTR_EVENT_SEQ = "agent.context_window.event_seq"
ATTR_GENERATED_AT = "agent.context_window.generated_at"
ATTR_WARNINGS = "agent.context_window.warnings"
ATTR_PROVIDER = "agent.context_window.provider"
ATTR_MODEL = "agent.context_window.model"
DETAILS_PREFIX = "agent.context_window.details."
ATTR_DETAIL_CATEGORIES = DETAILS_PREFIX + "category"
ATTR_DETAIL_SOURCES = DETAILS_PREFIX + "source"
ATTR_DETAIL_TOKENS = DETAILS_PREFIX + "tokens"
DETAIL_ARRAYS = (ATTR_DETAIL_CATEGORIES, ATTR_DETAIL_SOURCES, ATTR_DETAIL_TOKENS)
ATTR_CATEGORY = "agent.context_window.category"
TOKENS_PREFIX = "agent.context_window.tokens."
# Per-tool rows, as parallel arrays (one entry a row; the folded row's category and source are "").
TOOLS_PREFIX = "agent.context_window.tools."
ATTR_TOOL_NAMES = TOOLS_PREFIX + "name"
ATTR_TOOL_CATEGORIES = TOOLS_PREFIX + "category"
ATTR_TOOL_SOURCES = TOOLS_PREFIX + "source"
ATTR_TOOL_DEFINITION_TOKENS = TOOLS_PREFIX + "definition_tokens"
ATTR_TOOL_RESULT_TOKENS = TOOLS_PREFIX + "result_tokens"
ATTR_TOOL_INVOCATIONS = TOOLS_PREFIX + "invocations"
ATTR_TOOL_FOLDED = TOOLS_PREFIX + "folded"
TOOL_ARRAYS = (
    ATTR_TOOL_NAMES,
    ATTR_TOOL_CATEGORIES,
    ATTR_TOOL_SOURCES,
    ATTR_TOOL_DEFINITION_TOKENS,
    ATTR_TOOL_RESULT_TOKENS,
    ATTR_TOOL_INVOCATIONS,
    ATTR_TOOL_FOLDED,
)
# The unused definitions over the stage, parallel arrays as the rows (event only).
UNUSED_PREFIX = "agent.context_window.unused_tools."
UNUSED_ARRAYS = tuple(
    UNUSED_PREFIX + f for f in ("name", "category", "source", "definition_tokens", "stage_definition_tokens", "requests")
)
ATTR_UNUSED_TOOL_TOKENS = "agent.context_window.unused_tool_tokens"
# Segments the stage's requests sent more than once, parallel arrays (event only): labels and opaque fingerprints.
REPEATED_PREFIX = "agent.context_window.repeated."
REPEATED_ARRAYS = tuple(
    REPEATED_PREFIX + f for f in ("target", "category", "fingerprint", "copies", "tokens", "stage_tokens", "requests")
)
# The stage's calls whose repeated prefix the provider's cache did not serve (event only).
CACHE_MISS_PREFIX = "agent.context_window.cache_miss."
CACHE_MISS_FIELDS = ("prefix_tokens", "cached_tokens", "missed_tokens", "stage_missed_tokens", "stage_saving", "calls")
# The cache and the money: per category like the tokens; absent where the snapshot has none.
# No key is both a value and the prefix of others: Phoenix (and any store that nests dotted keys) keeps both.
ATTR_CACHED_TOKENS = "agent.context_window.cached_tokens"
CACHED_PREFIX = "agent.context_window.cached."  # + category
COST_PREFIX = "agent.context_window.cost."  # + category: USD
ATTR_INPUT_COST = COST_PREFIX + "input"
ATTR_COST_CURRENCY = COST_PREFIX + "currency"
# The stage so far (_snapshots/ledger.py): each call once, at its latest number.
STAGE_TOTALS_PREFIX = "agent.context_window.stage."
ATTR_STAGE_CALLS = STAGE_TOTALS_PREFIX + "calls"
ATTR_STAGE_INPUT_TOKENS = STAGE_TOTALS_PREFIX + "input_tokens"
ATTR_STAGE_INPUT_COST = STAGE_TOTALS_PREFIX + "input_cost"
ATTR_STAGE_PEAK = STAGE_TOTALS_PREFIX + "peak_usage_percent"
ATTR_STAGE_CACHED = STAGE_TOTALS_PREFIX + "cached_tokens"
ATTR_STAGE_COMPACTIONS = STAGE_TOTALS_PREFIX + "compactions"
STAGE_TOKENS_PREFIX = STAGE_TOTALS_PREFIX + "tokens."  # + category
STAGE_COST_PREFIX = STAGE_TOTALS_PREFIX + "cost."  # + category
STAGE_CACHED_PREFIX = STAGE_TOTALS_PREFIX + "cached."  # + category
ATTR_COMPACTION_BEFORE = "agent.context_window.compaction.before_tokens"
ATTR_COMPACTION_AFTER = "agent.context_window.compaction.after_tokens"
# The call a snapshot belongs to (its call span's id): a stage's totals count each call once.
ATTR_CALL_ID = "agent.context_window.call_id"

# GenAI semantic conventions v1.41.
GEN_AI_OPERATION = "gen_ai.operation.name"
GEN_AI_PROVIDER = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_CACHE_READ = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_TOKEN_TYPE = "gen_ai.token.type"
# Prompt-cache writes: the GenAI conventions' current name, and the one backends on v1.41 read.
GEN_AI_CACHE_CREATION = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_CACHE_WRITE = "gen_ai.usage.cache_write.input_tokens"
GEN_AI_FINISH_REASONS = "gen_ai.response.finish_reasons"  # string[]
GEN_AI_REQUEST_STREAM = "gen_ai.request.stream"  # bool: the response was streamed
GEN_AI_CONVERSATION_COMPACTED = "gen_ai.conversation.compacted"  # bool, where a compaction is known
# The context window on the call span: GenAI has no name yet; two vendor conventions agree on these.
GEN_AI_CONTEXT_WINDOW_SIZE = "gen_ai.context.window_size"  # int {token}
GEN_AI_CONTEXT_UTILIZATION = "gen_ai.context.utilization"  # double, 0..1
# Langfuse's usage breakdown (an option, off by default): the categories as usage types, with the output.
LANGFUSE_USAGE_DETAILS = "langfuse.observation.usage_details"
ERROR_TYPE = "error.type"
SERVICE_NAME = "service.name"

# ---------------------------------------------------------------- metrics
# OpenTelemetry instrument names; a Prometheus backend stores them with dots as
# underscores and counters suffixed ``_total`` (see `prometheus_name`).

METRIC_TOKENS = "agent.context_window.tokens"  # gauge {token}, by ATTR_CATEGORY
METRIC_LIMIT = "agent.context_window.limit"  # gauge {token}
METRIC_UTILIZATION = "agent.context_window.utilization"  # gauge 1
METRIC_SNAPSHOTS = "agent.context_window.snapshots"  # counter {snapshot}, by ATTR_COUNT_METHOD
METRIC_COUNT_FAILURES = "agent.context_window.provider_count.failures"  # counter {failure}
METRIC_UNUSED_TOOL_TOKENS = "agent.context_window.unused_tool_tokens"  # gauge {token}: definitions never called
# gauge {call}: the calls left until the stage's input reaches the threshold share of its window, at its recent
# growth (its forecast); -1 while the stage does not grow.
METRIC_CALLS_UNTIL_THRESHOLD = "agent.context_window.calls_until_threshold"
# counter {USD}, by ATTR_CATEGORY: each call's input cost, once. The unit is an annotation so that every
# Prometheus path (scrape endpoint, Collector, OTLP push) stores it as ``agent_context_window_cost_total``.
METRIC_COST = "agent.context_window.cost"
COST_UNIT = "{USD}"
# gauge {token}, by ATTR_CATEGORY: of the latest request's tokens, those served from the prompt cache (set
# where the response reports cached tokens); with agent.context_window.tokens, the cache share.
METRIC_CACHED_TOKENS = "agent.context_window.cached_tokens"
METRIC_TOKEN_USAGE = "gen_ai.client.token.usage"  # histogram {token}, by GEN_AI_TOKEN_TYPE
METRIC_OPERATION_DURATION = "gen_ai.client.operation.duration"  # histogram s, a call from its start to its end

# Bucket boundaries of gen_ai.client.token.usage, from the GenAI metrics conventions.
TOKEN_HISTOGRAM_BOUNDARIES = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]
# Bucket boundaries of gen_ai.client.operation.duration (seconds), from the same conventions.
DURATION_HISTOGRAM_BOUNDARIES = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]


def prometheus_name(name: str, counter: bool = False) -> str:
    """An instrument or attribute name as Prometheus stores it (dots become underscores)."""
    out = name.replace(".", "_")
    return out + "_total" if counter else out


# The contract's metric and label names as a Prometheus backend stores them: the reader and
# the dashboards both query these.
PROM_TOKENS = prometheus_name(METRIC_TOKENS)
PROM_LIMIT = prometheus_name(METRIC_LIMIT)
PROM_UTILIZATION = prometheus_name(METRIC_UTILIZATION)
PROM_SNAPSHOTS = prometheus_name(METRIC_SNAPSHOTS, counter=True)
PROM_COUNT_FAILURES = prometheus_name(METRIC_COUNT_FAILURES, counter=True)
PROM_UNUSED_TOOL_TOKENS = prometheus_name(METRIC_UNUSED_TOOL_TOKENS)
PROM_CALLS_UNTIL_THRESHOLD = prometheus_name(METRIC_CALLS_UNTIL_THRESHOLD)
PROM_COST = prometheus_name(METRIC_COST, counter=True)
PROM_CACHED_TOKENS = prometheus_name(METRIC_CACHED_TOKENS)
PROM_TOKEN_USAGE = prometheus_name(METRIC_TOKEN_USAGE)
PROM_CATEGORY = prometheus_name(ATTR_CATEGORY)
PROM_COUNT_METHOD = prometheus_name(ATTR_COUNT_METHOD)
PROM_PROVIDER = prometheus_name(GEN_AI_PROVIDER)
PROM_MODEL = prometheus_name(GEN_AI_REQUEST_MODEL)
PROM_SERVICE = prometheus_name(SERVICE_NAME)
PROM_RUN = prometheus_name(ATTR_RUN_ID)
PROM_STAGE = prometheus_name(ATTR_STAGE_ID)
PROM_TOKEN_TYPE = prometheus_name(GEN_AI_TOKEN_TYPE)
