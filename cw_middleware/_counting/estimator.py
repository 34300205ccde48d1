"""Local estimate: tokens per (category, source) for one request, incrementally.

The estimator walks a chat request (OpenAI-style messages and tools, tags still
on) and asks the model's `CountingRules` for each piece: each message through
message_count.py, the tools through tool_count.py, the response format (as LiteLLM sends
it: response_format.py) and the request's framing here.
Caches keep the cost of a turn proportional to what is new in it:

* a text cache keyed on ``(rules, hash(text), len(text))`` (`message_count.TextCache`)
  -- content-addressed, so fresh dicts holding the same strings hit it, and it holds no text;
* a prefix cache of recent conversations: the longest already-counted prefix of
  the message list is found with one C-level list comparison against a frozen
  copy (request_copies.py), and only the messages after it are counted;
* the last few tool sets per rules name, compared by value (tool_count.py).

Every cache is bounded and owned by its `Estimator` (one per Runtime). Three of
them hold content, in memory only and never exported: the frozen copies of the
last `MAX_CONVERSATIONS` conversations, the last `tool_count.MAX_TOOL_SETS` tool sets per
rules name, and the ``model_dump()`` of up to `MAX_DUMPS` response message
objects (a previous reply appended to the history), kept by identity.

Everything here is synchronous and pure apart from the caches; the wrapper calls
it on the request path (``now=True``), so it must stay cheap and never wait: while a
tokenizer loads (see ``rules/_tiktoken.py``), while an estimate that may be long holds the
lock, or past the caller's budgets, it raises `Later` and the call's estimate runs on its
Runtime's background-estimate worker instead (pending_estimate.py), which waits for a
tokenizer without holding the lock. After ``os.fork()`` the runtime gives the child an
Estimator of its own: the parent's locks and caches stay behind.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from .._kernel.contract import Category, WarningCode
from .cache_share import RequestOrder, cache_prefix, has_breakpoint
from .fingerprints import PrefixChain, chained, message_fingerprint
from .message_count import MessageCount, MessageCounter, ReadMessage, SourceKey, TextCache
from .request_copies import AsDict, DumpCache, common_prefix, freeze, head_key, plain_text
from .response_format import response_format_as_sent
from .rules import CountingRules, _tiktoken, rules_for
from .rules._tiktoken import NotReady, OverBudget, within_budget, without_waiting
from .tool_count import ToolSetCounter, legacy_function
from .tool_rows import NO_TOOL_SET, NO_TOOLS, ToolSet, ToolUse, matched, matched_parts, tool_result_key

# The cache budget (docs/performance.md): about 12 MB for the text cache at its cap (two
# generations of 32,768 keyed counts, no text), plus the frozen copies of MAX_CONVERSATIONS
# conversations (their strings are the caller's), `tool_count.MAX_TOOL_SETS` tool sets and MAX_DUMPS dumps.
MAX_TEXT_CACHE = 32_768  # per generation; two generations are kept
MAX_CONVERSATIONS = 32
MAX_DUMPS = 4096

# What a call's estimate may cost its caller's thread (issue 20 item 7): past either budget the rest
# is counted on the background worker and the ``local_estimate`` snapshot comes a little later.
CALLER_TEXT_BUDGET = 64 * 1024  # characters of new text tokenized (~10-15 ms of tiktoken)
CALLER_MESSAGE_BUDGET = 256  # messages the prefix cache has not seen (~5-15 ms of bookkeeping)
_CALLER_POLL = 0.002  # seconds between a caller's looks at whether the lock's holder is a long one
_MAX_LOADS = 8  # tokenizers one estimate may wait for (a request names one model: one or two)

_RESPONSE_FORMAT: SourceKey = (Category.OTHER, "response_format")
_FRAMING: SourceKey = (Category.OTHER, "framing")
_THINKING: SourceKey = (Category.OTHER, "thinking")


@dataclass(frozen=True, slots=True)
class Estimate:
    """A request's local token count, per (category, source), before any scaling.

    ``unestimated`` names the (category, source) keys whose messages carry content the local
    count cannot see (images, audio, files: never guessed from their bytes), with how many
    such parts each carries. Reconciling with an authoritative total gives those keys the
    tokens the local count missed (see `reconcile.reconcile`), instead of spreading them
    over every category.
    """

    by_source: Mapping[SourceKey, int]
    warnings: frozenset[WarningCode]
    rules: CountingRules
    tagged_messages: tuple[int, ...] = ()  # indexes of messages that carry a tag (to strip)
    unestimated: Mapping[SourceKey, int] = field(default_factory=dict)
    # The local parts of the prompt up to its last explicit cache breakpoint (``cache_control``), in
    # the provider's order: tools, system, messages. Empty without a breakpoint. A response's cache
    # read + write is that prefix's exact count (see `reconcile.reconcile_with_prefix`).
    cache_prefix: Mapping[SourceKey, int] = field(default_factory=dict)
    # The request's tools by name: definitions, results and calls (tool_rows.py makes the rows).
    tools: ToolUse = NO_TOOLS
    # Its parts in the provider's order, for attributing a cached prefix (cache_share.py).
    order: Optional[RequestOrder] = None
    # Long texts the request sends more than once: (fingerprint, label, category, tokens of one copy, copies).
    repeated: tuple[tuple[int, str, Category, int, int], ...] = ()
    # Its prefix as fingerprints, to compare with the stage's previous request (a cache miss: ledger.py).
    prefix: Optional[PrefixChain] = None

    @property
    def total(self) -> int:
        return sum(self.by_source.values())


@dataclass
class _Conversation:
    frozen: list[Any]  # value copies of the counted messages, for prefix comparison
    counts: list[MessageCount]
    totals: Counter[SourceKey] = field(default_factory=Counter)
    warnings: Counter[WarningCode] = field(default_factory=Counter)
    tagged_idx: list[int] = field(default_factory=list)
    unseen: Counter[SourceKey] = field(default_factory=Counter)
    system_idx: list[int] = field(default_factory=list)  # system/developer messages (sent ahead of the rest)
    breakpoint_idx: list[int] = field(default_factory=list)  # messages that carry a cache_control breakpoint
    # Tools, by the name the conversation's calls give them (matched to definitions per request).
    call_names: dict[str, str] = field(default_factory=dict)  # call id -> tool name
    parallel_calls: set[str] = field(default_factory=set)  # ids of calls made several to a message
    invocations: Counter[str] = field(default_factory=Counter)  # tool name -> calls made
    results: Counter[str] = field(default_factory=Counter)  # tool name -> tokens of its results
    untagged_results: Counter[tuple[str, SourceKey]] = field(default_factory=Counter)  # moved from the plain role key
    result_tools: set[str] = field(default_factory=set)  # tools whose untagged results moved to their own source
    # The last `ToolUse` handed out, with the tool set and message count it was made for (`_tool_use`).
    tool_use: Optional[tuple[ToolSet, int, ToolUse]] = None
    # Long texts by fingerprint: [label of the newest copy, category, tokens, copies]; those sent twice or more.
    segments: dict[int, list[Any]] = field(default_factory=dict)
    repeats: dict[int, None] = field(default_factory=dict)
    # Per message: the chained fingerprint of the conversation up to it, and its local tokens so far (fingerprints.py).
    fps: list[int] = field(default_factory=list)
    cumulative: list[int] = field(default_factory=list)


class Later(Exception):
    """A call's estimate cannot be made now, on its caller's thread: it is made on the background worker."""


class Estimator:
    """Counts requests with bounded, content-addressed caches. Thread-safe.

    One lock guards the caches. A caller's estimate (``now=True``) holds it only briefly (its
    budgets bound it) and never waits behind a holder that may hold it long: the background
    worker's estimate (which may count megabytes) or ``cw.estimate``'s. A tokenizer still loading
    is waited for without the lock.
    """

    def __init__(
        self, max_text_cache: int = MAX_TEXT_CACHE, max_conversations: int = MAX_CONVERSATIONS, max_dumps: int = MAX_DUMPS
    ) -> None:
        self._lock = threading.Lock()
        self._holders_lock = threading.Lock()
        self._long_holders = 0  # estimates that may hold the lock long (not on a caller's thread), waiting or holding
        self._message_budget: Optional[int] = None  # new messages the estimate holding the lock may still count
        self._dumps = DumpCache(max_dumps)
        self._texts = TextCache(max_text_cache)
        self._max_conversations = max_conversations
        self._conversations: dict[tuple[str, int], list[_Conversation]] = {}
        self._n_conversations = 0
        self._tools = ToolSetCounter(self._dumps.as_dict)
        self._messages = MessageCounter(self._texts.count, self._dumps.as_dict)

    # ------------------------------------------------------------ public

    def estimate(
        self,
        model: str,
        messages: Sequence[Any] | None,
        tools: Sequence[Any] | None = None,
        tool_choice: Any = None,
        response_format: Any = None,
        functions: Sequence[Any] | None = None,
        custom_llm_provider: Optional[str] = None,
        api: str = "chat",
        read_message: Optional[ReadMessage] = None,
        thinking: Any = None,
        reasoning_effort: Any = None,
        *,
        now: bool = False,
    ) -> Estimate:
        """``api`` names the framing the provider applies: "chat" (Chat Completions) or "responses".

        ``read_message`` turns an entry of ``messages`` into the chat message to count (None:
        nothing countable); the Responses adapter passes its input-item reader. It runs only
        on entries the prefix cache has not seen, so a turn still costs what is new in it.

        ``now``: the call path's estimate, on the caller's thread, which never waits -- for a
        tokenizer to load, for an estimate that may hold the lock long (another thread's
        without ``now``: the background worker's, ``cw.estimate``'s), or for more new text and
        messages than a caller counts (`CALLER_TEXT_BUDGET`, `CALLER_MESSAGE_BUDGET`) -- and
        raises `Later` instead; what it counted before stays cached. Without ``now`` the
        estimate waits, for a tokenizer outside the lock.
        """
        count = functools.partial(
            self._count,
            model,
            messages,
            tools,
            tool_choice,
            response_format,
            functions,
            custom_llm_provider,
            api,
            read_message,
            thinking,
            reasoning_effort,
        )
        return self._now(count) if now else self._waiting(count)

    def _now(self, count: Callable[[], Estimate]) -> Estimate:
        """``count()`` under the lock, on a caller's thread: `Later` rather than any wait."""
        if self._long_holders:
            raise Later()
        while not self._lock.acquire(timeout=_CALLER_POLL):  # behind another caller: a few ms at most
            if self._long_holders:
                raise Later()  # ... but not behind the worker
        try:
            self._message_budget = CALLER_MESSAGE_BUDGET
            with without_waiting(), within_budget(CALLER_TEXT_BUDGET):
                return count()
        except NotReady:  # a tokenizer still loading, or the budget spent
            raise Later() from None
        finally:
            self._message_budget = None
            self._lock.release()

    def _waiting(self, count: Callable[[], Estimate]) -> Estimate:
        """``count()`` under the lock, waiting for it; a tokenizer still loading is waited for outside it."""
        for _ in range(_MAX_LOADS):
            with self._holders_lock:
                self._long_holders += 1  # callers meanwhile estimate later instead of waiting behind this
            try:
                with self._lock, without_waiting():
                    return count()
            except NotReady as exc:
                loading = exc.name
            finally:
                with self._holders_lock:
                    self._long_holders -= 1
            _tiktoken.encoding(loading)  # load it, or wait for its loader: without the lock
        with self._lock:
            return count()

    def _count(
        self,
        model: str,
        messages: Sequence[Any] | None,
        tools: Sequence[Any] | None,
        tool_choice: Any,
        response_format: Any,
        functions: Sequence[Any] | None,
        custom_llm_provider: Optional[str],
        api: str,
        read_message: Optional[ReadMessage],
        thinking: Any,
        reasoning_effort: Any,
    ) -> Estimate:
        """The estimate itself; the lock is held."""
        rules = rules_for(model, custom_llm_provider, api)
        messages = messages if type(messages) is list else list(messages or ())
        as_dict = self._dumps.as_dict
        conv = self._count_messages(rules, messages, read_message)
        by_source: dict[SourceKey, int] = dict(conv.totals)
        warnings = {code for code, n in conv.warnings.items() if n}
        all_tools = list(tools or ()) + [legacy_function(f) for f in functions or ()]
        tool_entries: tuple[tuple[SourceKey, int], ...] = ()
        head = tool_entries
        tools_breakpoint = False
        tool_set = NO_TOOL_SET
        tools_fingerprint = 0
        if all_tools:
            tc = self._tools.count(rules, all_tools, tool_choice)
            tool_entries, tools_breakpoint, tool_set = tc.entries, tc.breakpoint, tc.tool_set
            tools_fingerprint = tc.fingerprint
            for key, tokens in tc.entries:
                by_source[key] = by_source.get(key, 0) + tokens
            warnings |= tc.warnings
            # Where the provider puts the tool block depends on the first message (OpenAI merges
            # it into a leading system message, else opens one); O(1), so not cached with the tools.
            key = (Category.TOOLS, "tool_framing")
            placement = rules.tools_placement(_system_first(messages, as_dict), response_format)
            by_source[key] = by_source.get(key, 0) + placement
            head = (*tool_entries, (key, placement))
        tool_use = _tool_use(conv, tool_set, by_source) if tool_set.definitions or conv.result_tools else NO_TOOLS
        tail: list[tuple[SourceKey, int]] = []
        if response_format is not None:
            try:
                sent = response_format_as_sent(response_format, rules.provider)
                placement = rules.response_format_placement(_system_first(messages, as_dict), sent)
                tail.append((_RESPONSE_FORMAT, rules.response_format(sent) + placement))
            except NotReady:
                raise
            except Exception:  # noqa: BLE001 - a schema we cannot read costs its own count, not the estimate
                warnings.add(WarningCode.UNREADABLE_MESSAGE)
        tail.append((_FRAMING, rules.request_overhead(len(messages))))
        # A hidden instruction some providers add for extended thinking (Anthropic): protocol, so `other`.
        if thinking is None and reasoning_effort is not None:
            thinking = rules.thinking_for_effort(reasoning_effort, model)  # LiteLLM sends the effort as `thinking`
        if thinking is not None:
            tail.append((_THINKING, rules.thinking_overhead(thinking)))
        for key, tokens in tail:
            by_source[key] = by_source.get(key, 0) + tokens
        if not rules.exact:
            warnings.add(WarningCode.APPROXIMATE_TOKENIZER)
        unestimated = {k: n for k, n in conv.unseen.items() if n > 0}
        prefix = (
            cache_prefix(conv.counts, conv.system_idx, conv.breakpoint_idx, tool_entries, tools_breakpoint, tool_use.names)
            if conv.breakpoint_idx or tools_breakpoint
            else {}
        )
        repeated = tuple((fp, *conv.segments[fp]) for fp in conv.repeats) if conv.repeats else ()
        chain = PrefixChain(tools_fingerprint, sum(n for _, n in head), conv.fps, conv.cumulative, len(conv.fps))
        return Estimate(
            {k: v for k, v in by_source.items() if v},
            frozenset(warnings),
            rules,
            tuple(conv.tagged_idx),
            unestimated,
            prefix,
            tool_use,
            RequestOrder(head, conv.counts, len(conv.counts), tuple(tail), tool_use.names),
            repeated,
            chain,
        )

    def frozen(self, obj: Any) -> Any:
        """A value copy of messages or tools as the estimate reads them (response objects dumped)."""
        return freeze(obj, self._dumps.as_dict)

    # ------------------------------------------------------------ messages

    def _count_messages(self, rules: CountingRules, messages: list[Any], read_message: Optional[ReadMessage]) -> _Conversation:
        if not messages:
            return _Conversation([], [])
        as_dict = self._dumps.as_dict
        head = (rules.name, head_key(as_dict(messages[0])))
        candidates = self._conversations.get(head, [])
        # -1: a conversation whose count stopped before its first message (a tokenizer still loading)
        # is taken up again rather than joined by another empty one each call, which would push the
        # counted conversations out of the cache (32 of them in the first second of a busy process).
        best, best_k = None, -1
        for conv in candidates:
            k = common_prefix(conv.frozen, messages, as_dict)
            if k > best_k or (k == best_k == len(conv.frozen)):  # ties: the one it extends
                best, best_k = conv, k
        best_k = max(best_k, 0)
        if best is not None and best_k == len(best.frozen):
            conv = best  # the conversation grew (or was repeated): extend it in place
        else:
            conv = _Conversation([], [])
            if best is not None:  # a branch or an edit: reuse the shared prefix
                for count in best.counts[:best_k]:
                    _add(conv, count)
                conv.frozen = best.frozen[:best_k]
                conv.counts = best.counts[:best_k]
                conv.fps = best.fps[:best_k]
                conv.cumulative = best.cumulative[:best_k]
                conv.tagged_idx = [i for i in best.tagged_idx if i < best_k]
                conv.system_idx = [i for i in best.system_idx if i < best_k]
                conv.breakpoint_idx = [i for i in best.breakpoint_idx if i < best_k]
            self._remember(head, conv)
        budget = self._message_budget
        new = messages[best_k:]
        # The new texts go to the tokenizer together, not one GIL release each, which a busy thread beside
        # this one would turn into seconds (rules/_tiktoken.py); a caller's budgeted count goes text by text.
        batch = rules.counts_in_batches and len(new) >= _tiktoken.BATCH_FROM
        together = _tiktoken.batched(functools.partial(self._dry_run, rules, new, read_message)) if batch else None
        with together or contextlib.nullcontext():
            for msg in new:
                if budget is not None:
                    budget -= 1
                    if budget < 0:
                        raise OverBudget()  # what was counted so far stays: a later estimate goes on from it
                count = self._messages.count(rules, msg, read_message)
                answers = count.result_of
                if answers is not None:
                    if answers in conv.parallel_calls:
                        count = self._parallel_result(rules, count, as_dict(msg))
                    tool = conv.call_names.get(answers)
                    if tool is not None:
                        count = matched(count, tool)
                elif count.parts:
                    count = matched_parts(count, conv.call_names)
                if count.tagged:
                    conv.tagged_idx.append(len(conv.counts))
                _note_position(conv, as_dict(msg), len(conv.counts))
                frozen = freeze(msg, as_dict)
                conv.frozen.append(frozen)
                conv.counts.append(count)
                _add(conv, count)
                _chain(conv, frozen, count)
        return conv

    def _dry_run(self, rules: CountingRules, messages: list[Any], read_message: Optional[ReadMessage]) -> None:
        """The messages' counts, made only for the texts they ask the tokenizer for (`_tiktoken.batched`)."""
        for msg in messages:
            self._messages.count(rules, msg, read_message)

    def _parallel_result(self, rules: CountingRules, count: MessageCount, msg: Mapping[str, Any]) -> MessageCount:
        """A result of a parallel call, with what its shown form costs beyond its text (`parallel_result_text`)."""
        content = msg.get("content")
        if not isinstance(content, str) or not count.entries:
            return count
        shown = rules.parallel_result_text(content)
        if shown is None:
            return count
        (key, tokens), *rest = count.entries
        extra = self._texts.count(rules, shown) - self._texts.count(rules, content)
        return count._replace(entries=((key, tokens + extra), *rest))

    def _remember(self, head: tuple[str, int], conv: _Conversation) -> None:
        self._n_conversations += 1
        self._conversations.setdefault(head, []).insert(0, conv)
        if self._n_conversations > self._max_conversations:
            # Drop the oldest conversation of the largest bucket; bounds memory, not correctness.
            bucket_key = max(self._conversations, key=lambda k: len(self._conversations[k]))
            bucket = self._conversations[bucket_key]
            bucket.pop()
            if not bucket:
                del self._conversations[bucket_key]
            self._n_conversations -= 1


def _note_position(conv: _Conversation, msg: Mapping[str, Any], index: int) -> None:
    """Remember where a message sits in the provider's prompt order and whether it marks a cache breakpoint."""
    if plain_text(msg.get("role")) in ("system", "developer"):
        conv.system_idx.append(index)
    if has_breakpoint(msg):
        conv.breakpoint_idx.append(index)


def _system_first(messages: Sequence[Any], as_dict: AsDict) -> bool:
    return bool(messages) and plain_text(as_dict(messages[0]).get("role")) in ("system", "developer")


def _tool_use(conv: _Conversation, tool_set: ToolSet, by_source: dict[SourceKey, int]) -> ToolUse:
    """The request's tools by name; results of a defined tool move from the plain ``tool`` source to its own.

    Only names of the request's own definitions are used: a name a model wrote in a call to a
    tool it was not given stays in memory (the result keeps the plain ``tool`` source).
    """
    undefined = conv.result_tools - tool_set.names
    if undefined:  # results of a tool this request does not define: back under their role
        for (name, key), tokens in conv.untagged_results.items():
            if name in undefined and tokens:
                own = tool_result_key(key, name)
                by_source[own] -= tokens
                if not by_source[own]:
                    del by_source[own]
                by_source[key] = by_source.get(key, 0) + tokens
    # The same ToolUse while the tool set and the conversation are unchanged (it only grows: its length says),
    # so the snapshot's rows, derived from it, are made once (tool_rows.ToolUse.memo).
    last = conv.tool_use
    if last is not None and last[0] is tool_set and last[1] == len(conv.counts):
        return last[2]
    # Undefined names stay in these copies, in memory only: the rows read defined names alone.
    use = ToolUse(tool_set, dict(conv.results), dict(conv.invocations))
    conv.tool_use = (tool_set, len(conv.counts), use)
    return use


def _chain(conv: _Conversation, frozen: Any, count: MessageCount) -> None:
    """The conversation's prefix one message longer: its chained fingerprint and local tokens so far."""
    fps, cumulative = conv.fps, conv.cumulative
    tokens = sum(n for _, n in count.entries)
    fps.append(chained(fps[-1] if fps else 0, message_fingerprint(frozen)))
    cumulative.append((cumulative[-1] if cumulative else 0) + tokens)


def _add(conv: _Conversation, count: MessageCount) -> None:
    for key, tokens in count.entries:
        conv.totals[key] += tokens
    for call_id, name in count.calls:
        conv.call_names[call_id] = name
        conv.invocations[name] += 1
    if len(count.calls) > 1:
        conv.parallel_calls.update(call_id for call_id, _ in count.calls)
    for part in count.parts or (count,):
        if part.tool is not None:
            conv.results[part.tool] += sum(tokens for _, tokens in part.entries)
            for key, tokens in part.moved:
                conv.untagged_results[(part.tool, key)] += tokens
                conv.result_tools.add(part.tool)
    for code in count.warnings:
        conv.warnings[code] += 1
    for key, parts in count.unseen:
        conv.unseen[key] += parts
    for fp, label, category, tokens in count.texts:
        seen = conv.segments.get(fp)
        if seen is None:
            conv.segments[fp] = [label, category, tokens, 1]
        else:  # the copy one would cut is the newest: its place names the suggestion
            seen[0], seen[1], seen[3] = label, category, seen[3] + 1
            conv.repeats[fp] = None
