"""The Prometheus scrape endpoint of ``metrics="prometheus:HOST:PORT"``, opened only when asked.

An ``opentelemetry-exporter-prometheus`` reader behind prometheus_client's HTTP server,
bound to HOST only, served once the pipeline's provider has registered the reader (a
scrape before would collect an unregistered reader) and stopped by its shutdown. It serves
a registry of its own, not prometheus_client's global one, so an application's own
Prometheus metrics are neither mixed in nor disturbed.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Optional

from .._kernel.config import Config
from .._kernel.errors import ConfigError
from .health import warn
from .readers import prometheus_reader

logger = logging.getLogger("cw_middleware")


class ScrapeEndpoint:
    """Prometheus text format on HOST:PORT, from a PrometheusMetricReader with a registry of its own."""

    def __init__(self, config: Config) -> None:
        try:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader  # noqa: F401 - is the extra installed?
            from prometheus_client import CollectorRegistry
        except ImportError:
            raise ConfigError(
                f"metrics={config.metrics} needs the optional Prometheus exporter: pip install 'cw-middleware[prometheus]'"
            ) from None

        assert config.metrics_endpoint is not None
        self.address: tuple[str, int] = config.metrics_endpoint
        self._registry = CollectorRegistry(auto_describe=True)
        self.reader = prometheus_reader(self._registry, config)
        self._httpd: Any = None
        self._thread: Optional[threading.Thread] = None

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}/metrics" if ":" in host else f"http://{host}:{port}/metrics"

    def serve(self) -> bool:
        """Bind HOST:PORT and answer scrapes; False (said once a minute) when the port cannot be bound.

        A busy port is not a bad setting (several worker processes of one application share
        one environment): the application runs on, and the other telemetry too.
        """
        from prometheus_client import start_http_server

        host, port = self.address
        try:
            # prometheus_client picks the address family from HOST; nothing else is bound.
            self._httpd, self._thread = start_http_server(port, addr=host, registry=self._registry)
        except OSError as exc:
            warn(
                "metrics-endpoint",
                f"cw_middleware: cannot serve metrics on {host}:{port} ({type(exc).__name__}: {exc.strerror or exc}); "
                "metrics are not exported from this process, the LLM calls proceed",
            )
            return False
        bound = self._httpd.server_address
        self.address = (str(bound[0]), int(bound[1]))
        logger.info("cw_middleware: metrics for Prometheus at %s", self.url)
        return True

    def close(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(5.0)

    def close_inherited(self) -> None:
        """A forked child's copy: its serving thread stayed in the parent, so only the socket is closed."""
        if self._httpd is not None:
            self._httpd.server_close()
