"""What a request's input costs, per category, from LiteLLM's own prices (``litellm.model_cost``).

Never a price table of ours: `prices_from` reads the model's entry as `litellm.get_model_info`
gives it (model_facts.py looks it up once per model): the price of an input token, of a token
read from the provider's prompt cache and of one written to it, in USD, with the tier above
200k input tokens where the map has one (Gemini). A model the map has no input price for costs
``None``, and the snapshot says why (warning ``price_unknown``).

A category's cost is its uncached tokens at the input price, its cache reads at the cache-read
price and its cache writes at the cache-write price (each falling back to the input price where
the map has none: OpenAI bills writes as input). Which tokens were cached is cache_share.py's
question; a local estimate (no response yet) counts everything as uncached input.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from .._kernel.contract import Category

CURRENCY = "USD"  # LiteLLM's prices are in US dollars; amounts are rounded to 1e-10 (float noise off)
TIER_TOKENS = 200_000  # LiteLLM's ``*_above_200k_tokens`` keys


@dataclass(frozen=True)
class Prices:
    """USD per input token of one model, from LiteLLM's model map."""

    input: float
    cache_read: Optional[float] = None
    cache_write: Optional[float] = None
    input_above_tier: Optional[float] = None
    cache_read_above_tier: Optional[float] = None

    def for_input(self, input_tokens: int) -> tuple[float, float, float]:
        """(input, cache read, cache write) prices for a request of ``input_tokens``."""
        above = input_tokens > TIER_TOKENS
        base = self.input_above_tier if above and self.input_above_tier is not None else self.input
        read = self.cache_read_above_tier if above and self.cache_read_above_tier is not None else self.cache_read
        return base, base if read is None else read, base if self.cache_write is None else self.cache_write


def prices_from(info: Mapping[str, Any]) -> Optional[Prices]:
    """The input prices of a `litellm.get_model_info` entry; None without an input price."""

    def price(key: str) -> Optional[float]:
        value = info.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            return None
        return float(value)

    base = price("input_cost_per_token")
    if base is None:
        return None
    return Prices(
        base,
        price("cache_read_input_token_cost"),
        price("cache_creation_input_token_cost"),
        price("input_cost_per_token_above_200k_tokens"),
        price("cache_read_input_token_cost_above_200k_tokens"),
    )


def request_cost(
    tokens: Mapping[Category, int],
    prices: Prices,
    cache_read: Optional[Mapping[Category, int]] = None,
    cache_write: Optional[Mapping[Category, int]] = None,
) -> tuple[float, dict[Category, float]]:
    """The input cost of one request, (in all, per category): ``tokens`` of which ``cache_read`` / ``cache_write``
    were cached. The caller wraps it in a `Cost` (_snapshots/build.py, on the call path, without a validation pass)."""
    base, read_price, write_price = prices.for_input(sum(tokens.values()))
    if not cache_read and not cache_write:
        by_category = {category: round(n * base, 10) for category, n in tokens.items()}
    else:
        by_category = {}
        for category, n in tokens.items():
            read = (cache_read or _NONE).get(category, 0)
            written = (cache_write or _NONE).get(category, 0)
            plain = max(0, n - read - written)
            by_category[category] = round(plain * base + read * read_price + written * write_price, 10)
    return round(sum(by_category.values()), 10), by_category


_NONE: Mapping[Category, int] = {}
