"""Kernel: what the wings on both sides share, and what owns the process (imports no wing).

The contract, and how it travels:

    contract.py   the JSON contract's models and enums: snapshots, a stage's answer, categories, warnings
    names.py      the telemetry names: span, event, attribute and metric keys, as OpenTelemetry and Prometheus spell them
    codec.py      a snapshot <-> its span event's attributes (writers and readers share it, and nothing of each other)
    derived.py    a stage's totals and forecast from its calls: one function each, on the writer's side and every reader's
    formats.py    how numbers are written for people: tokens, shares, dollars, each category's name and colour
    notebook.py   a snapshot or a stage's answer in Jupyter (HTML) and IPython's terminal (text)

What every wing runs on:

    config.py     the settings, resolved once: the only module that reads the environment
    values.py     how a setting's value is read: one parser a kind of value, the values a setting may take
    errors.py     the exception tree
    process.py    the one owner of process state: one part per kind, renewed in a forked child by its one at-fork hook
    worker.py     the one background-work machine
    log.py        cw's own log: each kind of failure once per interval, never content
    offline.py    LiteLLM and tiktoken's encodings loaded without the network or a change to the host's environment
"""
