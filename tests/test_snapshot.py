"""Snapshot building: exact sums after scaling, bounded details, a valid contract model."""

from cw_middleware._counting.model_facts import RequestMeta
from cw_middleware._kernel.contract import Category, CountMethod, Snapshot, WarningCode
from cw_middleware._snapshots.build import SnapshotParts, build_snapshot

META = RequestMeta("run", "stage", "openai", "gpt-4o", 1000)
PARTS = SnapshotParts()


def test_built_snapshot_survives_validation_round_trip():
    by_source = {(Category.SYSTEM_PROMPT, "system"): 10, (Category.TOOLS, "native"): 5}
    snap = build_snapshot(by_source, META, CountMethod.LOCAL_ESTIMATE, {WarningCode.APPROXIMATE_TOKENIZER}, parts=PARTS)
    again = Snapshot.model_validate_json(snap.model_dump_json())
    assert again == snap
    assert again.model_fields_set == snap.model_fields_set == set(Snapshot.model_fields)


def test_scaling_to_a_total_keeps_exact_sums_and_proportions():
    by_source = {(Category.SYSTEM_PROMPT, "system"): 300, (Category.CONVERSATION, "user"): 100}
    snap = build_snapshot(by_source, META, CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN, total=41, parts=PARTS)
    assert snap.input_tokens == 41
    assert sum(b.tokens for b in snap.breakdown) == 41
    assert snap.tokens("system_prompt") == 31 and snap.tokens("conversation") == 10  # 30.75 -> 31, 10.25 -> 10
    assert snap.usage_percent == 4.1


def test_details_are_bounded_and_flagged():
    by_source = {(Category.MEMORY, f"file{i}.md"): i + 1 for i in range(30)}
    snap = build_snapshot(by_source, META, CountMethod.LOCAL_ESTIMATE, max_details=5, parts=PARTS)
    assert [d.tokens for d in snap.details] == [30, 29, 28, 27, 26]
    assert WarningCode.DETAILS_TRUNCATED.value in snap.warning_codes()
    assert snap.tokens("memory") == sum(range(1, 31))  # the breakdown still counts every source


def test_event_seq_increases():
    a = build_snapshot({}, META, CountMethod.LOCAL_ESTIMATE, parts=PARTS)
    b = build_snapshot({}, META, CountMethod.LOCAL_ESTIMATE, parts=PARTS)
    assert b.event_seq > a.event_seq


def test_scaled_parts_survive_validation_round_trip():
    by_source = {(Category.SKILLS, f"skill:{i}"): 7 * i + 1 for i in range(5)}
    snap = build_snapshot(by_source, META, CountMethod.PROVIDER_API_SCALED_BREAKDOWN, total=977, parts=PARTS)
    again = Snapshot.model_validate(snap.model_dump())
    assert again == snap
    for ours, theirs in zip(snap.breakdown + snap.details, again.breakdown + again.details):
        assert ours.model_fields_set == theirs.model_fields_set


def test_the_history_holds_snapshots_as_rows_the_collector_untracks(runtime):
    import gc

    import cw_middleware as cw
    from cw_middleware._snapshots.rows import compact, expand

    tools = [cw.tool({"type": "function", "function": {"name": "s"}}, source=cw.ToolSource.mcp("github"))]
    messages = [
        cw.message("system", [cw.segment("Be careful.", "system_prompt"), cw.segment("notes", "memory", source="AGENTS.md")]),
        {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}]},
    ]
    cw.completion(model="gpt-4o", messages=messages, tools=tools, mock_response="ok", cw_context_window=50)
    published = cw.snapshots()
    assert published and all(s.warnings and s.details for s in published)
    for snap in published:
        again = expand(compact(snap), runtime.parts)
        assert again == snap and again.model_dump() == snap.model_dump()
        assert compact(snap, runtime.parts) == compact(snap)  # rows flattened once and kept: the same row
    gc.collect()
    assert not any(gc.is_tracked(row) for row in runtime._history)


def test_rows_seen_again_are_not_flattened_again(runtime, monkeypatch):
    """A call's snapshots share their tool and detail rows (issue 22 gap 3): the history and the event attributes
    flatten each list once between them."""
    import cw_middleware as cw
    from cw_middleware._kernel import codec
    from cw_middleware._snapshots import rows as snapshot_module

    flattened = []
    real = codec.flat_tools
    counting = lambda rows: flattened.append(len(rows)) or real(rows)  # noqa: E731
    monkeypatch.setattr(snapshot_module, "flat_tools", counting)
    monkeypatch.setattr(codec, "flat_tools", counting)
    tools = [{"type": "function", "function": {"name": f"t{i}", "description": "x " * i}} for i in range(3)]
    for _ in range(3):
        cw.completion(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], tools=tools, mock_response="ok")
    assert len(cw.snapshots()) == 6 and flattened == [3]
    snap = cw.snapshots()[-1]
    other = snap.model_copy(update={"tools": list(reversed(snap.tools))})
    assert snapshot_module.compact(other, runtime.parts) == snapshot_module.compact(other)  # other rows: flattened anew
    assert flattened[-1] == 3 and len(flattened) == 3  # twice for `other`: with the parts, then without
