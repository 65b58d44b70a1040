"""The BundledProgram schema as dataclasses (``executorch.devtools.bundled_program.schema``). Torch-free."""

from edgetorch.devtools.bundled_program.schema.bundled_program_schema import (
    Bool,
    BundledMethodTestCase,
    BundledMethodTestSuite,
    BundledProgram,
    Double,
    Int,
    ScalarType,
    Tensor,
    Value,
    ValueUnion,
)

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
