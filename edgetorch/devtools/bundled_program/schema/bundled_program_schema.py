"""The BundledProgram schema's dataclasses under ExecuTorch's module path and names
(``executorch.devtools.bundled_program.schema.bundled_program_schema``); they are
:mod:`edgetorch.format.bundled_program`'s, with the scalar tables of the program schema. Torch-free.
"""

from __future__ import annotations

from edgetorch.format.bundled_program import (
    BundledMethodTestCase,
    BundledMethodTestSuite,
    BundledProgram,
    Tensor,
    Value,
)
from edgetorch.format.program import Bool, Double, Int, ScalarType

# What a ``Value``'s ``val`` holds.
ValueUnion = Tensor | Int | Bool | Double

__all__ = [
    "Bool",
    "BundledMethodTestCase",
    "BundledMethodTestSuite",
    "BundledProgram",
    "Double",
    "Int",
    "ScalarType",
    "Tensor",
    "Value",
    "ValueUnion",
]
