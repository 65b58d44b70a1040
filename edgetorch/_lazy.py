"""Names a package exports from submodules that load on first use. Standard library only.

Packages whose submodules import torch use this so that importing the package (or one of its
torch-free submodules) stays cheap and torch-free.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` resolving ``name`` to ``package.<exports[name]>.name`` when first asked for."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(import_module(f"{package}.{exports[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
