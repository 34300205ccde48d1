"""References to LiteLLM's entry points bound before `instrument()`: found and swapped too.

``from litellm import completion`` at a module's import binds the function itself; replacing
the ``litellm`` module's attribute later does not reach that name, so its calls would go
unobserved while the same framework's lazily imported path is observed. `instrument()` looks
through every loaded module's globals (LiteLLM's own and ours excepted) for the functions it
is replacing, under any name, and swaps each for the shell; `uninstrument()` puts back every
one still holding our shell. A reference it cannot swap -- a class attribute, a module whose
namespace refuses the assignment -- is named in one warning: those calls stay unobserved.
"""

from __future__ import annotations

import logging
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("cw_middleware")

_SKIP = ("litellm", "cw_middleware")  # LiteLLM's own modules call their own functions; ours forward to them


@dataclass(frozen=True)
class Swap:
    """One module global that held ``original`` and now holds ``shell``."""

    module: str
    namespace: dict[str, Any]
    key: str
    original: Callable[..., Any]
    shell: Callable[..., Any]


def swap(replacing: Mapping[int, Callable[..., Any]]) -> list[Swap]:
    """Swap every module global that is one of ``replacing``'s keys (``id(original)`` -> shell); said once per module."""
    done: list[Swap] = []
    missed: dict[str, list[str]] = {}
    litellm = sys.modules.get("litellm")
    for module_name, module in list(sys.modules.items()):
        if not isinstance(module, types.ModuleType) or module_name.partition(".")[0] in _SKIP:
            continue
        try:
            namespace = object.__getattribute__(module, "__dict__")  # never a lazy module's __getattr__
            items = list(namespace.items())
        except Exception:  # noqa: BLE001 - a module mid-import or with an odd namespace: nothing to swap
            continue
        classes: list[tuple[str, type]] = []
        touches_litellm = False  # a class can hold LiteLLM's function only where its module reached LiteLLM
        for key, value in items:
            shell = replacing.get(id(value))
            if shell is not None:
                touches_litellm = True
                try:
                    namespace[key] = shell
                    done.append(Swap(module_name, namespace, key, value, shell))
                except Exception:  # noqa: BLE001
                    missed.setdefault(module_name, []).append(key)
            elif value is litellm:
                touches_litellm = True
            # type(value), not isinstance: a lazy module proxy (openai's) answers isinstance by importing what it
            # stands for, and instrument() would load that module for the application.
            elif issubclass(type(value), type):
                classes.append((key, value))
        for key, cls in classes if touches_litellm else ():
            if getattr(cls, "__module__", None) == module_name:
                missed_here = [f"{key}.{k}" for k, v in _class_items(cls) if id(_unwrap_static(v)) in replacing]
                if missed_here:
                    missed.setdefault(module_name, []).extend(missed_here)
    for module_name, keys in missed.items():
        logger.warning(
            "cw_middleware: %s holds LiteLLM's own %s, bound before instrument() where it cannot be replaced: "
            "calls through it are not observed (call cw.instrument() before importing %s)",
            module_name,
            ", ".join(sorted(keys)),
            module_name,
        )
    return done


def restore(swaps: list[Swap]) -> None:
    """Put the originals back wherever our shell is still in place (a later assignment is left alone)."""
    for s in swaps:
        try:
            if s.namespace.get(s.key) is s.shell:
                s.namespace[s.key] = s.original
        except Exception:  # noqa: BLE001
            continue


def _class_items(cls: type) -> list[tuple[str, Any]]:
    try:
        return list(vars(cls).items())
    except Exception:  # noqa: BLE001
        return []


def _unwrap_static(value: Any) -> Any:
    return value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
