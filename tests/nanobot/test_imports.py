"""The exact core stays light: no module under ``sessionkit/nanobot/`` imports a heavy library."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sessionkit.nanobot

PACKAGE = Path(sessionkit.nanobot.__file__).resolve().parent
MODULES = sorted(PACKAGE.glob("*.py"))
HEAVY = {"pandas", "matplotlib", "ipywidgets", "anywidget", "IPython", "tqdm"}


def imported_modules(source: str) -> set[str]:
    """Every absolute module an ``import`` or ``from ... import`` names, anywhere in the source."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def top_level(names: set[str]) -> set[str]:
    return {name.partition(".")[0] for name in names}


def test_imported_modules_reads_every_import_form() -> None:
    source = (
        "import a.b as c, d\n"
        "from e.f import g\n"
        "from . import h\n"
        "def f():\n"
        "    import pandas\n"
        "if True:\n"
        "    from tqdm.auto import tqdm\n"
    )
    assert imported_modules(source) == {"a.b", "d", "e.f", "pandas", "tqdm.auto"}
    assert top_level(imported_modules(source)) == {"a", "d", "e", "pandas", "tqdm"}


def test_the_package_has_modules() -> None:
    assert {"session.py", "policies.py", "reader.py", "writer.py"} <= {m.name for m in MODULES}


@pytest.mark.parametrize("module", MODULES, ids=lambda path: path.name)
def test_module_imports_no_heavy_library(module: Path) -> None:
    heavy = top_level(imported_modules(module.read_text(encoding="utf-8"))) & HEAVY
    assert heavy == set()


@pytest.mark.parametrize("module", MODULES, ids=lambda path: path.name)
def test_module_uses_no_relative_import(module: Path) -> None:
    # Relative imports would hide a dependency from the check above.
    tree = ast.parse(module.read_text(encoding="utf-8"))
    relative = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level]
    assert relative == []


@pytest.mark.parametrize("module", MODULES, ids=lambda path: path.name)
def test_module_imports_nothing_of_sessionkit_outside_the_core(module: Path) -> None:
    names = imported_modules(module.read_text(encoding="utf-8"))
    outside = {n for n in names if n.startswith("sessionkit") and n != "sessionkit.nanobot"}
    assert {n for n in outside if not n.startswith("sessionkit.nanobot.")} == set()
