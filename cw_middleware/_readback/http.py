"""One HTTP client for every networked reader: auth, timeouts, bounded retries, clean errors.

A reader asks `BackendClient.get_json(path, params)` and gets decoded JSON, None
(for a 404 it declared to mean "absent"), or a `BackendError` whose message names
the backend and its URL, never the credentials, the query string or the body the
backend answered with. Connection errors, timeouts, 429 and 5xx answers are
retried ``options.retries`` times with exponential backoff (0.2 s, 0.4 s, ... at
most 2 s). httpx is imported only here, so the file reader never pays for it.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

from .._kernel.errors import BackendResponseError, BackendUnavailable

if TYPE_CHECKING:
    from .options import BackendURL, ReaderOptions

_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
MAX_BACKOFF = 2.0


class BackendClient:
    """GETs JSON from one backend; built by a reader from its `BackendURL` and `ReaderOptions`."""

    def __init__(self, backend: str, url: BackendURL, options: ReaderOptions) -> None:
        import httpx

        self.backend = backend  # "Prometheus", "Jaeger", ...: errors name it
        self.base_url = url.location
        self.display = url.display
        self.options = options
        headers = dict(options.headers)
        if options.bearer_token:
            headers["Authorization"] = f"Bearer {options.bearer_token}"
        elif options.basic_auth:
            user, password = options.basic_auth
            headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        self._auth_headers = headers
        self._owns_client = options.client is None
        self._client = options.client or httpx.Client(timeout=options.timeout, verify=options.verify, follow_redirects=False)
        self._httpx = httpx

    def get_json(self, path: str, params: Optional[Mapping[str, Any]] = None, absent_on_404: bool = False) -> Any:
        """The decoded JSON answer of ``GET base_url + path``; None for a 404 when ``absent_on_404``."""
        response = self._get(path, params)
        if response.status_code == 404 and absent_on_404:
            return None
        if response.status_code in (401, 403):
            raise BackendResponseError(
                f"{self.backend} at {self.display} refused the request (HTTP {response.status_code}): check the credentials"
            )
        if not 200 <= response.status_code < 300:
            raise BackendResponseError(f"{self.backend} at {self.display} answered HTTP {response.status_code} for {path}")
        try:
            return response.json()
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
            message = f"{self.backend} at {self.display} answered something that is not JSON for {path}"
            raise BackendResponseError(message) from None

    def _get(self, path: str, params: Optional[Mapping[str, Any]]) -> Any:
        attempts = 1 + max(0, self.options.retries)
        url = self.base_url + path
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = self._client.get(url, params=params, headers=self._auth_headers, timeout=self.options.timeout)
            except self._httpx.TimeoutException:
                if last:
                    raise BackendUnavailable(
                        f"{self.backend} at {self.display} did not answer within {self.options.timeout:g} s"
                    ) from None
            except self._httpx.HTTPError as exc:  # connection refused, DNS, TLS, protocol errors
                if last:
                    raise BackendUnavailable(
                        f"{self.backend} at {self.display} could not be reached ({type(exc).__name__})"
                    ) from None
            else:
                if response.status_code not in _RETRY_STATUS or last:
                    if response.status_code in _RETRY_STATUS:
                        raise BackendUnavailable(
                            f"{self.backend} at {self.display} answered HTTP {response.status_code} {attempts} time(s) for {path}"
                        )
                    return response
            time.sleep(min(MAX_BACKOFF, 0.2 * 2**attempt))
        raise AssertionError("unreachable")  # the loop returns or raises

    def close(self) -> None:
        if self._owns_client:
            self._client.close()
