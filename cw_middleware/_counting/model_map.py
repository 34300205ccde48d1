"""LiteLLM's model map read as data: a model's provider, context window and prices, without running LiteLLM.

The map is LiteLLM's (``litellm.model_cost``, never a table of ours). Where the application has
imported LiteLLM, its map in memory is read, the one its own calls use (the bundled copy, or the one
it fetched). Where it has not (an ``openai``, ``anthropic``, ``google-genai`` or Bedrock client used
directly), LiteLLM is not imported for it: the file LiteLLM ships, ``model_prices_and_context_window_backup.json``,
is indexed once (3.5 MB read, ~8 ms; the index kept, not the text) and a model's entry is decoded from
the file where its key stands, so no 30 ms parse of the whole map runs on a caller's first call. LiteLLM's
functions that resolve a name (``get_llm_provider``, ``get_model_info``) are not called either: for a name they do not know
they print "Provider List" on the application's stdout, and for some providers they parse the whole
map on the caller's thread. The name is resolved here the way they resolve it: a provider given or
prefixed (``openai/gpt-4o``), else the provider the model's own entry names.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple, Optional

from .._kernel.process import PROCESS

MAP_FILE = "model_prices_and_context_window_backup.json"
_DECODER = json.JSONDecoder()


class Resolved(NamedTuple):
    provider: Optional[str]  # LiteLLM's provider name; None: not known
    name: str  # the model as its provider names it (no routing prefix)
    entry: Optional[Mapping[str, Any]]  # the model's map entry; None: not in the map


class _BundledMap:
    """Where each entry of the map LiteLLM ships stands in its file, indexed once (a process part, see _kernel/process.py).

    Only the index is kept, not the 3.5 MB text: an entry is read from the file where the index says it
    starts, the first time its name is asked for. The index is one bytes object, ``\n<name>\t<offset>`` an
    entry in the file's order, searched in C (~0.2 MB; as a dict of ~5,000 names it held 0.6 MB).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.path: Optional[Path] = None
        self.index: Optional[bytes] = None  # b"\n<name>\t<byte offset of its line>" an entry, then b"\n"
        self.providers: Optional[frozenset[str]] = None  # read from the file when first asked (`is_provider`)
        self.entries: dict[str, Optional[Mapping[str, Any]]] = {}

    def after_fork_in_child(self) -> None:
        self.lock = threading.Lock()  # the index and entries are whole or not there: the child keeps them


def loaded_litellm() -> Any:
    """The ``litellm`` module where it is imported and done importing (its map in memory); else None."""
    module = sys.modules.get("litellm")
    found = getattr(module, "model_cost", None) if module is not None else None
    return module if isinstance(found, Mapping) and found else None


def _loaded_litellm_map() -> Optional[Mapping[str, Any]]:
    module = loaded_litellm()
    return module.model_cost if module is not None else None


# A top-level entry's line in the map's file: its keys are indented by four, its value an object. A name
# with a quote or a backslash in it (none today) is not indexed: looked up, it reads as not in the map.
_ENTRY_LINE = re.compile(rb'\n    "([^"\\\n]*)": \{')
_PROVIDER = re.compile(rb'"litellm_provider": "([^"]*)"')


def _bundled() -> _BundledMap:
    state = PROCESS.part(_BundledMap)
    if state.index is None:
        with state.lock:
            if state.index is None:
                _index(state, _map_path())
    return state


def _map_path() -> Optional[Path]:
    spec = importlib.util.find_spec("litellm")  # finds the package; imports nothing
    return Path(next(iter(spec.submodule_search_locations))) / MAP_FILE if spec and spec.submodule_search_locations else None


def _read(path: Optional[Path]) -> bytes:
    try:
        return path.read_bytes() if path is not None else b""
    except OSError:
        return b""


def _index(state: _BundledMap, path: Optional[Path]) -> None:
    """Read the file once (~8 ms, on a first call): each name's offset (a name twice: the first is found)."""
    index = b"".join(b"\n%s\t%d" % (found.group(1), found.start()) for found in _ENTRY_LINE.finditer(_read(path)))
    state.path, state.index = path, index + b"\n"


def _offset(state: _BundledMap, key: str) -> Optional[int]:
    """Where ``key``'s entry starts in the file, from the index (None: not there)."""
    if "\n" in key or "\t" in key:  # no name in the map holds one (JSON escapes them): never a match
        return None
    try:
        wanted = b"\n" + key.encode("utf-8") + b"\t"
    except UnicodeEncodeError:  # a lone surrogate: not a name in a UTF-8 file
        return None
    index = state.index or b""
    at = index.find(wanted)
    if at < 0:
        return None
    start = at + len(wanted)
    return int(index[start : index.index(b"\n", start)])


def entry(key: str) -> Optional[Mapping[str, Any]]:
    """The map's entry for ``key`` exactly (``gpt-4o``, ``azure/gpt-4o``), or None."""
    loaded = _loaded_litellm_map()
    if loaded is not None:
        found = loaded.get(key)
        return found if isinstance(found, Mapping) else None
    state = _bundled()
    if key in state.entries:
        return state.entries[key]
    decoded = _read_entry(state, key)
    with state.lock:
        if len(state.entries) > 4096:  # names seen, bounded: a caller inventing names cannot grow it
            state.entries.clear()
        state.entries[key] = decoded
    return decoded


def _read_entry(state: _BundledMap, key: str) -> Optional[Mapping[str, Any]]:
    """The entry named ``key``, decoded from the file where the index says it stands (None: not in the map)."""
    at = _offset(state, key)
    if at is None or state.path is None:
        return None
    line = ("\n    " + json.dumps(key) + ": ").encode()
    try:
        with state.path.open("rb") as file:
            file.seek(at)
            chunk, size = b"", 4096
            while True:
                more = file.read(size)
                chunk += more
                if not chunk.startswith(line):
                    return None  # the file changed since it was indexed (LiteLLM upgraded under the process)
                try:
                    found, _ = _DECODER.raw_decode(chunk.decode("utf-8"), len(line))
                    break
                except ValueError:  # the entry goes on past this chunk (or a character is cut at its end)
                    if not more:
                        return None
                    size *= 2
    except OSError:
        return None
    return found if isinstance(found, dict) else None


def is_provider(name: str) -> bool:
    """Whether ``name`` is a provider LiteLLM routes to (the prefix of ``openai/gpt-4o``)."""
    module = sys.modules.get("litellm")
    listed = getattr(module, "provider_list", None) if module is not None else None
    if listed:
        return name in {getattr(p, "value", p) for p in listed}
    state = _bundled()
    if state.providers is None:
        providers = frozenset(p.decode("utf-8", "replace") for p in set(_PROVIDER.findall(_read(state.path))))
        with state.lock:
            state.providers = providers
    return name in state.providers


def resolve(model: str, custom_llm_provider: Optional[str] = None) -> Resolved:
    """(provider, name, entry) of a model string as LiteLLM routes it; (None, model, None) for a name nobody maps."""
    prefix, slash, rest = model.partition("/")
    if custom_llm_provider:
        provider: Optional[str] = custom_llm_provider
        name = rest if slash and prefix == custom_llm_provider else model
    elif slash and is_provider(prefix):
        provider, name = prefix, rest
    else:
        provider, name = None, model
    found = _entry_of(model, name, provider)
    if provider is None and found is not None:
        named = found.get("litellm_provider")
        provider = named if isinstance(named, str) else None
    return Resolved(provider, name, found)


def _entry_of(model: str, name: str, provider: Optional[str]) -> Optional[Mapping[str, Any]]:
    """The entry LiteLLM's ``get_model_info`` finds: the name under its provider, then as written, then bare."""
    keys = [f"{provider}/{name}", model, name] if provider else [model, name]
    for key in dict.fromkeys(keys):
        found = entry(key)
        if found is not None and (provider is None or _serves(found, provider) or key.startswith(f"{provider}/")):
            return found
    return None


def _serves(found: Mapping[str, Any], provider: str) -> bool:
    """An entry listed under another provider is another model (``gpt-4o`` on Azure is ``azure/gpt-4o``)."""
    named = found.get("litellm_provider")
    return named == provider or (isinstance(named, str) and named.startswith(provider))
