"""The response format as LiteLLM sends it (_counting/response_format.py): a pydantic class counts as its wire schema."""

from __future__ import annotations

import pydantic
from providers import provider  # noqa: F401 - the fixture

import cw_middleware as cw


class _Invoice(pydantic.BaseModel):
    number: str
    total_cents: int
    lines: list[str]


def test_a_pydantic_class_as_response_format_counts_what_litellm_sends(runtime, provider):  # noqa: F811
    """LiteLLM turns a BaseModel class into a json_schema dict on the wire: the estimate counts that dict."""
    import litellm
    from providers import CHAT

    messages = [{"role": "user", "content": "Extract the invoice."}]
    litellm.completion(
        model="openai/gpt-4o", messages=messages, response_format=_Invoice, api_base=f"{provider.url}/v1", api_key="sk-test"
    )
    on_the_wire = provider.hits(CHAT)[-1].body["response_format"]
    assert on_the_wire["type"] == "json_schema"
    as_class = cw.estimate(model="gpt-4o", messages=messages, response_format=_Invoice)
    as_dict = cw.estimate(model="gpt-4o", messages=messages, response_format=on_the_wire)
    plain = cw.estimate(model="gpt-4o", messages=messages)
    assert as_class.tokens("other") == as_dict.tokens("other") > plain.tokens("other") + 20
    assert as_class.input_tokens == as_dict.input_tokens


def test_a_pydantic_class_as_response_format_counts_for_anthropic_too(runtime):
    messages = [{"role": "user", "content": "Extract the invoice."}]
    model = "anthropic/claude-sonnet-4-5"
    as_class = cw.estimate(model=model, messages=messages, response_format=_Invoice)
    plain = cw.estimate(model=model, messages=messages)
    assert as_class.tokens("other") > plain.tokens("other") + 20
