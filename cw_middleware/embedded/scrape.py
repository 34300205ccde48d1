"""The Prometheus scrape endpoint of ``metrics="prometheus:HOST:PORT"``, opened only when asked.

An ``opentelemetry-exporter-prometheus`` reader behind prometheus_client's HTTP server,
bound to HOST only, started by the pipeline and stopped by its shutdown. It serves a
registry of its own, not prometheus_client's global one, so an application's own
Prometheus metrics are neither mixed in nor disturbed.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from opentelemetry.sdk.metrics.export import MetricReader

from ..config import Config
from .health import warn
from .readers import prometheus_reader

logger = logging.getLogger("cw_middleware")


class ScrapeEndpoint:
    """Prometheus text format on HOST:PORT, from a PrometheusMetricReader with a registry of its own."""

    def __init__(self, host: str, port: int, reader: MetricReader, registry: Any) -> None:
        from prometheus_client import start_http_server

        self.reader = reader
        # prometheus_client picks the address family from HOST; nothing else is bound.
        self._httpd, self._thread = start_http_server(port, addr=host, registry=registry)
        bound = self._httpd.server_address
        self.address: tuple[str, int] = (str(bound[0]), int(bound[1]))

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}/metrics" if ":" in host else f"http://{host}:{port}/metrics"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5.0)

    def close_inherited(self) -> None:
        """A forked child's copy: its serving thread stayed in the parent, so only the socket is closed."""
        self._httpd.server_close()


def scrape_endpoint(config: Config) -> Optional[ScrapeEndpoint]:
    """Start the endpoint of ``metrics="prometheus:HOST:PORT"``; a port that cannot be bound logs and gives None.

    A busy port is not a bad setting (several worker processes of one application share
    one environment): the application runs on, and the other telemetry too.
    """
    from prometheus_client import CollectorRegistry

    assert config.metrics_endpoint is not None
    host, port = config.metrics_endpoint
    registry = CollectorRegistry(auto_describe=True)
    reader = prometheus_reader(registry, config.metric_series_limit)
    try:
        endpoint = ScrapeEndpoint(host, port, reader, registry)
    except OSError as exc:
        reader.shutdown()
        warn(
            "metrics-endpoint",
            f"cw_middleware: cannot serve metrics on {host}:{port} ({type(exc).__name__}: {exc.strerror or exc}); "
            "metrics are not exported from this process, the LLM calls proceed",
        )
        return None
    logger.info("cw_middleware: metrics for Prometheus at %s", endpoint.url)
    return endpoint
