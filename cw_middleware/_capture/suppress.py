"""OpenTelemetry's suppress-instrumentation switch, as every contrib instrumentation reads it.

Code that must not be observed (an exporter's own requests, a tracer calling a model for
itself) runs inside ``opentelemetry.instrumentation.utils.suppress_instrumentation()``: it
sets ``opentelemetry.context._SUPPRESS_INSTRUMENTATION_KEY`` (and, for older readers, the
plain key ``"suppress_instrumentation"``) in the current context. `instrument()`'s shells
forward such calls straight to LiteLLM, unobserved, as an instrumentation's wrapper does.
"""

from __future__ import annotations

from opentelemetry import context

# The API's key object (opentelemetry-api 1.x defines it in opentelemetry.context); the plain string
# key is the one opentelemetry-instrumentation still sets beside it for older readers.
_KEY = getattr(context, "_SUPPRESS_INSTRUMENTATION_KEY", None)
_PLAIN_KEY = "suppress_instrumentation"


def suppressed() -> bool:
    """True inside ``suppress_instrumentation()`` (either key set truthy in the current context)."""
    return bool((_KEY is not None and context.get_value(_KEY)) or context.get_value(_PLAIN_KEY))
