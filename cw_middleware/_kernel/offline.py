"""Offline loading of LiteLLM and of tiktoken's encodings, without touching the host's environment.

Token counting must work with no network: tiktoken downloads an encoding on first
use unless ``TIKTOKEN_CACHE_DIR`` holds it, and LiteLLM fetches its model-cost map
when it is imported unless ``LITELLM_LOCAL_MODEL_COST_MAP`` is set. Setting either
for the whole process would change how the host's own tiktoken and LiteLLM behave,
so neither is set globally here:

* `encoding_file(name)` finds the encoding files LiteLLM ships (cl100k_base,
  o200k_base, p50k_base in ``litellm_core_utils/tokenizers``), which
  ``_counting/rules/_tiktoken.py`` loads directly: no environment variable, no cache written;
* `litellm()` imports LiteLLM; when cw_middleware is the first to import it,
  ``LITELLM_LOCAL_MODEL_COST_MAP=True`` is set only for the duration of that import
  (LiteLLM then uses its bundled model map instead of fetching one) and removed
  afterwards. A host that wants the fetched map sets ``LITELLM_LOCAL_MODEL_COST_MAP=False``
  or imports ``litellm`` before its first LLM call; either way its choice stands.

Finding the files never imports LiteLLM (which takes seconds): the read side never needs it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
from pathlib import Path
from types import ModuleType

from .process import PROCESS

COST_MAP_VARIABLE = "LITELLM_LOCAL_MODEL_COST_MAP"
# Where tiktoken's own constructors fetch each encoding; LiteLLM names its copies by sha1 of
# this URL, the key of tiktoken's cache.
_ENCODING_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"


def litellm_tokenizers_dir() -> Path | None:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
    return folder if folder.is_dir() else None


def encoding_url(name: str) -> str:
    return _ENCODING_URL.format(name=name)


def encoding_file(name: str) -> Path | None:
    """LiteLLM's bundled copy of a tiktoken encoding (None when LiteLLM does not ship it)."""
    folder = litellm_tokenizers_dir()
    if folder is None:
        return None
    path = folder / hashlib.sha1(encoding_url(name).encode()).hexdigest()
    return path if path.is_file() else None


class _LiteLLM:
    """The ``litellm`` module once imported, and the lock its first import takes (a part of the process state)."""

    def __init__(self) -> None:
        self.module: ModuleType | None = None
        self.lock = threading.Lock()

    def after_fork_in_child(self) -> None:
        self.lock = threading.Lock()  # a parent's thread may have been importing it
        if self.module is not None:
            _renew_litellm_callback_lock(self.module)
            _renew_litellm_executor_locks()


def _renew_litellm_callback_lock(module: ModuleType) -> None:
    """In a forked child: LiteLLM's lock around its callback lists, released if a parent's thread held it.

    LiteLLM (1.110) takes one module-level RLock in every call's set-up (``function_setup``) and
    renews it at no fork: a child forked while another thread of the parent was in there finds it
    held by a thread it does not have, and its first LiteLLM call waits forever, with cw or without
    (tests/test_fork.py: 2 of 40 children under load). No thread of the child can hold it, so it is
    reinitialised in place, as CPython renews its own locks at fork. Versions without it: nothing to do.
    """
    manager = getattr(module, "logging_callback_manager", None)
    reinit = getattr(getattr(manager, "callback_lists_lock", None), "_at_fork_reinit", None)
    if callable(reinit):
        reinit()


def _renew_litellm_executor_locks() -> None:
    """In a forked child: the locks of LiteLLM's logging executor, released if a parent's thread held one.

    Every LiteLLM call hands its logging to one module-level executor (``thread_pool_executor.executor``,
    LiteLLM 1.110): ``submit`` takes its pending-slot semaphore's lock, then the pool's own. A child
    forked while a parent's thread (the application's, calling LiteLLM) was in there (or in the pool's idle
    semaphore, which ``submit`` takes next) waits forever in
    its first call: the more calls the parent makes, the likelier (issue 37: 2 of 60 children, with a
    thread calling through cw at ~500 calls a second). Renewed in place as `_renew_litellm_callback_lock`
    renews its sibling; an executor of another shape is left alone.
    """
    module = sys.modules.get("litellm.litellm_core_utils.thread_pool_executor")
    executor = getattr(module, "executor", None) if module is not None else None
    if executor is None:
        return
    locks = [getattr(getattr(executor, name, None), "_cond", None) for name in ("_pending_slots", "_idle_semaphore")]
    locks += [getattr(executor, "_drop_lock", None), getattr(executor, "_shutdown_lock", None)]
    for lock in locks:
        reinit = getattr(lock, "_at_fork_reinit", None)
        if callable(reinit):
            reinit()


def litellm() -> ModuleType:
    """The ``litellm`` module; our first import of it uses the bundled model map and leaves no variable behind."""
    loaded = PROCESS.part(_LiteLLM)
    if loaded.module is not None:  # the call path asks for it on every call: no lock once it is loaded
        return loaded.module
    with loaded.lock:
        added = COST_MAP_VARIABLE not in os.environ
        if added:
            os.environ[COST_MAP_VARIABLE] = "True"
        try:
            import litellm as module
        finally:
            if added:
                os.environ.pop(COST_MAP_VARIABLE, None)
        loaded.module = module
    return module
