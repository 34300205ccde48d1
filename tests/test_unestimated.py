"""Tokens the local count cannot see (images, audio, files) go to the message that carried them.

Scaling a local breakdown to a provider's total spreads every missing token over every
category in proportion; with an image that counts 0 locally, a 4-word system prompt was
handed hundreds of the image's tokens. The rule (reconcile.py): known parts keep their
local counts, the surplus goes to the carriers; a total below the local sum scales down.
"""

from __future__ import annotations

import random

import pytest
from providers import CHAT, provider  # noqa: F401 - the fixture

import cw_middleware as cw
from cw_middleware._counting.model_facts import RequestMeta
from cw_middleware._kernel.contract import Category, CountMethod
from cw_middleware._snapshots.build import build_snapshot
from cw_middleware._snapshots.reconcile import apportion, reconcile

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
SYSTEM = {"role": "system", "content": "You describe pictures briefly."}


def _messages():
    return [SYSTEM, {"role": "user", "content": [{"type": "text", "text": "What is in this picture?"}, IMAGE]}]


def test_the_estimate_names_the_message_that_carries_an_image(runtime):
    est = runtime.estimator.estimate("gpt-4o", _messages())
    assert est.unestimated == {(Category.CONVERSATION, "user"): 1}
    tagged = [
        SYSTEM,
        {"role": "user", "content": [cw.segment("A screenshot of the failing page:", "memory", source="notes"), IMAGE]},
    ]
    # A part without its own tag belongs to its message, even when a sibling part is tagged.
    est = runtime.estimator.estimate("gpt-4o", tagged)
    assert est.unestimated == {(Category.CONVERSATION, "user"): 1}
    tagged_image = {**IMAGE, "cw_tag": {"category": "memory", "source": "screenshot"}}
    est = runtime.estimator.estimate("gpt-4o", [SYSTEM, {"role": "user", "content": ["Look:", tagged_image]}])
    assert est.unestimated == {(Category.MEMORY, "screenshot"): 1}


def test_the_carriers_survive_the_prefix_cache(runtime):
    messages = _messages()
    runtime.estimator.estimate("gpt-4o", messages)
    grown = [*messages, {"role": "assistant", "content": "A cat."}, {"role": "user", "content": "And its colour?"}]
    est = runtime.estimator.estimate("gpt-4o", grown)
    assert est.unestimated == {(Category.CONVERSATION, "user"): 1}


def test_a_provider_total_gives_the_image_tokens_to_the_message_that_carried_it(runtime, provider):  # noqa: F811
    provider[CHAT].tokens = 1234
    local = runtime.estimator.estimate("gpt-4o", _messages()).by_source
    cw.completion(model="openai/gpt-4o", messages=_messages(), api_base=f"{provider.url}/v1", api_key="sk-test")
    snap = cw.snapshots()[-1]
    assert snap.count_method is CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN and snap.input_tokens == 1234
    # The system prompt keeps exactly what it counted locally; the image's tokens stay with the user turn.
    assert snap.tokens("system_prompt") == local[(Category.SYSTEM_PROMPT, "system")]
    assert snap.tokens("other") == local[(Category.OTHER, "framing")]
    assert snap.tokens("conversation") == 1234 - sum(v for k, v in local.items() if k[0] is not Category.CONVERSATION)


def test_unseen_content_with_no_known_carrier_goes_to_other():
    meta = RequestMeta(None, None, "openai", "gpt-4o", 128_000)
    by_source = {(Category.SYSTEM_PROMPT, "system"): 10, (Category.CONVERSATION, "user"): 20}
    snap = build_snapshot(
        by_source, meta, CountMethod.PROVIDER_API_SCALED_BREAKDOWN, {cw.WarningCode.NON_TEXT_CONTENT_NOT_ESTIMATED}, total=500
    )
    assert snap.tokens("system_prompt") == 10 and snap.tokens("conversation") == 20 and snap.tokens("other") == 470


def test_reconcile_properties_for_random_breakdowns():
    rng = random.Random(7)
    keys = [f"k{i}" for i in range(8)]
    for _ in range(2000):
        local = {k: rng.choice([0, 0, 1, 3, 50, 999, 12_000]) for k in rng.sample(keys, rng.randint(0, 8))}
        carriers = {k: rng.randint(0, 3) for k in rng.sample(keys, rng.randint(0, 3))}
        local_sum = sum(local.values())
        total = rng.choice([0, 1, local_sum // 2, local_sum, local_sum + rng.randint(1, 50_000)])
        out = reconcile(local, total, carriers, remainder_key="rest")
        assert sum(out.values()) == total
        assert all(v >= 0 for v in out.values())
        has_carrier = any(n > 0 for n in carriers.values())
        if has_carrier and total >= local_sum:
            for k, v in local.items():  # known text keeps its local count
                assert out.get(k, 0) >= v
            non_carriers = {k: v for k, v in local.items() if carriers.get(k, 0) <= 0}
            for k, v in non_carriers.items():
                assert out.get(k, 0) == v
            assert "rest" not in out or local.get("rest")
        else:
            assert out == apportion(local, total, "rest")


def test_reconcile_refuses_a_negative_total():
    with pytest.raises(ValueError):
        reconcile({"a": 1}, -1, {"a": 1}, "rest")
