"""ExecuTorch's schema helpers at their path (``exir._serialize._flatbuffer``), for tools that use ``flatc``.

edgetorch reads and writes ``.pte`` files with its own codec and needs no ``flatc``. The Program schema ships
beside this module as IDL (``program.fbs`` including ``scalar_type.fbs``), rendered from
:mod:`edgetorch.format.program` by :mod:`edgetorch.format.idl` (``python -m edgetorch.exir._serialize._flatbuffer``
writes them again). The helpers here prepare a copy of it for ``flatc`` as ExecuTorch's do:
:func:`_prepare_schema` writes the files to a folder with the fields annotated
``@executorch-tensor-alignment`` / ``@executorch-delegate-alignment`` given another ``force_align``, and reports
the largest alignment and the file identifier; :func:`_replace_non_finite_in_json` quotes the infinities and
NaNs that ``json.dumps`` writes as bare words, which ``flatc`` cannot parse. May import edgetorch.format.
"""

from __future__ import annotations

import importlib.resources
import json
import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "_ResourceFiles",
    "_SchemaInfo",
    "_prepare_schema",
    "_program_flatbuffer_to_json",
    "_replace_non_finite_in_json",
]

_PROGRAM_SCHEMA = "program.fbs"
_SCALAR_TYPE_SCHEMA = "scalar_type.fbs"
_TENSOR_MARK = b"@executorch-tensor-alignment"
_DELEGATE_MARK = b"@executorch-delegate-alignment"
_FORCE_ALIGN = re.compile(rb"\(\s*force_align\s*:\s*(\d+)\s*\)")
_FILE_IDENTIFIER = re.compile(rb'file_identifier\s+"([^"]*)"')


def _check_alignment(value: int | None, name: str) -> None:
    if value is not None and (value <= 0 or value & (value - 1)):
        raise ValueError(f"{name} must be a power of two, found {value}")


def _patch_schema_alignment(
    schema: bytes, constant_tensor_alignment: int | None, delegate_alignment: int | None
) -> bytes:
    """``schema`` with the ``force_align`` of each line marked for tensor (delegate) data set to the given
    alignment; a None alignment leaves those lines as they are. ValueError unless each is a power of two."""
    _check_alignment(constant_tensor_alignment, "constant_tensor_alignment")
    _check_alignment(delegate_alignment, "delegate_alignment")
    wanted = [(_TENSOR_MARK, constant_tensor_alignment), (_DELEGATE_MARK, delegate_alignment)]
    lines = []
    for line in schema.splitlines():
        for mark, alignment in wanted:
            if alignment and mark in line:
                line = _FORCE_ALIGN.sub(b"(force_align: %d)" % alignment, line)
                break
        lines.append(line)
    return b"\n".join(lines)


class _ResourceFiles:
    """Schema files read from this package, changed in memory, then written to a folder."""

    def __init__(self, resource_names: Sequence[str]) -> None:
        self._files = {name: importlib.resources.read_binary(__package__, name) for name in resource_names}

    def patch_files(self, patch_fn: Callable[[bytes], bytes]) -> None:
        """Replace every file's contents with ``patch_fn(contents)``."""
        self._files = {name: patch_fn(data) for name, data in self._files.items()}

    def get(self, name: str) -> bytes:
        return self._files[name]

    def write_to(self, out_dir: str) -> None:
        """Write each file to ``out_dir`` under its resource name."""
        for name, data in self._files.items():
            with open(os.path.join(out_dir, name), "wb") as f:
                f.write(data)


@dataclass
class _SchemaInfo:
    """Where :func:`_prepare_schema` put the root schema, and what it found in the files."""

    root_path: str
    max_alignment: int
    file_identifier: bytes
    tensor_alignment: int
    delegate_alignment: int


def _prepare_schema(
    out_dir: str, constant_tensor_alignment: int | None = None, delegate_alignment: int | None = None
) -> _SchemaInfo:
    """Write the Program schema files to ``out_dir`` with the marked alignments replaced (see the module)."""
    files = _ResourceFiles([_PROGRAM_SCHEMA, _SCALAR_TYPE_SCHEMA])
    files.patch_files(lambda schema: _patch_schema_alignment(schema, constant_tensor_alignment, delegate_alignment))
    alignments: list[int] = []
    marked: dict[bytes, list[int]] = {_TENSOR_MARK: [], _DELEGATE_MARK: []}
    identifiers: set[bytes] = set()
    for name in (_PROGRAM_SCHEMA, _SCALAR_TYPE_SCHEMA):
        schema = files.get(name)
        identifiers.update(_FILE_IDENTIFIER.findall(schema))
        for line in schema.splitlines():
            values = [int(v) for v in _FORCE_ALIGN.findall(line)]
            alignments += values
            for mark, found in marked.items():
                found += values if mark in line else []
    if len(identifiers) > 1 or any(len(i) != 4 for i in identifiers):
        raise ValueError(f"the schema files name file identifiers {sorted(identifiers)}; expected one of 4 bytes")
    files.write_to(out_dir)
    return _SchemaInfo(
        root_path=os.path.join(out_dir, _PROGRAM_SCHEMA),
        max_alignment=max(alignments, default=1),
        file_identifier=next(iter(identifiers), b""),
        tensor_alignment=max(marked[_TENSOR_MARK], default=0),
        delegate_alignment=max(marked[_DELEGATE_MARK], default=0),
    )


def _replace_non_finite_in_json(content: bytes) -> bytes:
    """JSON text with every infinite or NaN number written as the string ``"inf"``, ``"-inf"`` or ``"nan"``
    (``flatc`` reads those for float fields); ``content`` itself when it has none."""
    found = False

    def constant(word: str) -> str:
        nonlocal found
        found = True
        return {"Infinity": "inf", "-Infinity": "-inf", "NaN": "nan"}[word]

    value = json.loads(content, parse_constant=constant)
    if not found:
        return content

    def plain(item: Any) -> Any:
        if isinstance(item, float) and not math.isfinite(item):
            return "nan" if math.isnan(item) else ("inf" if item > 0 else "-inf")
        if isinstance(item, dict):
            return {k: plain(v) for k, v in item.items()}
        if isinstance(item, list):
            return [plain(v) for v in item]
        return item

    return json.dumps(plain(value)).encode("ascii")


def _program_flatbuffer_to_json(program_flatbuffer: bytes) -> bytes:
    """The JSON ``flatc`` reads with the Program schema, of a ``.pte`` (or bare program flatbuffer): field
    names as in the schema, unions with their ``<field>_type``, bytes as lists of ints, non-finite floats as
    strings."""
    from edgetorch.exir._serialize._program import _program_to_json
    from edgetorch.format.pte import load_pte

    return _replace_non_finite_in_json(_program_to_json(load_pte(program_flatbuffer).program).encode("ascii"))


def _schema_texts() -> dict[str, str]:
    """The two schema files, rendered from the format's dataclasses."""
    from edgetorch.format import program
    from edgetorch.format.idl import render, render_enum_file
    from edgetorch.format.pte import FILE_IDENTIFIER

    marks = {
        ("Buffer", "storage"): _TENSOR_MARK.decode(),
        ("BackendDelegateInlineData", "data"): _DELEGATE_MARK.decode(),
    }
    namespace = "executorch_flatbuffer"
    return {
        _PROGRAM_SCHEMA: render(
            program.Program,
            program,
            FILE_IDENTIFIER,
            "pte",
            namespace,
            marks,
            {program.ScalarType: _SCALAR_TYPE_SCHEMA},
        ),
        _SCALAR_TYPE_SCHEMA: render_enum_file(program.ScalarType, namespace, "byte"),
    }


if __name__ == "__main__":  # write the schema files again after the format changes
    here = os.path.dirname(os.path.abspath(__file__))
    for name, text in _schema_texts().items():
        with open(os.path.join(here, name), "w", encoding="utf-8") as f:
            f.write(text)
    sys.exit(0)
