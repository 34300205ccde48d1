"""LiteLLM's bundled model map read as data (_counting/model_map.py): each entry decoded from the file where it
stands, equal to what parsing the whole file gives, with LiteLLM not imported."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from cw_middleware._counting import model_map

MAP = (
    Path(next(iter(importlib.util.find_spec("litellm").submodule_search_locations)))
    / "model_prices_and_context_window_backup.json"
)


def test_entries_read_from_the_file_equal_the_parsed_map_without_importing_litellm():
    text = MAP.read_text(encoding="utf-8")
    whole = json.loads(text)
    # Names whose entry opens a line of its own exactly once (a name written twice is the parser's last one).
    opening = Counter(line[5:-4] for line in text.split("\n") if line.startswith('    "') and line.endswith('": {'))
    names = [k for k in whole if isinstance(whole[k], dict) and opening[json.dumps(k)[1:-1]] == 1]
    assert len(names) > 1000
    probe = """
import json, sys
from cw_middleware._counting import model_map
names = json.loads(sys.stdin.read())
out = {name: model_map.entry(name) for name in names}
out["?providers"] = [model_map.is_provider(p) for p in ("openai", "anthropic", "bedrock", "not-a-provider")]
out["?litellm"] = "litellm" in sys.modules
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", probe], input=json.dumps(names), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out.pop("?litellm") is False
    assert out.pop("?providers") == [True, True, True, False]
    wrong = [name for name in names if out[name] != whole[name]]
    assert not wrong, wrong[:5]


def test_a_file_changed_after_it_was_indexed_gives_no_entry_rather_than_another(tmp_path):
    first = tmp_path / "map.json"
    first.write_text('{\n    "a": {"max_input_tokens": 1},\n    "b": {"max_input_tokens": 2}\n}\n')
    state = model_map._BundledMap()
    model_map._index(state, first)
    assert model_map._read_entry(state, "b") == {"max_input_tokens": 2}
    first.write_text('{\n    "aa": {"max_input_tokens": 1},\n    "b": {"max_input_tokens": 2}\n}\n')  # "b" moved by one
    assert model_map._read_entry(state, "b") is None
    assert model_map._read_entry(state, "c") is None


def test_an_entry_longer_than_one_read_is_read_whole(tmp_path):
    big = {"max_input_tokens": 7, "notes": "x" * 20_000}
    path = tmp_path / "map.json"
    path.write_text('{\n    "big": ' + json.dumps(big) + "\n}\n")
    state = model_map._BundledMap()
    model_map._index(state, path)
    assert model_map._read_entry(state, "big") == big


def test_a_name_is_found_whole_and_first_and_odd_names_are_not_found(tmp_path):
    path = tmp_path / "map.json"
    entries = {"gpt-x": 1, "gpt-x-mini": 2, "b": 3}
    body = ",\n".join(f'    "{name}": {{"max_input_tokens": {n}}}' for name, n in entries.items())
    path.write_text("{\n" + body + ',\n    "b": {"max_input_tokens": 4}\n}\n')  # "b" twice: the first one counts
    state = model_map._BundledMap()
    model_map._index(state, path)
    assert {name: model_map._read_entry(state, name) for name in entries} == {
        name: {"max_input_tokens": n} for name, n in entries.items()
    }
    for odd in ("gpt", "x", "gpt-x\t0", "gpt-x\ngpt-x-mini", "\ud800", ""):
        assert model_map._read_entry(state, odd) is None, repr(odd)
