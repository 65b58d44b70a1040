"""The package's import graph has no cycles, and its arrows point the way docs/architecture.md draws them.

Every import counts, also those inside functions: an import deferred to call time still ties the two
modules together, it only hides the cycle from the interpreter. Imports under ``if TYPE_CHECKING:`` do not
count: they exist for annotations and never run.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "edgetorch"


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` except those under ``if TYPE_CHECKING:`` (imports for annotations only never run)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            skipped.update(id(n) for child in node.body for n in ast.walk(child))
    return [n for n in ast.walk(tree) if id(n) not in skipped]


def import_graph() -> dict[str, set[str]]:
    """Module -> the edgetorch modules it imports (``from pkg import sub`` counts as importing ``pkg.sub``)."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in files else module for a in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in files and t != name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of modules (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


# Which top-level parts of edgetorch each part may import (ARCHITECTURE: format <- runtime <- exir/backends).
ALLOWED = {
    "format": {"format", "errors"},
    "runtime": {"format", "runtime", "errors", "_lazy"},
    "exir": {"format", "runtime", "exir", "errors", "_lazy"},
}


# ExecuTorch's tutorial imports its demo backends from ``exir.backend.test``; those re-export modules point
# into ``edgetorch.backends.demo`` on purpose.
DOCUMENTED_PATHS = ("edgetorch.exir.backend.test",)


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_arrows_point_one_way(part):
    graph = import_graph()
    wrong = sorted(
        f"{src} imports {dst}"
        for src, dsts in graph.items()
        if src.split(".")[1:2] == [part] and not src.startswith(DOCUMENTED_PATHS)
        for dst in dsts
        if dst.split(".")[1] not in ALLOWED[part]
    )
    assert not wrong, "\n".join(wrong)
