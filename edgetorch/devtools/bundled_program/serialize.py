"""``.bpte`` bytes from a BundledProgram and back (ExecuTorch's ``bundled_program.serialize``)."""

from __future__ import annotations

from edgetorch.devtools.bundled_program.core import BundledProgram
from edgetorch.format import bundled_program as fbp


def serialize_from_bundled_program_to_flatbuffer(bundled_program: BundledProgram) -> bytes:
    return fbp.serialize_bundled_program(bundled_program.serialize_to_schema())


def deserialize_from_flatbuffer_to_bundled_program(flatbuffer: bytes) -> fbp.BundledProgram:
    """The schema-level BundledProgram (program bytes and test suites) of a ``.bpte``."""
    return fbp.deserialize_bundled_program(flatbuffer)
