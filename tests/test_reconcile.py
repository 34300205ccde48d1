"""Largest-remainder apportionment: exact sums, no negatives, proportional."""

import random

import pytest

from cw_middleware._snapshots.reconcile import apportion, usage_input_tokens


def test_parts_sum_exactly_to_the_total_for_random_inputs():
    rng = random.Random(3)
    for _ in range(500):
        weights = {k: rng.randint(0, 5000) for k in "abcdefg"}
        total = rng.randint(0, 200_000)
        out = apportion(weights, total, remainder_key="z")
        assert sum(out.values()) == total
        assert all(v >= 0 for v in out.values())
        weight_sum = sum(weights.values())
        if weight_sum:
            for k, w in weights.items():
                # Hamilton's method: each part is its exact quota rounded down or up.
                quota = w * total / weight_sum
                assert int(quota) <= out.get(k, 0) <= int(quota) + 1


def test_largest_remainders_win_the_leftover_units():
    # quotas 3.33.., 3.33.., 3.33.. for 10 -> one part gets the extra unit, deterministically the first
    assert apportion({"a": 1, "b": 1, "c": 1}, 10, "z") == {"a": 4, "b": 3, "c": 3}
    # quotas 0.6 and 9.4 -> a rounds up (remainder .6 > .4)
    assert apportion({"a": 6, "b": 94}, 10, "z") == {"a": 1, "b": 9}


def test_no_weights_puts_everything_in_the_remainder_bucket():
    assert apportion({}, 42, "other") == {"other": 42}
    assert apportion({"a": 0}, 0, "other") == {}


def test_negative_total_is_refused():
    with pytest.raises(ValueError):
        apportion({"a": 1}, -1, "z")


def test_usage_includes_anthropic_cache_tokens_when_raw():
    assert usage_input_tokens({"input_tokens": 10, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 5}) == 115
    assert usage_input_tokens({"prompt_tokens": 77}) == 77
    assert usage_input_tokens(None) is None
    assert usage_input_tokens({"completion_tokens": 3}) is None
