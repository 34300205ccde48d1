"""A stage's running totals over its calls: what each snapshot says about the stage so far, not only its request.

The Runtime keeps one `Ledger` per recent stage (bounded: `MAX_STAGES`, the stage not called
for longest falls out and starts again from zero if it comes back). Each snapshot a call
publishes replaces that call's previous contribution (a call publishes its local estimate,
then its response usage, sometimes a provider count), so a stage's totals count every call
once, at its latest number:

* ``stage_totals``: the calls, their input tokens and cost, the peak utilisation, and per
  category the tokens, cost and cached tokens (`StageTotals`);
* each tool's invocations over the stage: the first call's, plus every later call's increase
  over the call before it (a request carries the conversation so far, so a call's own count
  includes the earlier calls'; after a compaction the count drops, and the increases that
  follow count only what is new), and how many of the stage's requests defined it and what
  its definition cost over them (the unused definitions' price);
* a compaction marker on the snapshots of a call whose request carries less conversation
  than the call before it (the agent summarised or truncated), with the conversation's
  tokens before and after: both requests' local counts, the numbers the decision read, so
  the marker is the same whichever of a call's snapshots lands first;
* the long segments its requests sent more than once (by fingerprint: `RepeatedContent`),
  their duplicate copies' tokens over the stage and in how many requests;
* its cache misses: a call whose request begins with the previous call's prefix (the two
  requests' `PrefixChain`s, compared when the call is first seen), whose response reported
  fewer than half of that prefix's tokens served from the cache, for a model LiteLLM has a
  cached price for and a prefix of at least the provider's minimum (`CacheMiss`);
* the anchor of the next call's local estimate (`Anchor`): the call seen last, its prefix, its local
  count, its model and, once its response's usage reconciled it, the provider's input tokens. A call
  whose request begins with that whole request (same model, same tools, its messages first) is
  estimated as that provider total plus the local count of what it adds (`anchored_total`), not
  from scratch: the live number no longer jumps when the response reconciles it.

Held per stage: numbers, fingerprints and the names of defined tools, never content. Everything runs under
one lock, on the call path: a few dictionary updates per snapshot.
"""

from __future__ import annotations

import operator
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from .._counting.cost import Prices
from .._counting.fingerprints import PrefixChain
from .._kernel.contract import (
    CATEGORIES,
    CacheMiss,
    Category,
    CategoryTotals,
    Compaction,
    CountMethod,
    Forecast,
    RepeatedContent,
    Snapshot,
    StageTotals,
    ToolItem,
    UnusedTool,
    never_called,
)
from .._kernel.derived import FORECAST_CALLS, forecast_from
from .build import MAX_REPEATED, SnapshotParts, cache_miss_item, repeated_item, trusted, unused_tool, with_stage

MAX_STAGES = 1024  # stages whose totals are kept (the least recently called one falls out)
MAX_OPEN_CALLS = 64  # calls per stage whose contribution may still change (a late count)
MAX_SEGMENTS = 256  # repeated segments a stage keeps numbers for (past it, the smallest fall out)
CACHE_SERVED_SHARE = 0.5  # a prefix with at least this share served from the cache is not a miss
_RECONCILED = CountMethod.RESPONSE_USAGE_SCALED_BREAKDOWN  # an anchor's provider total: its response's usage


@dataclass(frozen=True, slots=True)
class PrefixFacts:
    """What a call's cache miss is read from besides its snapshot: its request's prefix and the model's cache."""

    chain: PrefixChain
    local_total: int  # the request's local count (its prefix is scaled as the snapshot's total is)
    min_tokens: int  # the provider's minimum cacheable prefix
    prices: Optional[Prices]
    model: str = ""  # the provider and model the request went to: an anchor holds for the same one only


@dataclass
class Anchor:
    """The stage's call seen last, as the next call's local estimate may be anchored on it (see the module docstring)."""

    call_seq: int
    chain: PrefixChain
    local_total: int
    model: str
    provider_total: Optional[int] = None  # its response's input tokens, once its usage reconciled it


def anchored_total(anchor: Optional[Anchor], call_seq: int, facts: PrefixFacts) -> Optional[int]:
    """This request's total anchored on ``anchor``: its provider total plus the local tokens this request adds.

    None (the plain local estimate stands) unless the anchor is another call of the same model with a provider
    total, and this request begins with its whole request (the tools, then every message: an edit, a compaction,
    another tool set do not), and the result is positive.
    """
    if anchor is None or anchor.provider_total is None or anchor.call_seq == call_seq or anchor.model != facts.model:
        return None
    if not facts.chain.extends(anchor.chain):
        return None
    total = anchor.provider_total + facts.local_total - anchor.local_total
    return total if total > 0 else None


_NO_MISS = (0, 0, None)


@dataclass(frozen=True, slots=True)
class _Contribution:
    """What one call adds to its stage: the numbers of its latest snapshot."""

    input_tokens: int
    input_cost: Optional[float]
    tokens: tuple[int, ...]  # per category, in CATEGORIES order
    costs: tuple[Optional[float], ...]
    cached: tuple[int, ...]
    definitions: tuple[tuple[str, int], ...]  # (tool name, definition tokens)
    repeated: tuple[tuple[str, str, Category, int, int], ...] = ()  # (target, fingerprint, category, tokens, copies)
    shared: int = 0  # local tokens of the prefix it shares with the stage's call before it
    prefix: int = 0  # ... as the snapshot counts them
    missed: int = 0  # of those, billed at the full price where the cache could have served them
    saving: Optional[float] = None  # what they would have cost less at the cached price (USD)


def _missed(snapshot: Snapshot, shared: int, facts: Optional[PrefixFacts]) -> tuple[int, int, Optional[float]]:
    """(prefix, missed tokens, saving) of one call: a miss only where the answer is honest (see the module docstring)."""
    if not shared or facts is None:
        return _NO_MISS
    local = facts.local_total
    prefix = round(shared * snapshot.input_tokens / local) if local and snapshot.input_tokens != local else shared
    cached, prices = snapshot.cached_tokens, facts.prices
    if cached is None or prices is None or prices.cache_read is None or prefix < facts.min_tokens:
        return prefix, 0, None
    base, read, _ = prices.for_input(snapshot.input_tokens)
    if read >= base or cached >= CACHE_SERVED_SHARE * prefix:
        return prefix, 0, None
    missed = prefix - cached
    return prefix, missed, round(missed * (base - read), 10)


def _contribution(
    snapshot: Snapshot, parts: Optional[SnapshotParts] = None, shared: int = 0, facts: Optional[PrefixFacts] = None
) -> _Contribution:
    items = {b.category: b for b in snapshot.breakdown}
    cost = snapshot.cost
    prefix, missed, saving = _missed(snapshot, shared, facts) if shared else _NO_MISS
    return _Contribution(
        snapshot.input_tokens,
        cost.input_cost if cost is not None else None,
        tuple(items[c].tokens if c in items else 0 for c in CATEGORIES),
        tuple(cost.by_category.get(c) if cost is not None else None for c in CATEGORIES),
        tuple((items[c].cached_tokens or 0) if c in items else 0 for c in CATEGORIES),
        # The rows are shared from call to call (_snapshots/build.py): their pairs are made once per list of rows.
        parts.flat("definitions", snapshot.tools, _definitions) if parts is not None else _definitions(snapshot.tools),
        tuple((r.target, r.fingerprint, r.category, r.tokens, r.copies) for r in snapshot.repeated),
        shared,
        prefix,
        missed,
        saving,
    )


def _definitions(rows: list[ToolItem]) -> tuple[tuple[str, int], ...]:
    return tuple((t.name, t.definition_tokens) for t in rows if not t.folded)


def _invocations(rows: list[ToolItem]) -> tuple[tuple[str, int], ...]:
    return tuple((t.name, t.invocations) for t in rows if not t.folded)


@dataclass
class Ledger:
    """One stage's running totals (see the module docstring)."""

    calls: int = 0
    input_tokens: int = 0
    input_cost: float = 0.0
    priced_calls: int = 0
    peak_usage_percent: Optional[float] = None
    tokens: list[int] = field(default_factory=lambda: [0] * len(CATEGORIES))
    costs: list[float] = field(default_factory=lambda: [0.0] * len(CATEGORIES))
    cached: list[int] = field(default_factory=lambda: [0] * len(CATEGORIES))
    open_calls: OrderedDict[int, _Contribution] = field(default_factory=OrderedDict)
    # The peak is the largest *final* number of a call: each open call's latest usage (a provider's count or
    # usage overrules its local estimate), and the highest of the calls no longer open.
    open_percent: dict[int, float] = field(default_factory=dict)
    closed_peak: Optional[float] = None
    # Tools: invocations as the newest call counts them, what earlier calls counted beyond that, and
    # what each definition cost over the stage's requests (and in how many).
    newest_call: int = 0
    newest_calls: dict[str, int] = field(default_factory=dict)
    banked: dict[str, int] = field(default_factory=dict)
    definition_tokens: dict[str, int] = field(default_factory=dict)
    definition_requests: dict[str, int] = field(default_factory=dict)
    # Compaction: the newest call's conversation (its local count) and its marker.
    conversation_local: Optional[int] = None
    compactions: int = 0
    marker: Optional[Compaction] = None
    # What `totals` and `unused` made last, and from what: a call's next snapshot with the same numbers (a
    # mock or a response without usage republishes its local estimate) gets the same parts back.
    _made_totals: tuple[tuple[object, ...], Optional[StageTotals]] = ((), None)
    _made_unused: tuple[tuple[object, ...], list[UnusedTool]] = ((), [])
    _definitions_changed: int = 0  # bumped whenever definition_tokens or definition_requests change
    # Repeated segments over the stage: (target, fingerprint) -> [category, duplicate tokens, requests].
    segments: dict[tuple[str, str], list[Any]] = field(default_factory=dict)
    # Cache misses: the prefix of the call seen last (to compare the next one with), and the stage's sums.
    last_chain: Optional[PrefixChain] = None
    anchor: Optional[Anchor] = None  # the call the next call's local estimate may be anchored on
    missed_tokens: int = 0
    missed_calls: int = 0
    saving: float = 0.0
    priced_misses: int = 0

    def add(
        self,
        call_seq: int,
        snapshot: Snapshot,
        local_conversation: Optional[int],
        newest: bool,
        parts: Optional[SnapshotParts] = None,
        prefix: Optional[PrefixFacts] = None,
    ) -> _Contribution:
        old = self.open_calls.pop(call_seq, None)
        if old is not None:
            shared = old.shared
        else:
            last, chain = self.last_chain, prefix.chain if prefix is not None else None
            shared = chain.common_tokens(last) if chain is not None and last is not None else 0
            if chain is not None:
                self.last_chain = chain
            self.anchor = Anchor(call_seq, prefix.chain, prefix.local_total, prefix.model) if prefix is not None else None
        anchor = self.anchor
        if anchor is not None and anchor.call_seq == call_seq and snapshot.count_method == _RECONCILED:
            anchor.provider_total = snapshot.input_tokens  # the provider's number: the next call's may be anchored on it
        new = _contribution(snapshot, parts, shared, prefix)
        if old is None:
            self.calls += 1
            for name, _ in new.definitions:
                self.definition_requests[name] = self.definition_requests.get(name, 0) + 1
            for target, fp, category, _, _ in new.repeated:
                seg = self.segments.get((target, fp))
                if seg is None:
                    seg = self.segments[(target, fp)] = [category, 0, 0]
                seg[2] += 1
        if old != new:  # a call's next snapshot with the same numbers changes nothing
            # ... and one with the same definitions (the same rows) takes out what it puts back.
            same = old is not None and old.definitions is new.definitions
            self._move(old, -1, same)
            self._move(new, +1, same)
        self.open_calls[call_seq] = new
        if snapshot.usage_percent is not None:
            self.open_percent[call_seq] = snapshot.usage_percent
        while len(self.open_calls) > MAX_OPEN_CALLS:
            closed, _ = self.open_calls.popitem(last=False)  # its numbers stay in the totals; a later change is not subtracted
            percent = self.open_percent.pop(closed, None)
            if percent is not None:
                self.closed_peak = max(self.closed_peak or 0.0, percent)
        latest = max(self.open_percent.values(), default=None)
        if latest is not None or self.closed_peak is not None:
            self.peak_usage_percent = max(latest or 0.0, self.closed_peak or 0.0)
        if newest:
            self._follow(call_seq, snapshot, local_conversation, parts)
        return new

    def _move(self, part: Optional[_Contribution], sign: int, same_definitions: bool = False) -> None:
        if part is None:
            return
        for target, fp, category, tokens, _ in part.repeated:
            seg = self.segments.get((target, fp))
            if seg is None:
                seg = self.segments[(target, fp)] = [category, 0, 0]
            seg[1] += sign * tokens
        if len(self.segments) > MAX_SEGMENTS:
            smallest = min(self.segments, key=lambda k: self.segments[k][1])
            del self.segments[smallest]
        if part.missed:
            self.missed_tokens += sign * part.missed
            self.missed_calls += sign
            if part.saving is not None:
                self.saving += sign * part.saving
                self.priced_misses += sign
        self.input_tokens += sign * part.input_tokens
        if part.input_cost is not None:
            self.input_cost += sign * part.input_cost
            self.priced_calls += sign
        for i in range(len(CATEGORIES)):
            self.tokens[i] += sign * part.tokens[i]
            self.cached[i] += sign * part.cached[i]
            cost = part.costs[i]
            if cost is not None:
                self.costs[i] += sign * cost
        if same_definitions or not part.definitions:
            return
        self._definitions_changed += 1  # definition_requests move with a new call, which moves these too
        for name, tokens in part.definitions:
            self.definition_tokens[name] = self.definition_tokens.get(name, 0) + sign * tokens

    def _follow(
        self, call_seq: int, snapshot: Snapshot, local_conversation: Optional[int], parts: Optional[SnapshotParts] = None
    ) -> None:
        """The stage's newest call: its tool calls and whether its request was compacted."""
        rows = snapshot.tools
        counts = dict(parts.flat("invocations", rows, _invocations) if parts is not None else _invocations(rows))
        if call_seq != self.newest_call:
            for name, before in self.newest_calls.items():
                drop = before - counts.get(name, 0)
                if drop > 0:
                    self.banked[name] = self.banked.get(name, 0) + drop
            compacted = (
                local_conversation is not None
                and self.conversation_local is not None
                and local_conversation < self.conversation_local
            )
            if compacted:
                self.compactions += 1
            # Decided and labelled with the same numbers, the two requests' local counts: the label agrees with
            # the decision (after < before) and is the same whichever of a call's count and response lands first.
            marker = None
            if compacted and self.conversation_local is not None and local_conversation is not None:
                marker = Compaction(before_tokens=self.conversation_local, after_tokens=local_conversation)
            self.marker = marker
            self.newest_call = call_seq
            self.conversation_local = local_conversation
        self.newest_calls = counts

    def totals(self) -> StageTotals:
        key: tuple[object, ...] = (self.calls, self.input_tokens, self.input_cost, self.priced_calls, self.peak_usage_percent)
        key += (self.compactions, *self.tokens, *self.costs, *self.cached)
        made_key, made = self._made_totals
        if made is not None and made_key == key:
            return made
        made = self._totals()
        self._made_totals = (key, made)
        return made

    def _totals(self) -> StageTotals:
        priced = self.priced_calls > 0
        by_category = {
            c: trusted(
                CategoryTotals,
                {"tokens": self.tokens[i], "cost": round(self.costs[i], 10) if priced else None, "cached_tokens": self.cached[i]},
            )
            for i, c in enumerate(CATEGORIES)
        }
        fields = {
            "calls": self.calls,
            "input_tokens": self.input_tokens,
            "input_cost": round(self.input_cost, 10) if priced else None,
            "peak_usage_percent": self.peak_usage_percent,
            "by_category": by_category,
            "cached_tokens": sum(self.cached),
            "compactions": self.compactions,
        }
        return trusted(StageTotals, fields)  # every field given, from the ledger's own numbers

    def stage_rows(self, rows: list[ToolItem], make: Callable[..., ToolItem]) -> list[ToolItem]:
        """The snapshot's rows with the stage's invocations: the same rows, unless a compaction banked earlier calls."""
        if not self.banked:
            return rows
        out = []
        for t in rows:
            banked = self.banked.get(t.name, 0) if not t.folded else 0
            if banked:
                t = make(t.name, t.category, t.source, t.definition_tokens, t.result_tokens, t.invocations + banked, t.folded)
            out.append(t)
        return out

    def unused(self, rows: list[ToolItem]) -> list[UnusedTool]:
        """The tools of these rows the stage never called, with their definitions' tokens over the stage's requests.

        The rows are shared from snapshot to snapshot (_snapshots/build.py): while they and the definitions' numbers
        stay, so does the list (each snapshot gets a copy of its own).
        """
        key = (self._definitions_changed, *rows)
        made_key, made = self._made_unused
        if len(made_key) == len(key) and made_key[0] == key[0] and all(map(operator.is_, made_key[1:], rows)):
            return list(made)
        made = self._unused(rows)
        self._made_unused = (key, made)
        return list(made)

    def repeated(self, latest: _Contribution) -> list[RepeatedContent]:
        """The stage's repeated segments, largest over the stage first, with the latest request's copies."""
        if not self.segments:
            return []
        now = {(target, fp): (tokens, copies) for target, fp, _, tokens, copies in latest.repeated}
        ranked = sorted(self.segments.items(), key=lambda kv: -kv[1][1])[:MAX_REPEATED]
        out = []
        for (target, fp), (category, stage_tokens, requests) in ranked:
            if stage_tokens <= 0:
                continue
            tokens, copies = now.get((target, fp), (0, 0))
            out.append(repeated_item(target, category, fp, copies, tokens, stage_tokens, requests))
        return out

    def cache_miss(self, latest: _Contribution, snapshot: Snapshot) -> Optional[CacheMiss]:
        if self.missed_tokens <= 0:
            return None
        saving = round(self.saving, 10) if self.priced_misses > 0 else None
        cached = snapshot.cached_tokens or 0
        return cache_miss_item(latest.prefix, cached, latest.missed, self.missed_tokens, saving, self.missed_calls)

    def _unused(self, rows: list[ToolItem]) -> list[UnusedTool]:
        return [
            unused_tool(
                t.name,
                t.category,
                t.source,
                t.definition_tokens,
                self.definition_tokens.get(t.name, t.definition_tokens),
                self.definition_requests.get(t.name, 1),
            )
            for t in rows
            if never_called(t)
        ]


class Ledgers:
    """The Runtime's ledgers, one per recent stage (bounded)."""

    def __init__(self, max_stages: int = MAX_STAGES) -> None:
        self._ledgers: OrderedDict[tuple[str, str], Ledger] = OrderedDict()
        self._max = max_stages
        self._lock = threading.Lock()

    def add(
        self,
        stage: tuple[str, str],
        call_seq: int,
        snapshot: Snapshot,
        local_conversation: Optional[int],
        newest: bool,
        parts: SnapshotParts,
        prefix: Optional[PrefixFacts] = None,
    ) -> Snapshot:
        """The snapshot as its stage sees it: with the stage's totals, tool rows, compaction marker, repeated
        segments and cache misses."""
        with self._lock:
            ledger = self._ledgers.get(stage)
            if ledger is None:
                ledger = self._ledgers[stage] = Ledger()
                if len(self._ledgers) > self._max:
                    self._ledgers.popitem(last=False)
            else:
                self._ledgers.move_to_end(stage)
            latest = ledger.add(call_seq, snapshot, local_conversation, newest, parts, prefix)
            totals = ledger.totals()
            rows = ledger.stage_rows(snapshot.tools, parts.tool_item) if snapshot.tools else snapshot.tools
            unused = ledger.unused(rows) if rows else snapshot.unused_tools
            marker = ledger.marker if newest and ledger.newest_call == call_seq else None
            repeated = ledger.repeated(latest) if ledger.segments else snapshot.repeated
            miss = ledger.cache_miss(latest, snapshot)
        return with_stage(snapshot, totals, rows, unused, marker, repeated, miss)

    def anchored(self, stage: tuple[str, str], call_seq: int, facts: Optional[PrefixFacts]) -> Optional[int]:
        """A call's local total anchored on its stage's previous call (`anchored_total`); None: the plain estimate."""
        if facts is None:
            return None
        with self._lock:
            ledger = self._ledgers.get(stage)
            return anchored_total(ledger.anchor, call_seq, facts) if ledger is not None else None

    def forecast(self, stage: tuple[str, str], window: Optional[int], threshold_percent: float) -> Optional[Forecast]:
        """The stage's forecast from its calls' latest input tokens (`forecast_from`, as a reader computes it)."""
        with self._lock:
            ledger = self._ledgers.get(stage)
            if ledger is None:
                return None
            calls = sorted(ledger.open_calls.items())[-FORECAST_CALLS:]
        return forecast_from([c.input_tokens for _, c in calls], window, threshold_percent)

    def after_fork_in_child(self) -> None:
        self._lock = threading.Lock()
