"""The BundledProgram schema (ExecuTorch's ``bundled_program_schema.fbs``) as dataclasses, and its file form.

A ``.bpte`` file is a flatbuffer (identifier ``BP08``) holding a program's
``.pte`` bytes plus test suites: per method, test cases of input values and
expected outputs. Tensors carry their raw bytes. Field order follows the
schema. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgetorch.format.flatbuffer import (
    BYTE,
    INT,
    STRING,
    UBYTE,
    UINT,
    Union,
    Vector,
    decode,
    encode,
    fb,
)
from edgetorch.format.program import Bool, Double, Int, ScalarType  # the same tables as program.fbs

FILE_IDENTIFIER = b"BP08"
SCHEMA_VERSION = 2  # what ExecuTorch 1.5 writes


@dataclass
class Tensor:
    scalar_type: ScalarType = fb(BYTE, ScalarType.BYTE, ScalarType)
    sizes: list = fb(Vector(INT))
    data: bytes | memoryview = fb(Vector(UBYTE, align=16, blob=True), b"")
    dim_order: list = fb(Vector(UBYTE))


@dataclass
class Value:
    val: Tensor | Int | Bool | Double | None = fb(Union((Tensor, Int, Bool, Double)))


@dataclass
class BundledMethodTestCase:
    inputs: list = fb(Vector(Value))
    expected_outputs: list = fb(Vector(Value))


@dataclass
class BundledMethodTestSuite:
    method_name: str | None = fb(STRING)
    test_cases: list = fb(Vector(BundledMethodTestCase))


@dataclass
class BundledProgram:
    version: int = fb(UINT)
    method_test_suites: list = fb(Vector(BundledMethodTestSuite))
    program: bytes | memoryview = fb(Vector(UBYTE, align=32, blob=True), b"")


def is_bundled_program(data: bytes | memoryview) -> bool:
    return len(data) >= 8 and bytes(memoryview(data)[4:8]) == FILE_IDENTIFIER


def serialize_bundled_program(bundle: BundledProgram) -> bytes:
    return encode(bundle, FILE_IDENTIFIER)


def deserialize_bundled_program(data: bytes | memoryview) -> BundledProgram:
    """Read a ``.bpte``; tensor data and the program stay views of ``data``."""
    return decode(data, BundledProgram, FILE_IDENTIFIER)
