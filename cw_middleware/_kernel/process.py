"""The process's state, in one owner: what outlives a configure(), and what a fork makes anew.

Everything the package keeps for the whole process (the current Runtime and the lock that
configures it, LiteLLM's patch state, the imported ``litellm`` module, endpoints that
refused ``stream_options``, the tokenizer loader, ...) is a *part* of `PROCESS`: one
instance per kind, made on first use (`Process.part`) by the module that defines the kind,
which keeps no state of its own. A Runtime's own workers and caches are the Runtime's
(runtime.py); the current Runtime is one part.

``os.fork()`` copies every lock in the state a moment a parent's thread may hold, and no
worker thread. The process's one at-fork hook, registered here, runs each part's
`ForkAware.after_fork_in_child` in the child: each makes its locks anew and drops what the
parent's threads were doing. A part is renewed in place, never replaced, so a kind added
later is renewed with no list to keep.

Locks a part cannot renew, those inside a C library (SQLite's), are a `ForkGate`'s: the same
hook has the fork wait until no thread is inside the library (`ForkGate.before_fork`), and
lets the threads go on once it is done, in the parent and in the child.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Protocol, TypeVar, cast, runtime_checkable

logger = logging.getLogger("cw_middleware")


class ForkAware(Protocol):
    """A part of the process state: made with no arguments, renewed in a forked child."""

    def after_fork_in_child(self) -> None:
        """Runs inside ``os.fork()`` in the child: fresh locks, none of the parent's work; nothing that waits."""
        ...


@runtime_checkable
class ForkGate(ForkAware, Protocol):
    """A part whose work in flight must finish before a fork: the forking thread waits for it."""

    def before_fork(self) -> None:
        """Runs in the forking thread before ``os.fork()``: wait (bounded) until no other thread is inside."""
        ...

    def after_fork_in_parent(self) -> None:
        """Runs in the parent after ``os.fork()``: let the held-back threads go on."""
        ...


P = TypeVar("P", bound=ForkAware)


class Process:
    """The parts of the process state, by kind; one instance of each, made on first use."""

    def __init__(self) -> None:
        self._parts: dict[type, ForkAware] = {}
        self._lock = threading.Lock()

    def part(self, kind: type[P]) -> P:
        """The process's one instance of ``kind``."""
        found = self._parts.get(kind)
        if found is None:
            made = kind()  # outside the lock: a part may ask for another while it is made
            with self._lock:
                found = self._parts.setdefault(kind, made)
        return cast(P, found)

    def after_fork_in_child(self) -> None:
        """Every part made anew where a parent's thread may have left it mid-update (see the module docstring)."""
        self._lock = threading.Lock()
        for part in list(self._parts.values()):
            try:
                part.after_fork_in_child()  # a gate's too: the child's threads (none yet) may go on
            except Exception as exc:  # noqa: BLE001 - one part's failure must not leave the others unrenewed
                logger.warning("cw_middleware: could not renew %s after fork (%s)", type(part).__name__, type(exc).__name__)

    def before_fork(self) -> None:
        """Every gate waits for its threads to leave (see the module docstring)."""
        for gate in self._gates():
            try:
                gate.before_fork()
            except Exception as exc:  # noqa: BLE001 - a gate's failure must not stop the application's fork
                logger.warning("cw_middleware: %s could not prepare for fork (%s)", type(gate).__name__, type(exc).__name__)

    def after_fork_in_parent(self) -> None:
        for gate in self._gates():
            try:
                gate.after_fork_in_parent()
            except Exception as exc:  # noqa: BLE001
                logger.warning("cw_middleware: %s could not resume after fork (%s)", type(gate).__name__, type(exc).__name__)

    def _gates(self) -> list[ForkGate]:
        return [part for part in list(self._parts.values()) if isinstance(part, ForkGate)]


PROCESS = Process()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=PROCESS.before_fork,
        after_in_parent=PROCESS.after_fork_in_parent,
        after_in_child=PROCESS.after_fork_in_child,
    )
