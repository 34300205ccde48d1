"""The index's fast read of a line (`otlp_json.index_spans`) against the full decode (`decode_line`).

The index builds from a narrow decode that skips every attribute value but the few it needs.
A line it reads differently from the full decode is a stage lost (or invented) until the index is
rebuilt, so this is a differential test: generated lines in every shape writers use (our SDK
exporter, the Collector's key order, snake_case, wrappers, escaped and non-ASCII strings, damaged
values, metrics and logs lines) must give the same span names, times and index attributes both
ways; and a whole file indexed through the block reader must hold exactly the lines and stages
the full decode of each line names.

Cost: ``CW_FUZZ_EXAMPLES`` examples (default 120) for the line test, ~5 s in all.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cw_middleware._readback import file_index, file_lines
from cw_middleware._readback.fold import INDEX_KEYS, RunsFold, stage_pairs
from cw_middleware._readback.otlp_json import decode_line, index_spans

EXAMPLES = int(os.environ.get("CW_FUZZ_EXAMPLES", "120"))
RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "recorded"
BROKEN = (ValueError, TypeError, KeyError, AttributeError, RecursionError)


def full(line: bytes) -> Any:
    """What the index read from a line before the fast path: the full decode, None for a broken line."""
    try:
        return _view(decode_line(line, INDEX_KEYS))
    except BROKEN:
        return None


def fast(line: bytes) -> Any:
    try:
        return _view(index_spans(line, INDEX_KEYS))
    except BROKEN:
        return None


def _view(spans: list) -> list:
    return [(s.name, s.start_ns, s.end_ns, s.attributes, [(e.name, e.time_ns, e.attributes) for e in s.events]) for s in spans]


# ---------------------------------------------------------------- generated lines

ids = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12) | st.sampled_from(
    ["run-1", "rün-3-ü", "stage-3@1", 'quo"te', "back\\slash", "\u2028", "日本"]
)
any_values = st.one_of(
    ids.map(lambda v: {"stringValue": v}),
    ids.map(lambda v: {"string_value": v}),
    st.booleans().map(lambda v: {"boolValue": v}),
    st.integers(-(2**70), 2**70).map(lambda v: {"intValue": str(v)}),
    st.integers(-5, 5).map(lambda v: {"intValue": v}),
    st.floats(allow_nan=False).map(lambda v: {"doubleValue": v}),
    st.just({"arrayValue": {"values": [{"stringValue": "a"}, {"intValue": "2"}]}}),
    st.just({"arrayValue": {}}),
    st.just({"kvlistValue": {"values": [{"key": "agent.run.id", "value": {"stringValue": "nested"}}]}}),
    st.just({"stringValue": "x", "boolValue": True}),
    st.just({}),
    st.none(),
    # Damaged: the wrong type for the field, as a foreign or broken producer may write.
    st.sampled_from([{"stringValue": 5}, {"boolValue": "yes"}, {"intValue": 1.5}, {"doubleValue": "abc"}]),
    st.sampled_from([{"arrayValue": 5}, {"kvlistValue": []}, {"intValue": [1]}, {"stringValue": None}]),
)
keys = st.sampled_from(sorted(INDEX_KEYS)) | st.sampled_from(["gen_ai.request.model", "agent.context_window.input_tokens", "k"])
attribute_lists = st.lists(st.fixed_dictionaries({"key": keys, "value": any_values}), max_size=8)
names = st.sampled_from(
    ["agent.stage.start", "agent.stage agent", "chat gpt-4o", "agent.context_window.late_snapshot", "other", "ü"]
)
times = st.integers(0, 2**63 - 1).map(str) | st.integers(0, 2**40) | st.just(None) | st.just("garbage")
events = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["agent.context_window.snapshot", "exception"]),
        "timeUnixNano": times,
        "attributes": attribute_lists,
    }
)
spans = st.fixed_dictionaries(
    {
        "traceId": st.sampled_from(["b181d3e495396a7b1953a675c7c146bd", base64.b64encode(b"x" * 16).decode(), 7]),
        "spanId": st.just("6f9af74775c0b9bf"),
        "name": names,
        "startTimeUnixNano": times,
        "endTimeUnixNano": times,
        "attributes": attribute_lists,
        "events": st.lists(events, max_size=3),
        "status": st.just({}),
    }
)


@st.composite
def lines(draw) -> bytes:
    resource = {"attributes": [{"key": "service.instance.id", "value": draw(any_values)}]}
    group = {"resource": resource, "scopeSpans": [{"scope": {"name": "cw"}, "spans": draw(st.lists(spans, max_size=4))}]}
    doc: Any = {"resourceSpans": [group]}
    if draw(st.booleans()):
        doc = _snake(doc)  # the protobuf JSON mapping's original field names
    shape = draw(st.sampled_from(["plain", "batches", "jaeger", "plain"]))
    if shape == "batches":
        doc = {"batches": doc.pop("resourceSpans", None) or doc.pop("resource_spans")}
    elif shape == "jaeger":
        doc = {"result": doc}
    order = draw(st.sampled_from(["as built", "reversed", "sorted"]))  # the Collector writes its own key order
    doc = _reorder(doc, order)
    text = json.dumps(doc, ensure_ascii=draw(st.booleans()), separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])))
    if draw(st.booleans()):  # escapes a writer may use for plain characters
        text = text.replace('"agent.run.id"', '"agent\\u002erun.id"').replace("stage.id", "stage\\u002eid").replace("/", "\\/")
    damage = draw(st.sampled_from(["none", "none", "none", "truncated", "attributes as a map", "not JSON", "not UTF-8"]))
    if damage == "truncated":
        text = text[: draw(st.integers(0, len(text)))]
    elif damage == "attributes as a map":
        text = text.replace('"attributes": [', '"attributes": {"x": 1}, "ignored": [', 1)
    elif damage == "not JSON":
        text = text.replace("{", "[", 1)
    data = text.encode("utf-8", "surrogatepass")
    if damage == "not UTF-8":  # a byte no UTF-8 text holds, inside some string (an id, a name or a skipped value)
        quotes = [i for i, c in enumerate(data) if c == 34]
        at = quotes[draw(st.integers(0, len(quotes) - 1))] + 1 if quotes else 0
        data = data[:at] + b"\xff" + data[at:]
    return data


def _snake(doc: Any) -> Any:
    names = {
        "resourceSpans": "resource_spans",
        "scopeSpans": "scope_spans",
        "startTimeUnixNano": "start_time_unix_nano",
        "endTimeUnixNano": "end_time_unix_nano",
        "timeUnixNano": "time_unix_nano",
        "traceId": "trace_id",
        "spanId": "span_id",
    }
    if isinstance(doc, dict):
        return {names.get(k, k): _snake(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_snake(v) for v in doc]
    return doc


def _reorder(doc: Any, order: str) -> Any:
    if isinstance(doc, dict):
        items = [(k, _reorder(v, order)) for k, v in doc.items()]
        if order == "reversed":
            items.reverse()
        elif order == "sorted":
            items.sort()
        return dict(items)
    if isinstance(doc, list):
        return [_reorder(v, order) for v in doc]
    return doc


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines())
def test_the_fast_read_of_a_line_equals_the_full_decode(line):
    assert fast(line) == full(line)


# Attribute lists written compactly, as the SDK and the Collector do, with elements built to trip a
# reader that looks at bytes: keys nested in values, extra or missing members, the wanted key as a
# plain string, members in another order, junk elements.
wanted_keys = st.sampled_from(["agent.run.id", "agent.stage.id", "agent.stage.state", "x"])
tricky_elements = st.one_of(
    st.builds(lambda k, v: {"key": k, "value": v}, wanted_keys, any_values),
    st.builds(
        lambda k, v, e, w: {"key": k, "value": v, e: w}, wanted_keys, any_values, wanted_keys | st.just("value"), any_values
    ),
    st.builds(lambda k, v: {"value": v, "key": k}, wanted_keys, any_values),
    st.builds(lambda k: {"key": k}, wanted_keys),
    st.builds(lambda k, v: {"key": "x", "value": {"arrayValue": {"values": [{"key": k, "value": v}]}}}, wanted_keys, any_values),
    st.builds(lambda k, v: {"key": "x", "value": {"key": k, "value": v}}, wanted_keys, any_values),
    st.builds(lambda k, v: {"key": "x", "value": {"kvlistValue": {"values": [{"key": k, "value": v}]}}}, wanted_keys, any_values),
    st.builds(lambda k: {"key": "x", "value": {"stringValue": k}}, wanted_keys),
    st.sampled_from([5, "agent.run.id", None, [], {"key": [1]}, {"key": 5, "value": {}}, {}]),
    st.builds(lambda k, v: [{"key": k, "value": v}], wanted_keys, any_values),
)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(tricky_elements, max_size=6), st.lists(tricky_elements, max_size=3))
def test_tricky_compact_attribute_lists_read_the_same_both_ways(span_attributes, event_attributes):
    span = {
        "name": "s",
        "attributes": span_attributes,
        "events": [{"name": "agent.context_window.snapshot", "attributes": event_attributes}],
    }
    line = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}, separators=(",", ":"), ensure_ascii=False)
    assert fast(line.encode()) == full(line.encode())


def test_recorded_collector_and_sdk_lines_read_the_same_both_ways():
    lines = [
        line
        for name in sorted(os.listdir(RECORDED))
        if name.endswith(".jsonl")
        for line in (RECORDED / name).read_bytes().splitlines()
    ]
    assert len(lines) >= 3
    for line in lines:
        assert fast(line) == full(line)
    # The Collector's traces line: our snapshot event, spans with their times.
    (traces,) = (RECORDED / "otlp-json-file-exporter-0.66b1-traces.jsonl").read_bytes().splitlines()
    (span,) = fast(traces)
    assert span[0] == "chat gpt-4o" and span[1] == 1796036637855725798 and span[4][0][0] == "agent.context_window.snapshot"


def test_a_damaged_value_of_another_attribute_costs_nothing_but_itself():
    # One attribute the index does not read holds the wrong type: its stage is still indexed.
    line = json.dumps(
        {
            "resourceSpans": [
                {
                    "scopeSpans": [
                        {
                            "spans": [
                                {
                                    "name": "agent.stage agent",
                                    "startTimeUnixNano": "5",
                                    "endTimeUnixNano": "9",
                                    "attributes": [
                                        {"key": "agent.run.id", "value": {"stringValue": "rün-1"}},
                                        {"key": "agent.stage.id", "value": {"stringValue": "s@1"}},
                                        {"key": "agent.stage.state", "value": {"stringValue": "ended"}},
                                        {"key": "junk", "value": {"arrayValue": 5}},
                                    ],
                                }
                            ]
                        }
                    ]
                }
            ]
        }
    ).encode()
    (span,) = fast(line)
    assert span[3] == {"agent.run.id": "rün-1", "agent.stage.id": "s@1", "agent.stage.state": "ended"}
    assert fast(line) == full(line)


# ---------------------------------------------------------------- a whole file, through the block reader


def _file_lines(seed: int) -> list[bytes]:
    """Varied lines: generated ones, the recorded ones, metrics and logs, blank and CRLF lines."""
    rng = __import__("random").Random(seed)
    out = []
    for name in sorted(os.listdir(RECORDED)):
        if name.endswith(".jsonl"):
            out.extend((RECORDED / name).read_bytes().splitlines())
    out.append(json.dumps({"result": {"resourceSpans": [{"scopeSpans": [{"spans": [TOLERANT_SPAN]}]}]}}).encode())
    out.append(
        json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [dict(TOLERANT_SPAN, attributes=TOLERANT_MAP)]}]}]}).encode()
    )
    out.append(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [TOLERANT_SPAN]}]}]}).encode().replace(b"t-", b"t-\xff"))
    for k in range(40):
        doc = {
            "resourceSpans": [
                {
                    "scopeSpans": [
                        {
                            "spans": [
                                {
                                    "name": rng.choice(["agent.stage.start", "agent.stage agent", "chat gpt-4o"]),
                                    "startTimeUnixNano": str(1000 + i),
                                    "endTimeUnixNano": str(2000 + i),
                                    "attributes": [
                                        {
                                            "key": "agent.run.id",
                                            "value": {"stringValue": rng.choice(["run-a", "rün-b-ü", 'r"c'])},
                                        },
                                        {"key": "agent.stage.id", "value": {"stringValue": f"s@{i % 5}"}},
                                        {"key": "agent.stage.kind", "value": {"stringValue": rng.choice(["agent", "tool"])}},
                                        {"key": "agent.stage.state", "value": {"stringValue": rng.choice(["started", "ended"])}},
                                    ],
                                    "events": [
                                        {
                                            "name": "agent.context_window.snapshot",
                                            "timeUnixNano": str(1500 + i),
                                            "attributes": [{"key": "agent.stage.id", "value": {"stringValue": f"e@{i % 3}"}}],
                                        }
                                    ],
                                }
                                for i in range(rng.randint(1, 6))
                            ]
                        }
                    ]
                }
            ]
        }
        doc = _reorder(doc, rng.choice(["as built", "reversed", "sorted"]))
        text = json.dumps(doc, ensure_ascii=rng.random() < 0.5).replace("s@", f"s{k}@")
        out.append(text.encode())
        if k % 7 == 0:
            out.append(b"")
        if k % 9 == 0:
            out.append(text.encode() + b"\r")  # a CRLF line end
    rng.shuffle(out)
    return out


TOLERANT_SPAN = {
    "name": "agent.stage agent",
    "startTimeUnixNano": 7,
    "attributes": [
        {"key": "agent.run.id", "value": {"stringValue": "run-t-1"}},
        {"key": "agent.stage.id", "value": {"stringValue": "t@1"}},
    ],
}
TOLERANT_MAP = {"agent.run.id": "run-t-2", "agent.stage.id": "t@2"}  # a plain map: some tools write one


@pytest.mark.parametrize("block", [64, 1000, 1 << 20])
def test_a_file_indexed_through_the_block_reader_holds_what_the_full_decode_names(tmp_path, monkeypatch, block):
    path = tmp_path / "t.jsonl"
    content = b"\n".join(_file_lines(block)) + b"\n"
    path.write_bytes(content)
    monkeypatch.setattr(file_lines, "BLOCK_BYTES", block)  # lines straddle blocks
    monkeypatch.setattr(file_index, "CHUNK_BYTES", 3000)  # and transactions
    index = file_index.FileIndex(str(path), str(tmp_path / "index"))
    assert index.refresh()

    # What it must hold, from the full decode of each line (split here, not by the reader).
    expected_lines, expected_pairs, fold, offset = [], {}, RunsFold(), 0
    for raw in content.split(b"\n")[:-1]:
        body = raw.rstrip(b"\r\n")
        spans = decode_line(body, INDEX_KEYS) if body.lstrip().startswith(b"{") and full(body) is not None else []
        named = set()
        for span in spans:
            fold.add(span)
            named |= stage_pairs(span)
        if named:
            expected_lines.append((offset, len(body), zlib.crc32(body)))
            expected_pairs[offset] = named
        offset += len(raw) + 1
    with sqlite3.connect(next((tmp_path / "index").glob("*.sqlite"))) as db:
        got_lines = db.execute("SELECT off, len, crc FROM lines ORDER BY n").fetchall()
        got_pairs: dict[int, set] = {}
        for off, run, stage in db.execute(
            "SELECT l.off, s.run, s.stage FROM stage_lines sl JOIN lines l ON l.n = sl.line JOIN stages s ON s.id = sl.stage"
        ):
            got_pairs.setdefault(off, set()).add((run, stage))
        got_states = {
            (run, stage): (kind, state, first, last)
            for run, stage, kind, state, first, last in db.execute(
                "SELECT run, stage, kind, state, first_ns, last_ns FROM stages WHERE listed = 1"
            )
        }
    index.close()
    assert got_lines == expected_lines and got_pairs == expected_pairs
    want_states = {
        (run, stage): (st.kind, st.state.value if st.state else None, st.first_ns, st.last_ns) for run, stage, st in fold.states()
    }
    assert got_states == want_states and len(want_states) > 20
    assert any(run == "rün-b-ü" for run, _ in want_states) and any(run == 'r"c' for run, _ in want_states)
    assert {("run-t-1", "t@1"), ("run-t-2", "t@2"), ("run-t-\ufffd1", "t@1")} <= set(want_states)


def test_an_overlong_line_is_skipped_and_the_next_line_indexed(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    span = {"name": "agent.stage agent", "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in SHORT_IDS.items()]}
    good = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()
    overlong = b'{"resourceSpans":[' + b" " * 5000 + b"]}"
    path.write_bytes(overlong + b"\n" + good + b"\n" + overlong)  # and one at the end, unended
    monkeypatch.setattr(file_lines, "MAX_LINE", 1000)
    monkeypatch.setattr(file_lines, "BLOCK_BYTES", 300)
    index = file_index.FileIndex(str(path), "memory")
    assert index.refresh()
    (ref,) = index.lines_newest_first("run-a", "s@1")
    assert ref.offset == len(overlong) + 1 and index.read_line(ref) == good


SHORT_IDS = {"agent.run.id": "run-a", "agent.stage.id": "s@1"}
