"""The fenced code blocks of README.md and docs/*.md, and how a test runs one as written.

A block may carry one marker, an HTML comment on the line just before its fence (invisible
on GitHub and on the built site):

    <!-- block name="quick-start" -->                 a name other blocks and tests refer to
    <!-- block after="quick-start" -->               run after that block, in the same directory
    <!-- block port="4000" -->                       it listens on 4000: the test gives it a free port
                                                     instead (the one change made to the block)
    <!-- block tier="system" -->                     slow: it runs in the system tier (pytest -m system)
    <!-- block run-by="tests/test_x.py" -->          a test of its own runs it (that file names the block)
    <!-- block skip="why it cannot run here" -->     not run; the reason is required

Attributes combine (``name="proxy" run-by="..." port="4000"``). tests/test_docs_blocks.py
runs every block that is neither ``skip`` nor ``run-by``, and checks the markers themselves.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)(?P<lang>[\w+-]*)[^\n]*$")
_MARKER = re.compile(r"^ *<!-- block (?P<attrs>.*?) -->$")
_ATTR = re.compile(r'([\w-]+)="([^"]*)"')
KNOWN = {"name", "after", "port", "tier", "run-by", "skip"}
# Languages that are commands or programs; any other fenced block (text, json, yaml, promql, ...) is
# shown output, a format or a configuration, checked by the test of what it shows where one is named.
PYTHON = {"python", "py"}
SHELL = {"bash", "sh", "shell", "console"}


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    attrs: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def name(self) -> Optional[str]:
        return self.attrs.get("name")

    @property
    def runnable(self) -> bool:
        return self.lang in PYTHON | SHELL


def documents() -> list[Path]:
    """README.md, SECURITY.md (the site includes it) and every page of the site."""
    return [ROOT / "README.md", ROOT / "SECURITY.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        marker = _MARKER.match(lines[i - 1]) if i > 0 else None
        attrs = dict(_ATTR.findall(marker["attrs"])) if marker else {}
        out.append(Block(path, i + 1, opening["lang"].lower(), "\n".join(body) + "\n", attrs))
        i = j + 1
    return out


def all_blocks() -> list[Block]:
    return [b for path in documents() for b in blocks(path)]


def block(name: str) -> Block:
    """The block of that name, in README or in any page (README may repeat a page's block: word for word)."""
    found = [b for b in all_blocks() if b.name == name]
    assert found, f"no block named {name!r}"
    assert len({(b.lang, b.code) for b in found}) == 1, f"blocks named {name!r} differ: {[b.where for b in found]}"
    return found[0]


def chain(target: Block) -> list[Block]:
    """The blocks ``target`` runs after (``after=``, transitively), then ``target`` itself."""
    out = [target]
    while "after" in out[0].attrs:
        out.insert(0, block(out[0].attrs["after"]))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def environment(**extra: str) -> dict[str, str]:
    """A user's shell: this venv's python and cw-middleware first on PATH, none of the test run's CW_/OTEL_ settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CW_", "OTEL_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env.update(extra)
    return env


def workdir(tmp: Path) -> Path:
    """A directory laid out like the repository's root (what the blocks name is linked in), to run blocks in."""
    for entry in ROOT.iterdir():
        if entry.name in (".git", "cw-telemetry.jsonl", "proxy-telemetry.jsonl") or entry.name.startswith(".venv"):
            continue
        (tmp / entry.name).symlink_to(entry)
    for venv in (".venv-proxy", ".venv-frameworks", ".venv-phoenix"):
        if (ROOT / venv).exists():
            (tmp / venv).symlink_to(ROOT / venv)
    return tmp


def _end_group(process: subprocess.Popen[str]) -> None:
    """End what the block left running in its process group (a server started with ``&``), then reap the block."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            continue
        break
    process.wait()


def run(target: Block, cwd: Path, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``target`` (after the blocks it names) as written in ``cwd``; the output is the last step's.

    Consecutive python blocks of the chain run as one program (a block ``after`` the Quick start uses
    its definitions); a shell block runs on its own, in the same directory (it sees the files).

        Each block runs in a process group of its own, ended when the block ends: a block that starts
        a server in the background (``... &``) leaves nothing behind.
    """
    done: Optional[subprocess.CompletedProcess[str]] = None
    steps: list[Block] = []
    for b in chain(target):  # python after python runs in one process: the later block uses the earlier's names
        if steps and b.lang in PYTHON and steps[-1].lang in PYTHON:
            steps[-1] = Block(b.path, b.line, b.lang, steps[-1].code + "\n" + b.code, b.attrs)
        else:
            steps.append(b)
    for b in steps:
        code = b.code
        if "port" in b.attrs:
            code = re.sub(rf"\b{re.escape(b.attrs['port'])}\b", str(free_port()), code)
        argv = [sys.executable, "-c", code] if b.lang in PYTHON else ["bash", "-euo", "pipefail", "-c", code]
        # Files, not pipes: a server the block leaves in the background keeps a pipe open, a file it does not.
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            process = subprocess.Popen(argv, cwd=cwd, env=environment(**env), stdout=out, stderr=err, start_new_session=True)
            try:
                returncode = process.wait(timeout=timeout)
                late = ""
            except subprocess.TimeoutExpired:
                returncode, late = -1, f"{b.where}: still running after {timeout} s\n"
            finally:
                _end_group(process)
            out.seek(0)
            err.seek(0)
            done = subprocess.CompletedProcess(argv, returncode, out.read(), late + err.read())
        if done.returncode != 0:
            done.stderr = f"{b.where} exited {done.returncode}\n{done.stderr}"
            return done
    assert done is not None
    return done
