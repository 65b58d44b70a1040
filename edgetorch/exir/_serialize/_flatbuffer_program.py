"""Program flatbuffer bytes -> Program, at ExecuTorch's ``exir._serialize._flatbuffer_program``.

The schema and its reader are :mod:`edgetorch.format`'s; segment data stays where the file puts it
(see ``_program.deserialize_pte_binary`` to move it back inline).
"""

from __future__ import annotations

from edgetorch.format.program import Program
from edgetorch.format.pte import load_pte

__all__ = ["_flatbuffer_to_program"]


def _flatbuffer_to_program(program_data: bytes) -> Program:
    """The Program a ``.pte`` (or bare program flatbuffer) holds; FormatError when malformed."""
    return load_pte(program_data).program
