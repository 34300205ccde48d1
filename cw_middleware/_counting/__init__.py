"""Counting: a request -> its input tokens per (category, source), before the provider answers.

    tags.py              how a caller says what a segment or a tool is (cw.segment / message / tool), stripped later
    estimator.py         the local estimate of one request, incrementally (what is new since the last call)
    message_count.py     one message's tokens per (category, source); tool_count.py a tool set's, counted once
    tool_rows.py         per-tool rows: definition tokens, result tokens, invocations
    response_format.py   what ``response_format=`` costs, as LiteLLM sends it
    cache_share.py       which categories the provider's prompt cache served (the cached prefix, in request order)
    request_copies.py    value copies of what was counted, so an edit in place is recounted
    rules/               one counting model a provider family (`rules.protocol.CountingRules`): openai, anthropic, gemini
    model_facts.py       the provider, the model's name, its window and prices (`ModelFacts`), and `RequestMeta`
    cost.py              a request's input cost per category, from LiteLLM's own prices
    provider_count.py    the provider's own token count, in the background, once per request fingerprint
    count_bodies.py      the count endpoints' request bodies, one function a provider family

Nothing here emits telemetry: `_snapshots` turns these numbers into snapshots.
"""
