"""tiktoken encodings, loaded once from LiteLLM's bundled files (see _kernel/offline.py), off the caller's thread.

tiktoken's own constructors (``tiktoken_ext.openai_public``) hold each encoding's
split pattern and special tokens and fetch the ranks by URL through tiktoken's
cache, which only ``TIKTOKEN_CACHE_DIR`` can point at LiteLLM's copies. Instead the
constructor runs with a loader that reads LiteLLM's file (verifying tiktoken's
expected hash): tiktoken's constants, LiteLLM's bytes, no environment variable and
no network. Without LiteLLM's file, tiktoken's normal loading applies.

Loading o200k_base costs ~0.3-0.6 s of CPU (parsing 200k ranks, then tiktoken's Rust
``CoreBPE``), which the first LLM call must not pay. So the call path counts inside
`without_waiting()`: an encoding that is not loaded yet raises `NotReady` (the wrapper then
estimates that call in the background) and starts `prefetch`, a daemon thread that loads it.
Everything else (`cw.estimate`, the background estimate) waits for the loader. The loader is
polite: the ranks are parsed in slices with the GIL released between them, and while an LLM
call is in flight (the wrapper runs each one inside `calls_in_flight()`) it holds back, for at
most `MAX_HOLD_BACK` seconds, because tiktoken's ``CoreBPE`` build holds the GIL from start to
end -- unless `HOLD_BACK_WAITERS` calls already wait for the encoding: then it neither holds back nor
slices (it parses the rest at once), since each second it takes is that many more calls queued
(memory: a burst of fast calls queued ~3,500 before) and estimated late.

The loader is a one-shot thread per encoding, not a job on the package's `worker.Worker`:
it is no queue (each encoding loads once per process, and a second encoding asked for
meanwhile must not wait behind the first), and whoever needs an encoding waits on that
encoding's own event, not on a queue of unrelated jobs. It holds nothing once it has run.

The loaded encodings and the loader's state are a part of the process state (`_Tokenizers`,
see _kernel/process.py): after ``os.fork()`` a child whose parent was still loading starts its own
loader (the pid is also checked on each use, for a child forked before the process's hook
was registered).
"""

from __future__ import annotations

import binascii
import hashlib
import os
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Optional

from ..._kernel.offline import encoding_file, encoding_url
from ..._kernel.process import PROCESS

MAX_HOLD_BACK = 1.0  # seconds the loader defers to in-flight calls before it loads anyway
HOLD_BACK_WAITERS = 64  # calls waiting for an encoding past which its loader no longer defers to calls in flight
_SLICE_BYTES = 64 * 1024  # of the ranks file parsed per slice (~4k ranks); the GIL is released between slices


class NotReady(Exception):
    """An encoding the caller's thread must not wait for is still loading."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class OverBudget(NotReady):
    """More new text than the caller's thread may count (`within_budget`): the rest is counted later."""

    def __init__(self) -> None:
        super().__init__("")


class _CallsInFlight:
    """LLM calls between their start and LiteLLM's return; the loader holds back while any runs."""

    def __init__(self) -> None:
        self.count = 0
        self._idle = threading.Condition(threading.Lock())

    def __enter__(self) -> None:
        with self._idle:
            self.count += 1

    def __exit__(self, *exc: Any) -> None:
        with self._idle:
            self.count -= 1
            if self.count == 0:
                self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Until no call is in flight (True), or `timeout` seconds (a waiter woken, not one polling the GIL away)."""
        with self._idle:
            return self._idle.wait_for(lambda: self.count == 0, timeout=max(timeout, 0.0))

    def reset(self) -> None:
        # A child starts with none of its parent's calls, and a lock another thread held at fork time stays held.
        self.count, self._idle = 0, threading.Condition(threading.Lock())


class _Tokenizers:
    """The loaded encodings, their counters, and the loader's lock and events (a part of the process state)."""

    def __init__(self) -> None:
        self.encodings: dict[str, Any] = {}  # loaded: survives a fork, as a copy of finished objects
        self.loaded_from: dict[str, str] = {}  # encoding name -> the file its ranks were read from
        self.counters: dict[str, Callable[[str], int]] = {}
        self.loading: dict[str, threading.Event] = {}  # name -> set when loaded (or failed)
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.calls_in_flight = _CallsInFlight()
        self.local = threading.local()  # .no_wait: without_waiting(); .budget: within_budget(); .batch: batched()
        self.batch_counters: dict[str, Callable[[list[str]], list[int]]] = {}  # counter key -> its batch form
        self.waiters = 0  # calls told `NotReady` (their estimates wait for a loader): the loader's hold-back ends at a limit

    def after_fork_in_child(self) -> None:
        """A child forked mid-load has no loader thread, and maybe a held lock: start afresh (loaded ones stay)."""
        self.calls_in_flight.reset()
        if self.pid != os.getpid():
            self.lock = threading.Lock()
            self.loading.clear()
            self.waiters = 0
            self.pid = os.getpid()


def _state() -> _Tokenizers:
    return PROCESS.part(_Tokenizers)


def calls_in_flight() -> _CallsInFlight:
    """The LLM calls in flight (``with calls_in_flight():`` around one): the loader holds back for them."""
    return _state().calls_in_flight


def loaded_from() -> dict[str, str]:
    """Encoding name -> the file its ranks were read from (LiteLLM's copy), for the encodings loaded so far."""
    return dict(_state().loaded_from)


@contextmanager
def without_waiting() -> Iterator[None]:
    """Counting on this thread raises `NotReady` instead of waiting for an encoding to load."""
    local = _state().local
    previous = getattr(local, "no_wait", False)
    local.no_wait = True
    try:
        yield
    finally:
        local.no_wait = previous


@contextmanager
def within_budget(chars: int) -> Iterator[None]:
    """Counting on this thread raises `OverBudget` once it would encode more than ``chars`` characters.

    Checked before each text is encoded (a text longer than what is left is never started), so
    the thread spends on tokenizing about what that many characters cost, whatever the request.
    A short text already memoised (at most `SHORT_TEXT` characters) costs nothing of it.
    """
    local = _state().local
    previous = getattr(local, "budget", None)
    local.budget = [chars]
    try:
        yield
    finally:
        local.budget = previous


def affordable(chars: int) -> bool:
    """False when this thread counts `within_budget` and ``chars`` more characters would spend past it.

    The estimator asks before it even hashes a long text for its cache: hashing 50 MB costs the
    caller ~15-30 ms, and a text past the budget is counted on the worker anyway.
    """
    budget = getattr(_state().local, "budget", None)
    return budget is None or chars <= budget[0]


def _current() -> _Tokenizers:
    """The state, renewed first in a child forked before the process's at-fork hook was registered."""
    state = _state()
    if state.pid != os.getpid():
        state.after_fork_in_child()
    return state


def ready(name: str) -> bool:
    return name in _state().encodings


def prefetch(name: str = "o200k_base") -> None:
    """Load an encoding on a daemon thread (idempotent; restarted in a forked child)."""
    state = _state()
    if name in state.encodings:
        return
    state = _current()
    # Imported here, on the caller's thread (~25 ms once): a module half-imported by the loader when
    # the process forks would stay locked in the child, whose own loader would then wait forever.
    import tiktoken.load  # noqa: F401
    import tiktoken.registry  # noqa: F401
    from tiktoken_ext import openai_public  # noqa: F401

    with state.lock:
        if name in state.encodings or name in state.loading:
            return
        done = state.loading[name] = threading.Event()
        state.waiters = 0  # the calls that will wait for this load
    thread = threading.Thread(target=_load_into, args=(name, done, True), name=f"cw-tiktoken-{name}", daemon=True)
    thread.start()


def wait_ready(timeout: float) -> bool:
    """True once no encoding is loading (flush waits here, within its timeout)."""
    deadline = time.monotonic() + timeout
    for done in list(_state().loading.values()):
        if not done.wait(max(0.0, deadline - time.monotonic())):
            return False
    return True


def encoding(encoding_name: str) -> Any:
    """The loaded encoding; waits for a loader in progress, or loads it here (never in `without_waiting`)."""
    state = _state()
    enc = state.encodings.get(encoding_name)
    if enc is not None:
        return enc
    if getattr(state.local, "no_wait", False):
        prefetch(encoding_name)
        state.waiters += 1  # not under a lock: a count off by a racing call only moves the limit by one
        raise NotReady(encoding_name)
    state = _current()
    with state.lock:
        loaded = encoding_name in state.encodings
        done = state.loading.get(encoding_name)
        mine = done is None and not loaded
        if mine:
            done = state.loading[encoding_name] = threading.Event()
    if mine and done is not None:
        _load_into(encoding_name, done, polite=False)
    elif done is not None:
        done.wait()
    enc = state.encodings.get(encoding_name)
    if enc is None:  # the loader failed: load here, so the error (if any) is the caller's to see
        enc = _build(encoding_name, polite=False)
        state.encodings[encoding_name] = enc
    return enc


def _load_into(name: str, done: threading.Event, polite: bool) -> None:
    state = _state()
    try:
        state.encodings[name] = _build(name, polite)
    except Exception:  # noqa: BLE001 - encoding() retries on the caller's thread and raises there
        pass
    finally:
        done.set()
        with state.lock:
            if state.loading.get(name) is done:
                del state.loading[name]


def _hold_back(polite: bool, since: float) -> None:
    """Defer to the calls in flight, at most `MAX_HOLD_BACK` s from ``since`` and while few calls wait to be estimated."""
    state = _state()
    while polite and state.waiters < HOLD_BACK_WAITERS:
        left = MAX_HOLD_BACK - (time.monotonic() - since)
        if left <= 0 or state.calls_in_flight.wait_idle(min(left, 0.05)):
            return


def _ranks_from_litellm(name: str, polite: bool) -> Callable[..., dict[bytes, int]]:
    def load(blobpath: str, expected_hash: Any = None) -> dict[bytes, int]:
        path = encoding_file(name) if blobpath == encoding_url(name) else None
        if path is None:
            raise FileNotFoundError(blobpath)
        since = time.monotonic()
        # Before any work: reading, hashing and splitting the file hold the GIL for tens of ms, and
        # a prefetch starts inside the first call, which must not share the interpreter with them.
        _hold_back(polite, since)
        data = path.read_bytes()
        if expected_hash and hashlib.sha256(data).hexdigest() != expected_hash:
            raise ValueError(f"LiteLLM's copy of {name} does not match tiktoken's hash")
        _state().loaded_from[name] = str(path)
        # The .tiktoken format: one "base64(token) rank" pair a line. Split a slice of whole lines at a
        # time: one split of the whole file would hold the GIL for tens of ms in a single C call. Once
        # many calls wait (or the loader is not the polite one) the rest goes in that one call: parsed in slices, the
        # caller's threads allocate between them, and their objects, landing in the arenas among the
        # ~200k rank keys, keep those arenas (~10 MB) from being given back once the keys are freed.
        ranks: dict[bytes, int] = {}
        pos, size = 0, len(data)
        while pos < size:
            at_once = not polite or _state().waiters >= HOLD_BACK_WAITERS
            end = data.find(b"\n", size if at_once else min(pos + _SLICE_BYTES, size))
            end = size if end < 0 else end + 1
            fields = data[pos:end].split()
            if len(fields) % 2:
                raise ValueError(f"LiteLLM's copy of {name} is not a .tiktoken file")
            ranks.update(zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2])))
            pos = end
            if polite and _state().waiters < HOLD_BACK_WAITERS:
                _hold_back(polite, since)
                time.sleep(0)  # let the caller's thread have the GIL between slices
        _hold_back(polite, since)  # tiktoken's CoreBPE build comes next: it holds the GIL throughout
        return ranks

    return load


def _build(encoding_name: str, polite: bool) -> Any:
    import tiktoken
    from tiktoken import registry
    from tiktoken_ext import openai_public

    shared = getattr(registry, "ENCODINGS", {}).get(encoding_name)
    if shared is not None:  # LiteLLM (or the host) loaded it already: the same ranks, no second copy
        return shared

    constructor = getattr(openai_public, encoding_name, None)
    if isinstance(constructor, types.FunctionType) and encoding_file(encoding_name) is not None:
        # The same constructor over a copy of its globals, so only this call reads LiteLLM's file.
        scoped = types.FunctionType(
            constructor.__code__, {**constructor.__globals__, "load_tiktoken_bpe": _ranks_from_litellm(encoding_name, polite)}
        )
        try:
            built = tiktoken.Encoding(**scoped())
        except (OSError, ValueError, KeyError, TypeError, binascii.Error):
            _state().loaded_from.pop(encoding_name, None)
        else:
            # The ranks as a Python dict (~25 MB for o200k_base) stay on the Encoding only for pickling it, which
            # cw never does with its own copy: the Rust core has its own. (tiktoken's registry copy keeps them.)
            built._mergeable_ranks = {}
            return built
    return tiktoken.get_encoding(encoding_name)


def encoder(encoding_name: str) -> Callable[[str], list[int]]:
    """encode_ordinary of an encoding: special-token text in a prompt counts as plain text, as providers do."""
    return encoding(encoding_name).encode_ordinary  # type: ignore[no-any-return]


SHORT_TEXT = 64  # roles, names, recipients, separators: counted once, not once per message
MAX_SHORT = 4096  # short texts memoised per encoding
BATCH_CHARS = 1 << 20  # characters encoded in one tiktoken call of a batch (its only GIL release)
# Fewer messages or tools than this are counted one by one: their dry run (~10 us a message) is not
# worth the few GIL waits it saves (up to 5 ms each, and only beside a busy thread).
BATCH_FROM = 16
_SEPARATOR = "<|endoftext|>"  # a special token of every OpenAI encoding: tiktoken encodes each side as if alone


class _Batch:
    """One thread's batch (`batched`): first the texts its dry run asked for, then their counts."""

    def __init__(self) -> None:
        self.recording = True
        self.texts: dict[str, list[str]] = {}  # counter key -> texts, in the order they were asked for
        self.counts: dict[tuple[str, str], int] = {}

    def count(self, key: str, text: str) -> Optional[int]:
        if self.recording:
            self.texts.setdefault(key, []).append(text)
            return 0
        return self.counts.get((key, text))


@contextmanager
def batched(dry_run: Callable[[], object]) -> Iterator[None]:
    """Inside the block, the texts ``dry_run()`` counts come from memory, encoded beforehand in a few calls.

    tiktoken releases the GIL for each text it encodes, and getting it back waits for any other
    busy thread to hand it over (up to the interpreter's 5 ms switch interval): a count of 800
    new messages that takes 20 ms alone took 2 s beside one busy thread. ``dry_run()`` goes
    through the counting once with each text noted, not encoded (it must change nothing else:
    `recording` says when it runs); the noted texts are then encoded per counter, joined at a
    special token (tiktoken encodes each side of one as if alone: the counts are the same), and
    the block counts them from memory. A text the dry run did not see is encoded as before.
    A thread counting `within_budget` (a caller's) counts text by text, so that its budget holds.
    """
    state = _state()
    local = state.local
    if getattr(local, "budget", None) is not None:
        yield
        return
    previous = getattr(local, "batch", None)
    batch = local.batch = _Batch()
    try:
        try:
            dry_run()
        except Exception:  # noqa: BLE001 - the real count meets the same failure, and reports it
            pass
        batch.recording = False
        for key, texts in batch.texts.items():
            many = state.batch_counters.get(key)
            if many is None:
                continue
            try:
                batch.counts.update(zip(((key, text) for text in texts), many(texts)))
            except NotReady:  # still loading: the real count says so
                break
        yield
    finally:
        local.batch = previous


def recording() -> bool:
    """True while this thread runs a `batched` dry run: counts are placeholders, not to be kept."""
    batch = getattr(_state().local, "batch", None)
    return batch is not None and batch.recording


def _encode_together(encode: Callable[..., list[int]], separator: int, texts: list[str]) -> list[list[int]]:
    """Each text's tokens, from one ``encode`` call per `BATCH_CHARS` of text (a text holding the separator: alone)."""
    out: list[list[int]] = [[] for _ in texts]
    chunk: list[int] = []
    size = 0

    def flush() -> None:
        tokens = encode(_SEPARATOR.join(texts[i] for i in chunk), allowed_special={_SEPARATOR}, disallowed_special=())
        start = 0
        for i in chunk[:-1]:
            end = tokens.index(separator, start)
            out[i] = tokens[start:end]
            start = end + 1
        out[chunk[-1]] = tokens[start:]

    for i, text in enumerate(texts):
        if _SEPARATOR in text:
            out[i] = encode(text, allowed_special=set(), disallowed_special=())
            continue
        if chunk and size + len(text) > BATCH_CHARS:
            flush()
            chunk, size = [], 0
        chunk.append(i)
        size += len(text)
    if chunk:
        flush()
    return out


def counter(encoding_name: str, weights: Optional[Callable[[], bytes]] = None, weights_name: str = "") -> Callable[[str], int]:
    """Token count of a text; the encoding is looked up on first use, so making rules never loads it.

    Short framing strings recur in every message, so they are memoised (a plain dict of
    str -> int, cleared when full: no per-entry objects for the collector to walk); long
    texts are cached by the estimator (keyed by hash, holding no text). With ``weights`` (a
    loader of one byte per token id, named ``weights_name``) a text counts the sum of its
    tokens' weights instead of their number; the table is loaded on first use too. Inside
    `batched` a text comes from the batch.
    """
    state = _state()
    key = f"{encoding_name}:{weights_name}" if weights is not None else encoding_name
    made = state.counters.get(key)
    if made is not None:
        return made
    encode: Optional[Callable[[str], list[int]]] = None
    table: Optional[bytes] = None
    short: dict[str, int] = {}
    local = state.local

    def count(text: str) -> int:
        nonlocal encode, table
        if len(text) <= SHORT_TEXT:
            tokens = short.get(text)
            if tokens is not None:
                return tokens
        batch = getattr(local, "batch", None)
        if batch is not None:
            found = batch.count(key, text)
            if found is not None:
                return found
        if encode is None:
            encode = encoder(encoding_name)  # NotReady inside without_waiting() until it is loaded
        budget = getattr(local, "budget", None)
        if budget is not None:
            budget[0] -= len(text)
            if budget[0] < 0:
                raise OverBudget()
        if weights is None:
            tokens = len(encode(text))
        else:
            if table is None:
                table = weights()
            tokens = sum(map(table.__getitem__, encode(text)))
        if len(text) <= SHORT_TEXT:
            if len(short) >= MAX_SHORT:
                short.clear()
            short[text] = tokens
        return tokens

    def many(texts: list[str]) -> list[int]:
        nonlocal table
        enc = encoding(encoding_name)  # NotReady inside without_waiting() until it is loaded
        lists = _encode_together(enc.encode, enc.eot_token, texts)
        if weights is None:
            return [len(tokens) for tokens in lists]
        if table is None:
            table = weights()
        return [sum(map(table.__getitem__, tokens)) for tokens in lists]

    state.batch_counters.setdefault(key, many)
    return state.counters.setdefault(key, count)
