"""Read a CTranslate2 ``model.bin`` (binary version 6) into NumPy arrays by variable name. Torch-free, no pickle.

The layout, all little-endian: ``uint32`` version, the spec name and ``uint32`` revision, ``uint32`` count
of variables, then per variable its name, ``uint8`` rank, ``uint32`` dims, ``uint8`` dtype id, ``uint32``
byte count and the raw bytes; last the aliases (``uint32`` count, then name and target pairs). A string is
a ``uint16`` length (the trailing NUL counted) and its UTF-8 bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgetorch.errors import ProgramLoadError

__all__ = ["CTranslate2Model", "read_model_bin"]

SUPPORTED_VERSIONS = (5, 6)

# CTranslate2's DataType enum, in its order.
DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}


@dataclass
class CTranslate2Model:
    """A ``model.bin``: its spec name (``WhisperSpec``), revision and variables (aliases resolved)."""

    spec: str
    revision: int
    variables: dict[str, np.ndarray] = field(default_factory=dict)

    def scalar(self, name: str) -> int:
        return int(self.variables[name].reshape(-1)[0])


class _Reader:
    def __init__(self, data: bytes | memoryview, path: str) -> None:
        self.data, self.offset, self.path = data, 0, path

    def take(self, fmt: str) -> tuple:
        fmt = "<" + fmt
        size = struct.calcsize(fmt)
        if self.offset + size > len(self.data):
            raise self.truncated()
        values = struct.unpack_from(fmt, self.data, self.offset)
        self.offset += size
        return values

    def string(self) -> str:
        (length,) = self.take("H")
        raw = self.bytes(length)
        try:
            return bytes(raw).rstrip(b"\0").decode("utf-8")
        except UnicodeDecodeError:
            raise ProgramLoadError(
                f"{self.path}: a variable name at byte {self.offset - length} is not UTF-8; the file is not a "
                "CTranslate2 model.bin or is corrupt"
            ) from None

    def bytes(self, n: int) -> memoryview:
        if self.offset + n > len(self.data):
            raise self.truncated()
        view = memoryview(self.data)[self.offset : self.offset + n]
        self.offset += n
        return view

    def truncated(self) -> ProgramLoadError:
        return ProgramLoadError(
            f"{self.path}: ends at byte {len(self.data)} inside a record at byte {self.offset}; expected a complete "
            "CTranslate2 model.bin, found a truncated one: copy the file again"
        )


def read_model_bin(path: str | Path) -> CTranslate2Model:
    """The variables of the CTranslate2 ``model.bin`` at ``path``, as read-only arrays over the file's bytes."""
    path = Path(path)
    data = path.read_bytes()
    reader = _Reader(data, str(path))
    (version,) = reader.take("I")
    if version not in SUPPORTED_VERSIONS:
        raise ProgramLoadError(
            f"{path}: binary version {version}; expected a CTranslate2 model.bin of version {SUPPORTED_VERSIONS}: "
            "convert the model with a current ctranslate2 converter"
        )
    spec = reader.string()
    (revision,) = reader.take("I")
    model = CTranslate2Model(spec, revision)
    (count,) = reader.take("I")
    for _ in range(count):
        name = reader.string()
        (rank,) = reader.take("B")
        shape = reader.take(f"{rank}I")
        dtype_id, nbytes = reader.take("BI")
        if dtype_id not in DTYPES:
            raise ProgramLoadError(
                f"{path}: variable {name!r} has dtype id {dtype_id}; expected one of {sorted(DTYPES)} "
                "(float32, int8, int16, int32, float16): convert the model to float16 or float32"
            )
        dtype = np.dtype(DTYPES[dtype_id])
        if nbytes != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
            raise ProgramLoadError(
                f"{path}: variable {name!r} of shape {shape} and dtype {dtype} holds {nbytes} bytes; expected "
                f"{int(np.prod(shape)) * dtype.itemsize}: the file is corrupt"
            )
        model.variables[name] = np.frombuffer(reader.bytes(nbytes), dtype).reshape(shape)
    (aliases,) = reader.take("I")
    for _ in range(aliases):
        alias, target = reader.string(), reader.string()
        if target not in model.variables:
            raise ProgramLoadError(f"{path}: alias {alias!r} points to {target!r}, which the file does not hold")
        model.variables[alias] = model.variables[target]
    return model
