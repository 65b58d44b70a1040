"""Every name an edgetorch module advertises in ``__all__`` resolves.

The modules are found on disk (every ``.py`` file under ``edgetorch/`` that assigns ``__all__``), so a new
package is checked without being listed here; a module that fails to import fails its test.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parent.parent / "edgetorch"


def modules_with_all() -> list[str]:
    """Dotted names of the modules under ``edgetorch/`` whose source assigns ``__all__`` at top level."""
    found = []
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        if any(_assigns_all(statement) for statement in tree.body):
            parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
            found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def _assigns_all(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == "__all__" for t in statement.targets)
    if isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
        return isinstance(statement.target, ast.Name) and statement.target.id == "__all__"
    return False


def unresolved_names(module_name: str) -> dict[str, str]:
    """``{name: why}`` for each name of ``module_name.__all__`` that does not resolve."""
    module = importlib.import_module(module_name)
    failures = {}
    for name in module.__all__:
        try:
            if getattr(module, name) is None:
                failures[name] = "resolves to None"
        except Exception as error:  # any failure is the finding, whatever its type
            failures[name] = f"{type(error).__name__}: {error}"
    return failures


MODULES = modules_with_all()


def test_the_walk_finds_the_packages_it_should():
    assert {"edgetorch.exir", "edgetorch.exir.passes", "edgetorch.exir.backend", "edgetorch.runtime"} <= set(MODULES)


@pytest.mark.parametrize("module_name", MODULES)
def test_every_name_in_all_resolves(module_name):
    assert unresolved_names(module_name) == {}


def test_unresolved_names_reports_a_broken_lazy_export(tmp_path, monkeypatch):
    (tmp_path / "broken_exports.py").write_text(
        "from edgetorch._lazy import lazy_exports\n"
        "__all__ = ['fine', 'gone']\n"
        "fine = 1\n"
        "__getattr__ = lazy_exports(__name__, {'gone': 'no_such_module'})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    failures = unresolved_names("broken_exports")
    assert list(failures) == ["gone"]
    assert "No module named" in failures["gone"]
