"""What the ``edgetorch`` subcommands share: loading a program, a model factory, inputs; the exit codes. Torch-free."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from typing import Any

EXIT_OK, EXIT_ERROR = 0, 1  # argparse itself exits with 2 on a usage error


def load_program(path: str) -> Any:
    from edgetorch.runtime import Runtime

    return Runtime.get().load_program(path)


def load_factory(spec: str) -> Any:
    """The callable ``FACTORY`` of ``FILE.py:FACTORY`` (the file is imported as a module)."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise ValueError(f"expected FILE.py:FACTORY, got {spec!r}")
    file = pathlib.Path(path)
    if not file.is_file():
        raise ValueError(f"{path!r} is not a file")
    module_spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    factory = getattr(module, name, None)
    if not callable(factory):
        raise ValueError(f"{path} has no callable {name!r}")
    return factory


def load_npz_inputs(path: str) -> list[Any]:
    """The arrays of an ``.npz`` as a method's inputs: ``arr_0, arr_1, ...`` (as ``np.savez`` names them) in
    numeric order, other names after them."""
    import numpy as np

    def order(name: str) -> tuple[int, str]:
        digits = name.rpartition("_")[2]
        return (int(digits), name) if digits.isdigit() else (sys.maxsize, name)

    with np.load(path, allow_pickle=False) as data:
        return [data[k] for k in sorted(data.files, key=order)]
