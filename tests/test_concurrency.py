"""500 async calls over 50 stages, with threads calling beside them: no stage sees another's numbers.

Each stage sends a request of its own size, so a snapshot that landed in the wrong stage
shows as a wrong token count. Everything is read back from the embedded OTLP JSON file
(the span events, by the contract's attribute names) and through `cw.reader`.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter, defaultdict

from embedded_helpers import embedded_runtime

import cw_middleware as cw

RUN = "run-concurrency"
ASYNC_STAGES, CALLS_PER_STAGE = 50, 10
THREADS, THREAD_CALLS = 4, 25


def _messages(stage: str, size: int) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": f"{stage}: " + "word " * size},
    ]


def _stage_sizes() -> dict[str, int]:
    sizes = {f"async-{i}": 3 * i + 1 for i in range(ASYNC_STAGES)}
    sizes.update({f"thread-{k}": 500 + 7 * k for k in range(THREADS)})
    return sizes


def _events(path) -> list[dict]:
    events = []
    for line in path.read_text().splitlines():
        doc = json.loads(line)
        for rs in doc.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    for event in span.get("events", []):
                        if event["name"] == "agent.context_window.snapshot":
                            attrs = {a["key"]: next(iter(a["value"].values())) for a in event["attributes"]}
                            events.append(attrs)
    return events


def test_concurrent_stages_keep_their_own_snapshots(tmp_path):
    path = tmp_path / "telemetry.jsonl"
    sizes = _stage_sizes()
    with embedded_runtime(export=f"file:{path}", snapshot_history=5000, export_interval_ms=50) as rt:
        expected = {}
        with cw.stage("run-oracle", "oracle"):
            for stage, size in sizes.items():
                expected[stage] = cw.estimate(model="gpt-4o", messages=_messages(stage, size)).input_tokens
        assert len(set(expected.values())) == len(expected)  # every stage's request has a size of its own

        async def one_stage(stage: str) -> list[str]:
            with cw.stage(RUN, stage):  # the stage's tasks inherit it; 500 calls in flight at once

                async def call(n: int) -> str:
                    reply = await cw.acompletion(
                        model="gpt-4o", messages=_messages(stage, sizes[stage]), mock_response=f"{stage}/{n}"
                    )
                    return reply.choices[0].message.content

                return await asyncio.gather(*(call(n) for n in range(CALLS_PER_STAGE)))

        def thread_stage(stage: str, replies: list[str]) -> None:
            with cw.stage(RUN, stage):
                for n in range(THREAD_CALLS):
                    reply = cw.completion(model="gpt-4o", messages=_messages(stage, sizes[stage]), mock_response=f"{stage}/{n}")
                    replies.append(reply.choices[0].message.content)

        thread_replies: dict[str, list[str]] = defaultdict(list)
        threads = [
            threading.Thread(target=thread_stage, args=(f"thread-{k}", thread_replies[f"thread-{k}"])) for k in range(THREADS)
        ]
        for t in threads:
            t.start()

        async def all_stages() -> list[list[str]]:
            return await asyncio.gather(*(one_stage(f"async-{i}") for i in range(ASYNC_STAGES)))

        async_replies = asyncio.run(all_stages())
        for t in threads:
            t.join(60)
        assert rt.flush(10)

    # Every caller got its own reply back.
    assert async_replies == [[f"async-{i}/{n}" for n in range(CALLS_PER_STAGE)] for i in range(ASYNC_STAGES)]
    assert thread_replies == {f"thread-{k}": [f"thread-{k}/{n}" for n in range(THREAD_CALLS)] for k in range(THREADS)}

    # In memory: each stage's snapshots carry its own request's count.
    ours = [s for s in rt.snapshots() if s.run_id == RUN]
    wrong = [(s.stage_id, s.input_tokens) for s in ours if s.input_tokens != expected[s.stage_id or ""]]
    assert wrong == []

    # In the file: two snapshots a call (local estimate, then the mocked call's end), all in their stage.
    events = [e for e in _events(path) if e.get("agent.run.id") == RUN]
    per_stage = Counter(e["agent.stage.id"] for e in events)
    calls = {
        **{f"async-{i}": CALLS_PER_STAGE for i in range(ASYNC_STAGES)},
        **{f"thread-{k}": THREAD_CALLS for k in range(THREADS)},
    }
    assert per_stage == {stage: 2 * n for stage, n in calls.items()}
    assert sum(per_stage.values()) == 2 * (ASYNC_STAGES * CALLS_PER_STAGE + THREADS * THREAD_CALLS)
    misplaced = [e for e in events if int(e["agent.context_window.input_tokens"]) != expected[e["agent.stage.id"]]]
    assert misplaced == []
    seqs = [int(e["agent.context_window.event_seq"]) for e in events]
    assert len(seqs) == len(set(seqs))  # no snapshot written twice

    # Read back through the library: the latest snapshot of each stage is its own.
    reader = cw.reader(f"file:{path}")
    answers = {stage: reader.context_window(RUN, stage).input_tokens for stage in calls}
    assert answers == {stage: expected[stage] for stage in calls}
