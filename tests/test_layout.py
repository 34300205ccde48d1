"""The package's layout holds: which wing may import which, read from every import in the code (lazy ones too).

The table below is the layout docs/development.md describes, written out: a wing's new import of
another wing shows here first, where it is either added on purpose or moved to where it belongs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import cw_middleware

PACKAGE = Path(cw_middleware.__file__).parent
FACE = "(face)"  # cw_middleware/__init__.py and litellm_proxy.py beside it (__main__.py is the CLI's)

# What each part may import besides itself. The kernel imports no wing; no two wings import each other.
ALLOWED = {
    "_kernel": set(),
    "_counting": {"_kernel"},
    "_readback": {"_kernel"},
    "_embedded": {"_kernel", "_readback"},  # the file exporter keeps the read side's index as it writes
    "_snapshots": {"_kernel", "_counting", "_embedded"},
    "_capture": {"_kernel", "_counting", "_snapshots", "_embedded"},
    "_serve": {"_kernel", "_readback"},
    "_cli": {"_kernel", "_counting", "_readback", "_serve", FACE},  # the demo calls the public API as a user does
    FACE: {"_kernel", "_capture", "_counting", "_readback", "_serve"},
}


def _part(module: str) -> str:
    if module == "cw_middleware.__main__":
        return "_cli"
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else FACE


def _imports(path: Path) -> set[str]:
    """The cw_middleware modules ``path`` imports, anywhere in it."""
    relative = path.relative_to(PACKAGE.parent).with_suffix("").parts
    here = list(relative[:-1])  # the package a relative import starts from (a module's, or an __init__'s own)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            target = ".".join([*base, node.module] if node.module else base) if node.level else node.module or ""
            if target == "cw_middleware":  # `from cw_middleware import _cli`: the names are modules
                found.update(f"{target}.{alias.name}" for alias in node.names)
            else:
                found.add(target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m == "cw_middleware" or m.startswith("cw_middleware.")}


def test_each_part_imports_only_what_the_layout_allows():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        mine = _part(module)
        for target in sorted(_imports(path)):
            theirs = _part(target)
            if theirs != mine and theirs not in ALLOWED[mine]:
                wrong.append(f"{path.relative_to(PACKAGE.parent)} imports {target}")
    assert wrong == []


def test_the_table_names_every_part_and_has_no_circle():
    parts = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert parts | {FACE} == set(ALLOWED)
    done: set[str] = set()

    def visit(part: str, path: tuple[str, ...]) -> None:
        assert part not in path, f"import circle: {' -> '.join((*path, part))}"
        if part not in done:
            for other in ALLOWED[part]:
                visit(other, (*path, part))
            done.add(part)

    for part in ALLOWED:
        visit(part, ())
