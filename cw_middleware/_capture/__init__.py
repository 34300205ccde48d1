"""Capture: where a request enters cw, and one call's lifecycle from its request to its usage.

Entry points, each a thin shell over the one lifecycle in `call`:

    wrapper.py            the LiteLLM drop-in: cw.completion / acompletion / responses / aresponses, cw.estimate
    instrument.py         cw.instrument(): LiteLLM's module functions (and the official clients') swapped for shells
    bound.py              references to those functions bound before instrument(), found and swapped too
    litellm_originals.py  the real LiteLLM functions the shells forward to, and what instrument() installed over what
    clients/              the official openai and anthropic clients: which methods are observed (patches), the shells,
                          cw.wrap(client), and where a client's requests go (routes)
    litellm_proxy.py      the LiteLLM Proxy callback (``cw_middleware.litellm_proxy.handler`` re-exports it)
    apis/                 one adapter an API: Chat Completions, Responses, Anthropic Messages (`apis.base.Api`)

A call's lifecycle and what it runs in:

    call.py               one call: estimate, snapshots in order, forward, read the usage, end (`Call`)
    live_firsts.py        calls whose first snapshot waits for their end, and the thread that sends a slow one's early
    pending_estimate.py   the call's local estimate as a value, made in the background while a tokenizer loads
    stages.py             which (run, stage) a call belongs to; propagation.py carries it into thread pools
    runtime.py            the current configuration's telemetry, workers and caches (one part of the process state)
    providers.py          which telemetry providers a new runtime gets (the application's, or the embedded pipeline)
    sigterm.py            a forked child's SIGTERM exports first; suppress.py the suppress-instrumentation switch

Capture counts through `_counting`, builds and emits through `_snapshots`, and installs `_embedded`.
"""
