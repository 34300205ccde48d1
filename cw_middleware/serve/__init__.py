"""The routes of ``cw-middleware serve``, one module each; `cw_middleware.server` is the HTTP core under them.

    core.py     what routes and the core share: `Limits`, `HttpError`, `Route`, the `Exchange` a route answers on
    gate.py     the cap on concurrent backend queries and their time box
    api.py      the JSON read-back API (runs, stages, a stage's context window)
    openapi.py  the OpenAPI document of every route
    events.py   Server-Sent Events: a run's new snapshots and stage changes, by polling any reader
    page.py     the live page (static files shipped in ``static/``)

A route module imports only `core` (and `gate`), never the server, so there is no import circle.
"""
