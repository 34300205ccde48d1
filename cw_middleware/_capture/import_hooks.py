"""Run a function once a module has been imported: `instrument()` observes what the application imports, later too.

`instrument()` must not import an SDK the application does not use (LiteLLM alone takes seconds and
hundreds of MB), nor miss one it imports after the call. So each SDK's patch is a hook: run now where
the module is already imported, else right after the application's own import of it finishes
(`when_imported`). A finder at the front of ``sys.meta_path`` sees that import, finds the module's
spec as the next finders would, and has its loader run the hooks once the module's code has run,
inside the same import: a ``from litellm import completion`` that triggered the import binds the
observed function. A hook that fails is logged and never breaks the application's import.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, Optional

from .._kernel.process import PROCESS

logger = logging.getLogger("cw_middleware")

Hook = Callable[[ModuleType], None]


class _Hooks:
    """Hooks waiting for a module's import, by module name (a part of the process state, see _kernel/process.py)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiting: dict[str, list[Hook]] = {}

    def after_fork_in_child(self) -> None:
        self.lock = threading.Lock()


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a module with hooks waiting, it wraps the loader the other finders find."""

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        hooks = PROCESS.part(_Hooks)
        if fullname not in hooks.waiting:
            return None
        spec = _spec_from_the_others(fullname, path, target)
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if spec is None or loader is None or exec_module is None:
            return spec
        # This loader object was made for this one module: its exec_module runs the hooks after the module's code.
        loader.exec_module = _then_hooks(exec_module, fullname)  # type: ignore[method-assign]
        return spec


def _spec_from_the_others(fullname: str, path: Any, target: Any) -> Optional[importlib.machinery.ModuleSpec]:
    for finder in sys.meta_path:
        if isinstance(finder, _Finder):
            continue
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec = find(fullname, path, target)
        if spec is not None:
            return spec  # type: ignore[no-any-return]
    return None


def _then_hooks(exec_module: Callable[[ModuleType], None], name: str) -> Callable[[ModuleType], None]:
    def exec_then_hooks(module: ModuleType) -> None:
        exec_module(module)
        _run(name, module)

    return exec_then_hooks


_FINDER = _Finder()


def when_imported(name: str, hook: Hook) -> None:
    """Run ``hook(module)`` now if ``name`` is imported, else once the application imports it (once either way)."""
    module = sys.modules.get(name)
    if module is not None and not _initialising(module):
        _call(hook, module)
        return
    hooks = PROCESS.part(_Hooks)
    with hooks.lock:
        hooks.waiting.setdefault(name, []).append(hook)
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)
    module = sys.modules.get(name)
    if module is not None and not _initialising(module):  # imported while we registered: do not wait for another
        _run(name, module)


def cancel(name: str) -> None:
    """Drop the hooks still waiting for ``name`` (uninstrument()); the finder leaves when none waits."""
    hooks = PROCESS.part(_Hooks)
    with hooks.lock:
        hooks.waiting.pop(name, None)
        if not hooks.waiting and _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)


def waiting() -> list[str]:
    """The modules whose import hooks still wait for."""
    hooks = PROCESS.part(_Hooks)
    with hooks.lock:
        return sorted(hooks.waiting)


def _run(name: str, module: ModuleType) -> None:
    hooks = PROCESS.part(_Hooks)
    with hooks.lock:
        due = hooks.waiting.pop(name, [])
        if not hooks.waiting and _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)
    for hook in due:
        _call(hook, module)


def _call(hook: Hook, module: ModuleType) -> None:
    try:
        hook(module)
    except Exception:  # noqa: BLE001 - the application's import goes on; its calls there go unobserved
        logger.warning("cw_middleware: could not observe %s once it was imported", module.__name__, exc_info=True)


def _initialising(module: ModuleType) -> bool:
    """A module still running its own code (another thread is importing it): its hook waits for the end."""
    spec = getattr(module, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))
