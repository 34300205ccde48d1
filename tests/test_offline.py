"""Counting stays offline without changing the host's environment (no variable set, no cache written)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cw_middleware._kernel.offline import litellm_tokenizers_dir

# Records every attempt to reach the network, then refuses it.
_NO_NETWORK = """
import socket
attempts = []
def _refuse(*args, **kwargs):
    attempts.append(repr(args[:2])[:80])
    raise OSError("network disabled in this test")
socket.getaddrinfo = _refuse
socket.create_connection = _refuse
socket.socket.connect = lambda self, *a: _refuse(*a)
"""

_HOST = (
    _NO_NETWORK
    + """
import json, os
before = dict(os.environ)
import cw_middleware as cw
after_import = dict(os.environ)
cw.configure(export="none")
snap = cw.estimate(model="gpt-4o", messages=[{"role": "user", "content": "Count me offline, please."}])
cw.completion(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], mock_response="ok")
after = dict(os.environ)
changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
from cw_middleware._counting.rules import _tiktoken
print(json.dumps({
    "import_changed": after_import != before,
    "changed": changed,
    "tokens": snap.input_tokens,
    "window": snap.context_window_tokens,
    "attempts": attempts,
    "loaded_from": _tiktoken.loaded_from(),
}))
"""
)


def _clean_env(tmp_path: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR", "LITELLM_LOCAL_MODEL_COST_MAP")
    }
    env["TMPDIR"] = str(tmp_path)  # where tiktoken would cache a download
    return env


@pytest.mark.system
def test_import_and_calls_leave_the_environment_unchanged_and_stay_offline(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", _HOST], env=_clean_env(tmp_path), capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["import_changed"] is False
    assert report["changed"] == []  # neither TIKTOKEN_CACHE_DIR nor LITELLM_LOCAL_MODEL_COST_MAP left behind
    assert report["attempts"] == []  # LiteLLM's model map was not fetched; the encoding was not downloaded
    assert report["tokens"] > 0 and report["window"] == 128_000
    folder = litellm_tokenizers_dir()
    assert folder is not None
    assert Path(report["loaded_from"]["o200k_base"]).parent == folder  # LiteLLM's bundled file
    assert not (tmp_path / "data-gym-cache").exists()  # and no cache written by tiktoken
    assert "model cost map" not in done.stderr


_SAME_AS_TIKTOKEN = """
import json, os, tiktoken
from cw_middleware._counting.rules import _tiktoken
texts = ["plain words", "<|endoftext|> as text", "日本語のテキスト", "x = {'a': [1, 2, 3]}\\n\\n\\tdef f(): pass"]
out = {}
for name in ("o200k_base", "cl100k_base"):
    ours, theirs = _tiktoken.encoding(name), tiktoken.get_encoding(name)
    out[name] = {
        "same_tokens": all(ours.encode_ordinary(t) == theirs.encode_ordinary(t) for t in texts),
        "same_pattern": ours._pat_str == theirs._pat_str,
        "same_specials": ours._special_tokens == theirs._special_tokens,
        "n_vocab": ours.n_vocab == theirs.n_vocab,
        "ours_from": _tiktoken.loaded_from().get(name),
    }
print(json.dumps(out))
"""


def test_the_encodings_read_from_litellms_files_are_tiktokens_own(tmp_path):
    folder = litellm_tokenizers_dir()
    if folder is None:
        pytest.fail("LiteLLM ships no tokenizer files: counting could not stay offline")
    env = _clean_env(tmp_path)
    env["TIKTOKEN_CACHE_DIR"] = str(folder)  # tiktoken's own loading, from the same files, for comparison
    done = subprocess.run(
        [sys.executable, "-c", _NO_NETWORK + _SAME_AS_TIKTOKEN], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    for name, facts in report.items():
        assert facts["same_tokens"] and facts["same_pattern"] and facts["same_specials"] and facts["n_vocab"], name
        assert Path(facts["ours_from"]).parent == folder, name


_FRAMEWORK_FIRST = (
    _NO_NETWORK
    + """
import json
import litellm  # a framework imports LiteLLM before cw_middleware
import cw_middleware as cw
cw.instrument()
print(json.dumps({"attempts": attempts}))
"""
)


@pytest.mark.system  # LiteLLM's retries sleep ~7 s before it falls back: the stall itself, on purpose
def test_a_framework_importing_litellm_first_reaches_for_the_network_unless_the_documented_variable_is_set(tmp_path):
    from docs_blocks import block, run, workdir

    env = {k: v for k, v in os.environ.items() if not k.startswith(("CW_", "OTEL_", "LITELLM_"))}
    done = subprocess.run([sys.executable, "-c", _FRAMEWORK_FIRST], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1])["attempts"], "LiteLLM fetched nothing: the documented stall has no cause"
    # The frameworks section's block: its variable, then the same imports, with nothing attempted.
    documented = block("frameworks-offline")
    assert "export LITELLM_LOCAL_MODEL_COST_MAP=True" in documented.code
    fixed = subprocess.run(
        [sys.executable, "-c", _FRAMEWORK_FIRST],
        env={**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    assert json.loads(fixed.stdout.splitlines()[-1])["attempts"] == []
    # And the block itself runs as written.
    ran = run(documented, workdir(tmp_path))
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "cost map fetch" not in ran.stderr
