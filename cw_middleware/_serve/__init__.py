"""Serve: ``cw-middleware serve``, the HTTP API, its event stream and the live page over any reader.

Two cores, one way to answer:

    server.py   ``cw-middleware serve``'s HTTP core: threads, limits, sockets (`make_server`)
    asgi.py     ``cw.asgi_app()``: the same routes as an ASGI application to mount in the user's app
    dispatch.py what both call per request: match a route, check access, run it, answer errors as JSON

Routes (each a list ``ROUTES`` the core matches requests against):

    api.py      the JSON read-back API (runs, stages, a stage's context window)
    events.py   Server-Sent Events: a run's new snapshots and stage changes
    page.py     the live page and the embeddable ``<cw-context-window>`` element (files shipped in ``static/``)

What they stand on, top down:

    access.py       who may ask: the bearer token, else only this server's own Host names (DNS rebinding);
                    which other origins' pages may read the answers (CORS)
    openapi.py      the OpenAPI document of every route
    route.py        what a route is and may use: `Route`, the `Exchange` it answers on, the `Context`
    watch.py        the run watchers: each polls one run through the gate and keeps its events
    gate.py         the cap on concurrent backend queries, their time box, their errors as HTTP answers
    http_errors.py  `HttpError` (our JSON error) and the one mapping from what a read raised to it
    limits.py       `Limits`: what one client, and all of them together, can hold of the server

A module imports only the ones below it, never a route nor a core: there is no import circle.
The server reads through `_readback`; nothing here imports the write side.
"""
