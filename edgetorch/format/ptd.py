"""The ``.ptd`` container (FlatTensor): named tensor data kept outside a ``.pte``.

Layout: bytes 0-4 root offset, 4-8 the ``FT01`` identifier, then a 48-byte
``FH01`` header (magic, length 40, flatbuffer offset, flatbuffer size, segment
base offset, segment data size, zero padding), the rest of the flatbuffer, and
the segments from ``segment_base_offset``. Torch-free.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from edgetorch.format.flatbuffer import (
    BYTE,
    INT,
    STRING,
    UBYTE,
    UINT,
    FlatbufferError,
    Vector,
    decode,
    encode,
    fb,
)
from edgetorch.format.program import DataSegment, ScalarType
from edgetorch.format.pte import FormatError, aligned

FILE_IDENTIFIER = b"FT01"
HEADER_MAGIC = b"FH01"
HEADER_LENGTH = 40
PADDED_HEADER_LENGTH = 48
SEGMENT_ALIGNMENT = 128


@dataclass
class TensorLayout:
    scalar_type: ScalarType = fb(BYTE, ScalarType.BYTE, ScalarType)
    sizes: list = fb(Vector(INT))
    dim_order: list = fb(Vector(UBYTE))


@dataclass
class NamedData:
    key: str | None = fb(STRING)
    segment_index: int = fb(UINT)
    tensor_layout: TensorLayout | None = fb(TensorLayout)


@dataclass
class FlatTensor:
    version: int = fb(UINT)
    segments: list = fb(Vector(DataSegment))
    named_data: list = fb(Vector(NamedData))


@dataclass
class PtdFile:
    flat_tensor: FlatTensor
    segment_base_offset: int
    data: memoryview

    def segment(self, index: int) -> memoryview:
        segs = self.flat_tensor.segments
        if not 0 <= index < len(segs):
            raise FormatError(f"segment index {index} is out of range; the .ptd has {len(segs)} segments")
        start = self.segment_base_offset + segs[index].offset
        end = start + segs[index].size
        if end > len(self.data):
            raise FormatError(f".ptd segment {index} spans bytes {start}..{end} but the file has {len(self.data)}")
        return self.data[start:end]

    def named_data(self) -> dict[str, memoryview]:
        """Key -> bytes (views of the file, no copies)."""
        return {nd.key: self.segment(nd.segment_index) for nd in self.flat_tensor.named_data}


def load_ptd(data: bytes | bytearray | memoryview) -> PtdFile:
    view = memoryview(data).cast("B")
    if len(view) < 8 + HEADER_LENGTH or bytes(view[4:8]) != FILE_IDENTIFIER:
        raise FormatError(f"expected a .ptd file with identifier {FILE_IDENTIFIER!r} at bytes 4..8; this is not one")
    if bytes(view[8:12]) != HEADER_MAGIC:
        raise FormatError(f"expected the {HEADER_MAGIC!r} header at byte 8, found {bytes(view[8:12])!r}")
    length, _fb_offset, _fb_size, base, seg_size = struct.unpack_from("<IQQQQ", view, 12)
    if length < HEADER_LENGTH or base > len(view) or base + seg_size > len(view):
        raise FormatError(
            f".ptd header is inconsistent with the {len(view)}-byte file (segments at {base}, {seg_size} bytes)"
        )
    try:
        flat = decode(view[: max(base, 8 + length)] if base else view, FlatTensor, FILE_IDENTIFIER)
    except FlatbufferError as e:
        raise FormatError(f"the .ptd flatbuffer is malformed: {e}") from None
    return PtdFile(flat, base, view)


def save_ptd(
    tensors: dict[str, tuple[bytes, TensorLayout | None]], segment_alignment: int = SEGMENT_ALIGNMENT
) -> bytes:
    """Write named blobs (each with an optional tensor layout) as a ``.ptd``; identical blobs share a segment.

    Each segment starts at a multiple of ``segment_alignment`` (a power of two) from the segment base.
    """
    if segment_alignment <= 0 or segment_alignment & (segment_alignment - 1):
        raise ValueError(f"segment_alignment must be a power of two, found {segment_alignment}")
    segments: list[DataSegment] = []
    named, blob, seen = [], bytearray(), {}
    for key, (data, layout) in tensors.items():
        data = bytes(data)
        if data not in seen:
            blob += bytes(aligned(len(blob), segment_alignment) - len(blob))
            seen[data] = len(segments)
            segments.append(DataSegment(offset=len(blob), size=len(data)))
            blob += data
        named.append(NamedData(key=key, segment_index=seen[data], tensor_layout=layout))
    flat = encode(FlatTensor(version=0, segments=segments, named_data=named), FILE_IDENTIFIER)
    root = struct.unpack_from("<I", flat, 0)[0]
    base = aligned(len(flat) + PADDED_HEADER_LENGTH, segment_alignment)
    header = HEADER_MAGIC + struct.pack("<IQQQQ", HEADER_LENGTH, PADDED_HEADER_LENGTH, len(flat), base, len(blob))
    header += bytes(PADDED_HEADER_LENGTH - len(header))
    out = bytearray(struct.pack("<I", root + PADDED_HEADER_LENGTH) + flat[4:8] + header + flat[8:])
    out += bytes(base - len(out))
    return bytes(out + blob)
