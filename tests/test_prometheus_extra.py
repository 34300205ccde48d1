"""The scrape endpoint is an optional extra: without it, asking for it is one clear error naming the extra."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_metrics_endpoint_without_the_extra_names_the_extra(tmp_path):
    # A child where the exporter cannot be imported, as in an install without cw-middleware[prometheus].
    script = textwrap.dedent(
        """
        import sys
        sys.modules["opentelemetry.exporter.prometheus"] = None  # import fails as if not installed
        import cw_middleware as cw
        try:
            cw.configure(export="none", metrics="prometheus:127.0.0.1:9")
        except cw.ConfigError as exc:
            print("ConfigError:", exc)
        else:
            print("configured")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "ConfigError:" in done.stdout and "cw-middleware[prometheus]" in done.stdout, done.stdout
