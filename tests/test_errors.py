"""Every exception class edgetorch defines derives from ``edgetorch.errors.EdgetorchError``.

A user can then catch everything edgetorch raises on purpose with one ``except EdgetorchError``; classes whose
name starts with ``_`` are private signals caught inside their own module.
"""

from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

from edgetorch.errors import EdgetorchError

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "edgetorch"


def _exception_classes() -> list[tuple[str, str]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = [ast.unparse(b) for b in node.bases]
                if any(b.endswith(("Error", "Exception", "Crashed")) for b in bases):
                    found.append((module, node.name))
    return found


CLASSES = _exception_classes()


def test_the_scan_finds_the_error_classes():
    assert ("edgetorch.format.pte", "FormatError") in CLASSES and len(CLASSES) >= 15


@pytest.mark.parametrize("module,name", CLASSES, ids=[f"{m}.{n}" for m, n in CLASSES])
def test_error_class_derives_from_edgetorch_error(module, name):
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, EdgetorchError), f"{module}.{name} must derive from edgetorch.errors.EdgetorchError"
