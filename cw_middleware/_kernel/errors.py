"""The errors cw_middleware raises, as one small tree.

    CwMiddlewareError
    ├── TagError              a bad tag, raised where the tag is made
    ├── ConfigError           bad settings given to configure()
    ├── NotFound              read-back: no such run or stage (HTTP 404)
    └── BackendError          read-back: the telemetry backend failed
        ├── BackendUnavailable     it could not be reached
        └── BackendResponseError   it answered something we cannot read

Only caller mistakes raise on the call path (a bad tag); everything that fails
inside the middleware becomes a snapshot warning instead.
"""

from __future__ import annotations


class CwMiddlewareError(Exception):
    """Base of every error this package raises."""


class TagError(CwMiddlewareError, ValueError):
    """A segment, message or tool tag is malformed."""


class ConfigError(CwMiddlewareError, ValueError):
    """configure() was given a setting it cannot use."""


class NotFound(CwMiddlewareError, LookupError):
    """The backend knows no such run or stage."""


class BackendError(CwMiddlewareError):
    """Reading from a telemetry backend failed."""


class BackendUnavailable(BackendError):
    """The backend could not be reached (connection refused, timeout)."""


class BackendResponseError(BackendError):
    """The backend answered, but not with something we can read."""
