"""The embedded telemetry pipeline: the package's only user of the OpenTelemetry SDK.

``export="file:PATH"`` appends OTLP JSON lines to PATH (spans, metrics and log events in
the one file, each line starting with its signal's key); ``export="otlp"`` sends plain OTLP
where the standard OTEL_EXPORTER_OTLP_* variables say; ``metrics="prometheus:HOST:PORT"``
serves metrics on a scrape endpoint instead. Export never reaches the call path, faults
are bounded and said once, and a forked child builds a pipeline of its own.

Modules, along the data flow: `span_queue` (finished spans queued as `records`), the
OTLP JSON encoders (`encode`), the `file_exporters` and their `sink`, the guarded
network exporters (`otlp`), the metric `readers` and the `scrape` endpoint, `health`
(each fault said once, the exporters' own lines held back), and `pipeline`, which
assembles them (`install`).
"""

from .pipeline import Pipeline, install

__all__ = ["Pipeline", "install"]
