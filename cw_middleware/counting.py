"""Provider token counts, in the background, at most once per request fingerprint.

(Skeleton: the worker and the provider endpoints are filled in by the provider-count work.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional


@dataclass(frozen=True)
class CountTarget:
    """Where and how to ask a provider for a count (credentials never leave this object)."""

    provider: str
    model: str
    api_base: Optional[str]
    api_key: str


def target_for(provider: Optional[str], model: str, kwargs: Mapping[str, Any]) -> Optional[CountTarget]:
    """The count endpoint for this request, or None when no credentials are configured."""
    return None


class ProviderCounter:
    def __init__(self, timeout: float) -> None:
        self.timeout = timeout

    def submit(self, target: CountTarget, request: Mapping[str, Any], on_result: Callable[[Optional[int], Any], None]) -> bool:
        return False

    def wait_idle(self, timeout: float) -> bool:
        return True

    def close(self) -> None:
        pass
