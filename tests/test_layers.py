"""The package's shape: release facts only in sessionkit/nanobot/, no import cycles, and a
pandas-free core.  Checked on the syntax trees, so a new module is covered without a list."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sessionkit"
CORE = PACKAGE / "nanobot"
RELEASE_CONSTANTS = {"DEFAULT_POLICY", "NAME", "NAME_022", "NAME_030", "NAME_035"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _tree(module: str) -> ast.Module:
    return ast.parse(MODULES[module].read_text(encoding="utf-8"), filename=str(MODULES[module]))


def _names_a_release(node: ast.AST) -> bool:
    """A release name written out (``"nanobot-0.3.5"``) or a release-name constant."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.match(r"nanobot-\d", node.value) is not None  # not "nanobot-ai", the package
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
    return name is not None and (
        name in RELEASE_CONSTANTS or (name.isupper() and name.endswith("_POLICY"))
    )


def _mentions_a_policy(node: ast.AST) -> bool:
    """An expression reaching a release object (``policy``, ``chosen.policy``, ``Policy035``)."""
    return any(
        (isinstance(n, ast.Name) and "polic" in n.id.lower())
        or (isinstance(n, ast.Attribute) and "polic" in n.attr.lower())
        for n in ast.walk(node)
    )


def _leaks(module: str) -> list[str]:
    """Where ``module`` decides something by which release is in force."""
    found = []
    for node in ast.walk(_tree(module)):
        where = f"{module}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Compare):
            if any(map(_names_a_release, [node.left, *node.comparators])):
                found.append(f"{where} compares a release name")
        elif isinstance(node, ast.Dict):
            if any(k is not None and _names_a_release(k) for k in node.keys):
                found.append(f"{where} keys a table by release name")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            sniff = node.func.id in {"hasattr", "getattr", "isinstance"}
            if sniff and node.args and any(map(_mentions_a_policy, node.args)):
                found.append(f"{where} sniffs a release with {node.func.id}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "sessionkit.nanobot.policy_"
        ):
            found.append(f"{where} imports a release module ({node.module})")
    return found


def test_no_module_outside_the_core_tells_releases_apart() -> None:
    outside = [m for m, p in MODULES.items() if CORE not in p.parents and p.parent != CORE]
    assert len(outside) > 10
    assert [leak for module in outside for leak in _leaks(module)] == []


def test_the_leak_check_finds_each_kind_of_leak(tmp_path: Path) -> None:
    source = (
        "from sessionkit.nanobot.policy_035 import NAME\n"
        "a = policy.name == 'nanobot-0.3.5'\n"
        "b = name != NAME\n"
        "b2 = row.policy == checkup.LOSS_RULE_POLICY\n"
        "c = {'nanobot-0.2': 'blue'}\n"
        "d = hasattr(policy, 'file_cap')\n"
        "e = getattr(get_policy(x), 'file_cap', None)\n"
    )
    MODULES["sessionkit._probe"] = tmp_path / "probe.py"
    MODULES["sessionkit._probe"].write_text(source)
    try:
        assert [leak.split(" ", 1)[1] for leak in _leaks("sessionkit._probe")] == [
            "imports a release module (sessionkit.nanobot.policy_035)",
            "compares a release name",
            "compares a release name",
            "compares a release name",
            "keys a table by release name",
            "sniffs a release with hasattr",
            "sniffs a release with getattr",
        ]
    finally:
        del MODULES["sessionkit._probe"]


def _type_checking_only(tree: ast.Module) -> set[int]:
    """Line numbers of imports under ``if TYPE_CHECKING:`` (never run)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            lines.update(n.lineno for s in node.body for n in ast.walk(s) if hasattr(n, "lineno"))
    return lines


def _imports(module: str) -> set[str]:
    """The sessionkit modules ``module`` imports anywhere (functions included), each named
    as the module it reaches (``from sessionkit.simulate import replay`` reaches ``sessionkit.simulate.replay``)."""
    tree = _tree(module)
    skipped = _type_checking_only(tree)
    reached: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skipped:
            continue
        if isinstance(node, ast.Import):
            reached.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                reached.add(child if child in MODULES else node.module)
    return {m for m in reached if m in MODULES and m != module}


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` (empty when there is none)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for child in sorted(graph[node]):
            if state.get(child) == 1:
                return [*stack[stack.index(child) :], child]
            if child not in state and (found := visit(child)):
                return found
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_the_import_graph_has_no_cycles() -> None:
    graph = {module: _imports(module) for module in MODULES if module != "sessionkit"}
    graph = {m: {i for i in edges if i != "sessionkit"} for m, edges in graph.items()}
    assert sum(map(len, graph.values())) > 50
    assert _cycle(graph) == []
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_core_imports_nothing_above_it() -> None:
    core = [m for m, p in MODULES.items() if p.parent == CORE]
    assert (
        sorted({i for m in core for i in _imports(m) if not i.startswith("sessionkit.nanobot")})
        == []
    )


@pytest.mark.parametrize(
    "module",
    [
        "sessionkit.nanobot",
        "sessionkit.nanobot.policies",
        "sessionkit.nanobot.session",
        "sessionkit",
    ],
)
def test_the_core_and_the_package_import_no_data_stack(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        "heavy = {'pandas', 'numpy', 'matplotlib', 'ipywidgets', 'pyarrow'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_reaches(module: str) -> list[str]:
    """Where ``module`` uses another sessionkit module's private name: ``from m import _x``,
    or ``m._x`` on a name bound to module ``m`` (dotted chains followed)."""
    tree = _tree(module)
    bound: dict[str, str] = {}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):  # `import a.b` binds a; `import a.b as c` binds a.b
            for alias in node.names:
                if alias.name.startswith("sessionkit"):
                    if alias.asname:
                        bound[alias.asname] = alias.name
                    else:
                        bound["sessionkit"] = "sessionkit"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sessionkit"):
            for alias in node.names:
                if _is_private(alias.name) and node.module != module:
                    found.append(f"{module}:{node.lineno} imports {node.module}.{alias.name}")
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
            continue
        chain, value = [], node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if isinstance(value, ast.Name) and value.id in bound:
            target = ".".join([bound[value.id], *reversed(chain)])
            if target in MODULES and target != module:
                found.append(f"{module}:{node.lineno} uses {target}.{node.attr}")
    return found


def test_no_module_reaches_into_another_modules_private_names() -> None:
    assert [reach for module in MODULES for reach in _private_reaches(module)] == []


def test_the_private_check_finds_each_kind_of_reach(tmp_path: Path) -> None:
    source = (
        "import sessionkit.simulate.replay\n"
        "import sessionkit.store.index as index\n"
        "from sessionkit.nanobot import request_022\n"
        "from sessionkit.calls.kits import _probe\n"
        "a = sessionkit.simulate.replay._compute\n"
        "b = index._time(None)\n"
        "c = request_022._fill\n"
        "d = request_022.__name__ + index.Index.__doc__\n"
    )
    MODULES["sessionkit._reach"] = tmp_path / "reach.py"
    MODULES["sessionkit._reach"].write_text(source)
    try:
        assert sorted(_private_reaches("sessionkit._reach")) == [
            "sessionkit._reach:4 imports sessionkit.calls.kits._probe",
            "sessionkit._reach:5 uses sessionkit.simulate.replay._compute",
            "sessionkit._reach:6 uses sessionkit.store.index._time",
            "sessionkit._reach:7 uses sessionkit.nanobot.request_022._fill",
        ]
    finally:
        del MODULES["sessionkit._reach"]


def test_test_files_have_unique_names() -> None:
    """pytest imports test modules by their file name (no ``__init__.py`` in tests/), so two
    ``test_x.py`` in different folders stop the whole collection: every name is used once."""
    tests = Path(__file__).resolve().parent
    seen: dict[str, list[str]] = {}
    for path in sorted(tests.rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(tests)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
