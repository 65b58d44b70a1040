"""``FlatTensorSerializer`` and ``FlatTensorHeader``, with ExecuTorch's names, over ``edgetorch.format.ptd``.

The serializer writes named blobs (each optionally with its ``TensorLayout``)
as a ``.ptd`` and reads one back; identical blobs share one segment. It takes a
plain mapping rather than ExecuTorch's ``DataPayload``. The header is the
``FH01`` extended header that follows the flatbuffer's root offset and
identifier. Torch-free.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from edgetorch.format.ptd import (
    HEADER_LENGTH,
    HEADER_MAGIC,
    SEGMENT_ALIGNMENT,
    TensorLayout,
    load_ptd,
    save_ptd,
)

__all__ = ["FlatTensorConfig", "FlatTensorHeader", "FlatTensorSerializer"]

_HEADER = struct.Struct("<4sIQQQQ")


@dataclass
class FlatTensorConfig:
    """``segment_alignment``: each segment starts at a multiple of it (a power of two) from the segment base."""

    segment_alignment: int = SEGMENT_ALIGNMENT


@dataclass
class FlatTensorHeader:
    """The ``FH01`` header: where the flatbuffer and the segments are. ``from_bytes`` reads it from the bytes
    that start with it (a ``.ptd`` from byte 8 on)."""

    EXPECTED_MAGIC: ClassVar[bytes] = HEADER_MAGIC
    EXPECTED_LENGTH: ClassVar[int] = HEADER_LENGTH

    flatbuffer_offset: int
    flatbuffer_size: int
    segment_base_offset: int
    segment_data_size: int
    magic: bytes = HEADER_MAGIC
    length: int = HEADER_LENGTH

    @staticmethod
    def from_bytes(data: bytes) -> FlatTensorHeader:
        """The header at the start of ``data`` (not checked: see ``is_valid``); ValueError if ``data`` is short."""
        if len(data) < HEADER_LENGTH:
            raise ValueError(f"a FlatTensor header is {HEADER_LENGTH} bytes; found {len(data)}")
        magic, length, fb_offset, fb_size, base, size = _HEADER.unpack_from(bytes(data[:HEADER_LENGTH]))
        return FlatTensorHeader(fb_offset, fb_size, base, size, magic, length)

    def is_valid(self) -> bool:
        return self.magic == HEADER_MAGIC and self.length >= HEADER_LENGTH

    def to_bytes(self) -> bytes:
        """The header's bytes (always with the right magic and length)."""
        return _HEADER.pack(
            HEADER_MAGIC,
            HEADER_LENGTH,
            self.flatbuffer_offset,
            self.flatbuffer_size,
            self.segment_base_offset,
            self.segment_data_size,
        )


Entry = bytes | tuple[bytes, TensorLayout | None]


class FlatTensorSerializer:
    """Writes and reads ``.ptd`` files of named data."""

    def __init__(self, config: FlatTensorConfig | None = None) -> None:
        self.config = config if config is not None else FlatTensorConfig()

    def serialize(self, data: Mapping[str, Entry]) -> bytes:
        """``data``: key -> bytes, or (bytes, TensorLayout) for a tensor the runtime can describe."""
        entries = {key: value if isinstance(value, tuple) else (value, None) for key, value in data.items()}
        return save_ptd(entries, self.config.segment_alignment)

    def deserialize(self, blob: bytes) -> dict[str, tuple[bytes, TensorLayout | None]]:
        """Key -> (bytes, TensorLayout or None) of a ``.ptd``."""
        ptd = load_ptd(blob)
        return {nd.key: (bytes(ptd.segment(nd.segment_index)), nd.tensor_layout) for nd in ptd.flat_tensor.named_data}
