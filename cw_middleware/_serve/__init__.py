"""Serve: ``cw-middleware serve``, the HTTP API, its event stream and the live page over any reader.

    server.py   the HTTP core: threads, limits, auth, errors, under the routes below (`make_server`)

Routes (each a list ``ROUTES`` the core matches requests against):

    api.py      the JSON read-back API (runs, stages, a stage's context window)
    events.py   Server-Sent Events: a run's new snapshots and stage changes
    page.py     the live page (static files shipped in ``static/``)

What they stand on, top down:

    access.py       who may ask: the bearer token, else only this server's own Host names (DNS rebinding)
    openapi.py      the OpenAPI document of every route
    route.py        what a route is and may use: `Route`, the `Exchange` it answers on, the `Context`
    watch.py        the run watchers: each polls one run through the gate and keeps its events
    gate.py         the cap on concurrent backend queries, their time box, their errors as HTTP answers
    http_errors.py  `HttpError` (our JSON error) and the one mapping from what a read raised to it
    limits.py       `Limits`: what one client, and all of them together, can hold of the server

A module imports only the ones below it, never a route nor the server: there is no import circle.
The server reads through `_readback`; nothing here imports the write side.
"""
