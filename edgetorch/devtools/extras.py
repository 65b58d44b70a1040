"""The optional packages some developer tools need (``pip install 'edgetorch[devtools]'``), imported on use.

pandas (tables as DataFrames), tabulate (printed tables) and matplotlib (plots) are not needed to export or
run a program; a tool that needs one and does not find it raises :class:`MissingDependencyError`. Torch-free.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from edgetorch.errors import EdgetorchError


class MissingDependencyError(EdgetorchError, ImportError):
    """A developer tool needs an optional package that is not installed."""


def require(module: str, feature: str) -> ModuleType:
    """Import ``module`` (``"pandas"``, ``"matplotlib.pyplot"``, ...) for ``feature``, or say how to get it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        package = module.partition(".")[0]
        raise MissingDependencyError(
            f"{feature} needs the optional package {package!r}, which is not installed ({e}); install the developer "
            f"tools' extras with: pip install 'edgetorch[devtools]' (or pip install {package})"
        ) from None


def figure_class(feature: str) -> type:
    """matplotlib's ``Figure``: figures made from it save to files without pyplot, a display or a global backend."""
    return require("matplotlib.figure", feature).Figure
