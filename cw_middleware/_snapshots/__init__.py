"""Snapshots: building, keeping and emitting the content-free answer to "what fills this window".

    build.py       a snapshot from a breakdown by (category, source), rescaled to an authoritative total
    reconcile.py   largest-remainder apportionment: parts that sum exactly to the provider's number
    rows.py        snapshots as compact rows for the process history (`cw.snapshots()`, the ledger)
    ledger.py      a stage's running totals over its calls in this process
    telemetry.py   one span a call, snapshots as its events, and the metrics (the OpenTelemetry API only)
    observed.py    the gauges' and counters' values, kept here and read by the metrics SDK when it collects

The names these write are `_kernel/names.py`'s; which SDK receives them is the application's choice or `_embedded`'s.
"""
