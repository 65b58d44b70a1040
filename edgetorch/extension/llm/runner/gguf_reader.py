"""A fast reader of GGUF files: the metadata key/values and the tensor table, read once, tensors as memmaps.

``gguf.GGUFReader`` builds a NumPy view per string of the embedded vocabulary (seconds for 50k tokens);
this reads the same header in one pass. Quantized tensor bytes are handed to ``gguf.quants.dequantize``
by the checkpoint loader. Torch-free, NumPy only.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgetorch.errors import InvalidInputError

# GGUF value types -> struct format (8 = string, 9 = array are read separately).
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_NUMPY = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32,
          7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}  # fmt: skip


@dataclass
class GGUFTensor:
    name: str
    shape: tuple[int, ...]  # NumPy order (GGUF lists dimensions innermost first)
    ggml_type: int
    data: np.ndarray  # the raw bytes (uint8 memmap)


class _Cursor:
    def __init__(self, buffer: memoryview) -> None:
        self.buffer, self.pos = buffer, 0

    def scalar(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buffer):
            raise InvalidInputError(
                f"the GGUF header runs past the end of the file (a {size}-byte field at offset {self.pos} of a "
                f"{len(self.buffer)}-byte file); the file is truncated or corrupt"
            )
        (value,) = struct.unpack_from("<" + fmt, self.buffer, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.scalar("Q")
        if self.pos + n > len(self.buffer):
            raise InvalidInputError(
                f"a GGUF string of {n} bytes at offset {self.pos} runs past the end of the {len(self.buffer)}-byte "
                "file; the file is truncated or corrupt"
            )
        value = bytes(self.buffer[self.pos : self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return value

    def value(self, kind: int):
        if kind == 8:
            return self.string()
        if kind == 9:
            item, count = self.scalar("I"), self.scalar("Q")
            if item in _NUMPY:
                if self.pos + count * np.dtype(_NUMPY[item]).itemsize > len(self.buffer):
                    raise InvalidInputError(
                        f"a GGUF array of {count} items at offset {self.pos} runs past the end of the "
                        f"{len(self.buffer)}-byte file; the file is truncated or corrupt"
                    )
                array = np.frombuffer(self.buffer, _NUMPY[item], count, self.pos)
                self.pos += array.nbytes
                return array.tolist()
            return [self.value(item) for _ in range(count)]
        if kind not in _SCALARS:
            raise InvalidInputError(f"GGUF value type {kind} is unknown; is the file a GGUF v2/v3 file?")
        return self.scalar(_SCALARS[kind])


class GGUFFile:
    """``metadata`` (key -> value) and ``tensors`` (name -> :class:`GGUFTensor`) of a GGUF file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        size = self.path.stat().st_size
        if size < 24:  # magic, version, tensor count, key/value count
            raise InvalidInputError(f"{str(self.path)!r} has {size} bytes; a GGUF file starts with a 24-byte header")
        self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        cursor = _Cursor(memoryview(self._map))
        if bytes(self._map[:4]) != b"GGUF":
            raise InvalidInputError(f"{str(self.path)!r} is not a GGUF file (no 'GGUF' magic)")
        cursor.pos = 4
        version = cursor.scalar("I")
        if version not in (2, 3):
            raise InvalidInputError(f"GGUF version {version} is not supported; expected 2 or 3")
        n_tensors, n_kv = cursor.scalar("Q"), cursor.scalar("Q")
        self.metadata: dict[str, object] = {}
        for _ in range(n_kv):
            key = cursor.string()
            self.metadata[key] = cursor.value(cursor.scalar("I"))
        infos = []
        for _ in range(n_tensors):
            name = cursor.string()
            dims = [cursor.scalar("Q") for _ in range(cursor.scalar("I"))]
            infos.append((name, tuple(reversed(dims)), cursor.scalar("I"), cursor.scalar("Q")))
        alignment = self.metadata.get("general.alignment", 32)
        if not isinstance(alignment, int) or not 0 < alignment <= 1 << 20:
            raise InvalidInputError(f"GGUF general.alignment must be a positive integer, found {alignment!r}")
        start = -(-cursor.pos // alignment) * alignment
        ends = sorted(offset for *_, offset in infos)[1:] + [len(self._map) - start]
        end_of = dict(zip(sorted(offset for *_, offset in infos), ends))
        self.tensors = {
            name: GGUFTensor(name, shape, kind, self._map[start + offset : start + end_of[offset]])
            for name, shape, kind, offset in infos
        }
