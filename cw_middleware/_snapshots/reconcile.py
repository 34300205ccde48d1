"""Reconcile a local breakdown with an authoritative total.

A provider count or a response's usage says how many input tokens a request
really had, but not what they were spent on. The local breakdown supplies the
proportions; largest-remainder (Hamilton) apportionment scales it so that the
parts are whole numbers, never negative, and sum exactly to the total.

Content the local count cannot see (images, audio, files count 0 locally) breaks
plain proportional scaling: the provider's total includes the image, so scaling
would hand the image's tokens to every category in proportion (a 4-word system
prompt grew to 548 tokens). `reconcile` therefore takes the *carriers*, the keys
whose messages hold such content, and applies one rule:

* the total is at least the local sum: every known part keeps its local count and
  the surplus goes to the carriers only (split by how many unseen parts each
  carries; with no carrier named, to ``remainder_key``, i.e. ``other``);
* the total is below the local sum: the local count overestimated what it could
  see, and everything is scaled down proportionally as without carriers.

Either way the parts are whole, non-negative and sum exactly to the total.

An explicit cache breakpoint (Anthropic's ``cache_control``) gives a second exact
number: the response's cache read + cache write is the token count of the prompt
up to the breakpoint. `reconcile_with_prefix` then reconciles in two groups: the
prefix's local parts scale to that exact count and the rest to what remains, so
an error in one group (a long tool result after the breakpoint) cannot leak into
the other (the cached system prompt and tools).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any, Optional, TypeVar

K = TypeVar("K", bound=Hashable)


def apportion(weights: Mapping[K, int], total: int, remainder_key: K) -> dict[K, int]:
    """Scale non-negative integer weights to sum exactly to ``total``.

    With no weight to go by, everything goes to ``remainder_key``. Ties in the
    fractional parts go to the larger weight, then to insertion order, so the
    result is deterministic.
    """
    if total < 0:
        raise ValueError("total must be >= 0")
    positive = {k: w for k, w in weights.items() if w > 0}
    weight_sum = sum(positive.values())
    if weight_sum == 0:
        return {remainder_key: total} if total else {}
    floors: dict[K, int] = {}
    remainders: list[tuple[int, int, int, K]] = []
    for index, (key, weight) in enumerate(positive.items()):
        quotient, remainder = divmod(weight * total, weight_sum)
        floors[key] = quotient
        remainders.append((-remainder, -weight, index, key))
    left = total - sum(floors.values())
    for _, _, _, key in sorted(remainders)[:left]:
        floors[key] += 1
    return {k: v for k, v in floors.items() if v}


def reconcile(local: Mapping[K, int], total: int, carriers: Mapping[K, int] | None, remainder_key: K) -> dict[K, int]:
    """``local`` scaled to ``total``, the tokens local counting could not see given to ``carriers``.

    ``carriers`` maps a key to the number of unseen (non-text) parts it carries; an empty or
    missing mapping means nothing was unseen, and the result is `apportion`'s. See the module
    docstring for the rule.
    """
    if total < 0:
        raise ValueError("total must be >= 0")
    weights = {k: n for k, n in (carriers or {}).items() if n > 0}
    known = {k: w for k, w in local.items() if w > 0}
    surplus = total - sum(known.values())
    if not weights or surplus <= 0:
        return apportion(local, total, remainder_key)
    out = dict(known)
    for key, extra in apportion(weights, surplus, remainder_key).items():
        out[key] = out.get(key, 0) + extra
    return out


def reconcile_with_prefix(
    local: Mapping[K, int],
    total: int,
    carriers: Mapping[K, int] | None,
    remainder_key: K,
    prefix: Mapping[K, int],
    prefix_total: int,
) -> dict[K, int]:
    """``local`` scaled to ``total`` in two groups: ``prefix`` (the local parts of the prompt up to a
    cache breakpoint, a part of ``local``) to ``prefix_total``, the rest to ``total - prefix_total``.

    A ``prefix_total`` outside ``1..total`` is no second number to go by (nothing was cached: the
    prefix was under the provider's minimum): plain `reconcile`. Each group follows `reconcile`'s
    rule; ``carriers`` apply to the group that holds their key. The result sums exactly to ``total``.
    """
    if total < 0:
        raise ValueError("total must be >= 0")
    if not 0 < prefix_total <= total or not any(w > 0 for w in prefix.values()):
        return reconcile(local, total, carriers, remainder_key)
    head = {k: min(max(w, 0), max(local.get(k, 0), 0)) for k, w in prefix.items()}
    tail = {k: w - head.get(k, 0) for k, w in local.items() if w - head.get(k, 0) > 0}
    out = reconcile(head, prefix_total, {k: n for k, n in (carriers or {}).items() if head.get(k)}, remainder_key)
    rest = reconcile(tail, total - prefix_total, {k: n for k, n in (carriers or {}).items() if tail.get(k)}, remainder_key)
    for key, tokens in rest.items():
        out[key] = out.get(key, 0) + tokens
    return out


def field_reader(obj: Any) -> Callable[..., Any]:
    """``get(key, default=None)`` for a usage block: a mapping, a pydantic model or any object.

    A pydantic model's fields and extras are read from its dicts: its ``__getattr__`` for a field it
    lacks (OpenAI's usage has no ``cache_creation_input_tokens``) raises and catches, several times
    slower than the lookup, on every call. A property is still read as an attribute.
    """
    if isinstance(obj, Mapping):
        return obj.get
    fields = getattr(obj, "__dict__", None)
    if isinstance(fields, dict) and hasattr(type(obj), "model_fields"):
        extra = getattr(obj, "__pydantic_extra__", None) or {}
        kind = type(obj)

        def get(key: str, default: Any = None) -> Any:
            if key in fields:
                return fields[key]
            if key in extra:
                return extra[key]
            return getattr(obj, key, default) if hasattr(kind, key) else default

        return get
    return lambda key, default=None: getattr(obj, key, default)


def usage_cache_prefix_tokens(usage: Any) -> Optional[int]:
    """Cache read + cache write tokens of an explicit-breakpoint cache (Anthropic), or None.

    Only a usage that reports cache *writes* (``cache_creation_input_tokens``) has breakpoint
    semantics: OpenAI's automatic prefix caching reports reads only, in 128-token steps, and
    says nothing exact about a prefix the caller marked.
    """
    if usage is None:
        return None
    get = field_reader(usage)
    written = get("cache_creation_input_tokens")
    read = get("cache_read_input_tokens")
    details = get("prompt_tokens_details")
    if not isinstance(written, int) and details is not None:
        detail = field_reader(details)
        written = detail("cache_creation_tokens")
        written = written if isinstance(written, int) else detail("cache_write_tokens")
        if not isinstance(read, int):
            read = detail("cached_tokens")
    if isinstance(written, bool) or not isinstance(written, int) or written < 0:
        return None
    read = read if isinstance(read, int) and not isinstance(read, bool) and read > 0 else 0
    return written + read


def usage_input_tokens(usage: Any) -> Optional[int]:
    """Input tokens of a LiteLLM (OpenAI-shaped) usage object, cache reads and writes included.

    OpenAI and Gemini report cached tokens inside prompt_tokens. LiteLLM maps
    Anthropic's input_tokens + cache_creation_input_tokens + cache_read_input_tokens
    into prompt_tokens as well; where only the raw Anthropic fields are present
    (a raw usage dict), they are added here.
    """
    if usage is None:
        return None
    get = field_reader(usage)
    prompt = get("prompt_tokens")
    if isinstance(prompt, int) and prompt >= 0:
        return prompt
    raw = get("input_tokens")
    if isinstance(raw, int) and raw >= 0:
        extra = [get("cache_creation_input_tokens"), get("cache_read_input_tokens")]
        return raw + sum(x for x in extra if isinstance(x, int) and x > 0)
    return None
