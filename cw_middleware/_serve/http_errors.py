"""Every answer other than 200, as our JSON error, and the one mapping from what a read raised to it.

ConfigError 400, NotFound 404, BackendUnavailable 503, BackendError 502, and anything
else a reader raises mid-scan (a file truncated or replaced under it: OSError,
ValueError, ...) 502 ``backend_error`` naming only the exception's type, so the server
stays up and says what happened without a stack trace.
"""

from __future__ import annotations

import logging
from typing import Optional

from .._kernel.errors import BackendError, BackendUnavailable, ConfigError, NotFound

logger = logging.getLogger("cw_middleware")


class HttpError(Exception):
    """An answer other than 200, as our JSON error: ``{"error": {"code", "message"}}``."""

    def __init__(self, status: int, code: str, message: str, headers: Optional[dict[str, str]] = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}


def as_http_error(exc: Exception) -> HttpError:
    """The one mapping from what a read raised to the HTTP answer (module docstring)."""
    if isinstance(exc, HttpError):
        return exc
    if isinstance(exc, ConfigError):
        return HttpError(400, "invalid_id", str(exc))
    if isinstance(exc, NotFound):
        return HttpError(404, "not_found", str(exc))
    if isinstance(exc, BackendUnavailable):
        return HttpError(503, "backend_unavailable", str(exc), {"Retry-After": "5"})
    if isinstance(exc, BackendError):
        return HttpError(502, "backend_error", str(exc))
    # A reader failing mid-scan must not take the server down, nor show its traceback.
    logger.warning("cw_middleware serve: the backend failed while reading (%s)", type(exc).__name__)
    return HttpError(
        502,
        "backend_error",
        f"the backend failed while reading ({type(exc).__name__}); the file may have been truncated or replaced"
        " during the scan: retry",
    )
