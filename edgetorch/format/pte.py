"""The ``.pte`` container: a Program flatbuffer with an ``eh00`` extended header and aligned segments.

Layout: bytes 0-4 root offset, 4-8 the ``ET12`` identifier, 8-40 the extended
header (magic, length, program size, segment base offset, segment data size),
then the rest of the flatbuffer; segments follow at ``segment_base_offset``.
Torch-free.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from edgetorch.errors import EdgetorchError
from edgetorch.format.flatbuffer import FlatbufferError, decode, encode
from edgetorch.format.program import DataSegment, Program

FILE_IDENTIFIER = b"ET12"
HEADER_MAGIC = b"eh00"
HEADER_LENGTH = 32
SEGMENT_ALIGNMENT = 128
TENSOR_ALIGNMENT = 16
SUPPORTED_VERSION = 0


class FormatError(EdgetorchError, ValueError):
    """A file is not a well-formed program container."""


@dataclass
class ExtendedHeader:
    """The header after the flatbuffer's identifier: where the program ends and the segments start.

    Layout (little endian): magic ``eh00``, u32 header length, u64 program size, u64 segment base
    offset, then (from length 32 on) u64 segment data size. ``magic`` and ``length`` are what was read;
    ``to_bytes`` always writes the current ones.
    """

    program_size: int
    segment_base_offset: int
    segment_data_size: int = 0
    magic: bytes = HEADER_MAGIC
    length: int = HEADER_LENGTH

    EXPECTED_MAGIC: ClassVar[bytes] = HEADER_MAGIC
    MINIMUM_LENGTH: ClassVar[int] = 24
    EXPECTED_LENGTH: ClassVar[int] = HEADER_LENGTH
    NUM_HEAD_BYTES: ClassVar[int] = 64
    """Bytes at the start of a file that always hold the identifier and the whole header."""

    def to_bytes(self) -> bytes:
        return HEADER_MAGIC + struct.pack(
            "<IQQQ", HEADER_LENGTH, self.program_size, self.segment_base_offset, self.segment_data_size
        )

    def is_valid(self) -> bool:
        """True when the magic is right and the length covers at least program size and base offset."""
        return self.magic == HEADER_MAGIC and self.length >= self.MINIMUM_LENGTH

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> ExtendedHeader:
        """The fields of a header starting at ``data[0]``, not validated (see ``is_valid``).

        ValueError when ``data`` is shorter than a full header.
        """
        if len(data) < HEADER_LENGTH:
            raise ValueError(f"an extended header needs {HEADER_LENGTH} bytes, found {len(data)}")
        magic = bytes(data[0:4])
        length, size, base = struct.unpack_from("<IQQ", data, 4)
        seg_size = struct.unpack_from("<Q", data, 24)[0] if length > cls.MINIMUM_LENGTH else 0
        return cls(size, base, seg_size, magic, length)

    @classmethod
    def in_file(cls, data: bytes | memoryview) -> ExtendedHeader | None:
        """The header of a ``.pte`` (at bytes 8..), or None when the file has none (an older or plain
        flatbuffer); FormatError when its length field is out of range."""
        if len(data) < 8 + cls.MINIMUM_LENGTH or bytes(data[8:12]) != HEADER_MAGIC:
            return None
        (length,) = struct.unpack_from("<I", data, 12)
        if length < cls.MINIMUM_LENGTH or length > 8 + len(data):
            raise FormatError(f"extended header length {length} is out of range; expected 24..32")
        size, base = struct.unpack_from("<QQ", data, 16)
        seg_size = struct.unpack_from("<Q", data, 32)[0] if length >= 32 and len(data) >= 40 else 0
        return cls(size, base, seg_size, HEADER_MAGIC, length)


@dataclass(frozen=True)
class AlignedSegment:
    """A segment whose start must also be a multiple of its own ``alignment`` (named data that asks for it)."""

    data: bytes | memoryview
    alignment: int

    def __len__(self) -> int:
        return len(self.data)


@dataclass(frozen=True)
class SegmentView:
    """A segment that is a byte range of an earlier segment: listed in the segments table, its bytes written once.

    ExecuTorch's runtime loads every segment by its (offset, size) and does not require segments to be
    disjoint (``PteDataMap::get_data`` and the constant segment's load check only the file's bounds), so
    named data whose bytes equal a constant's can point into the constant segment.
    """

    segment: int
    offset: int
    size: int


def aligned(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


@dataclass
class PteFile:
    """A decoded container: the Program and a view of the bytes its segments live in."""

    program: Program
    header: ExtendedHeader | None
    data: memoryview

    def segment(self, index: int) -> memoryview:
        """The bytes of segment ``index``, checked against the file's length."""
        segments = self.program.segments
        if not 0 <= index < len(segments):
            raise FormatError(f"segment index {index} is out of range; the program has {len(segments)} segments")
        seg = segments[index]
        if self.header is None:
            # ExecuTorch lists one empty segment, and writes no extended header, when every constant is external.
            if seg.size == 0:
                return self.data[:0]
            raise FormatError("the program refers to segments but the file has no extended header")
        start = self.header.segment_base_offset + seg.offset
        if seg.offset < 0 or seg.size < 0 or start + seg.size > len(self.data):
            raise FormatError(
                f"segment {index} spans bytes {start}..{start + seg.size} but the file has only {len(self.data)} bytes; "
                "the file is truncated or corrupt"
            )
        return self.data[start : start + seg.size]


def load_pte(data: bytes | bytearray | memoryview) -> PteFile:
    """Decode a ``.pte`` file; byte payloads stay views of ``data``."""
    view = memoryview(data).cast("B")
    if len(view) < 8:
        raise FormatError(f"expected a .pte file of at least 8 bytes, found {len(view)} bytes")
    if bytes(view[4:8]) != FILE_IDENTIFIER:
        raise FormatError(
            f"expected the identifier {FILE_IDENTIFIER!r} at bytes 4..8, found {bytes(view[4:8])!r}; this is not an ExecuTorch program"
        )
    header = ExtendedHeader.in_file(view)
    if header is not None:
        if header.program_size > len(view) or header.program_size < 40:
            raise FormatError(
                f"header says the program is {header.program_size} bytes but the file has {len(view)}; it is truncated"
            )
        if header.segment_base_offset and header.segment_base_offset > len(view):
            raise FormatError(
                f"segment base offset {header.segment_base_offset} is past the end of the {len(view)}-byte file"
            )
        fb_view = view[: header.program_size]
    else:
        fb_view = view
    try:
        program = decode(fb_view, Program, FILE_IDENTIFIER)
    except FlatbufferError as e:
        raise FormatError(f"the program flatbuffer is malformed: {e}") from None
    if program.version != SUPPORTED_VERSION:
        raise FormatError(
            f"program version {program.version} is not supported; this runtime reads version {SUPPORTED_VERSION}"
        )
    return PteFile(program, header, view)


def pack_aligned(buffers: Sequence[bytes | memoryview], alignment: int) -> tuple[bytes, list[int]]:
    """The buffers back to back, each starting at a multiple of ``alignment`` (no padding after the last, as
    ExecuTorch packs a subsegment); and each one's offset. One copy of the data."""
    pieces: list[bytes | memoryview] = []
    offsets, size = [], 0
    for data in buffers:
        pad = -size % alignment
        pieces.append(bytes(pad))
        size += pad
        offsets.append(size)
        pieces.append(data)
        size += len(data)
    return b"".join(pieces), offsets


def save_pte(
    program: Program,
    segments: Sequence[bytes | memoryview | SegmentView | AlignedSegment] = (),
    segment_alignment: int = SEGMENT_ALIGNMENT,
    *,
    header_without_data: bool = True,
) -> bytes:
    """Encode ``program`` with ``segments`` appended; ``program.segments`` is rewritten to match.

    Each segment starts at a multiple of ``segment_alignment`` (of its least common multiple with an
    :class:`AlignedSegment`'s own alignment) counted from the first segment, which starts at the first
    multiple of ``segment_alignment`` after the program; a :class:`SegmentView` adds no bytes, it names a range
    of an earlier segment. ``header_without_data=False`` leaves the extended header out when the segments hold
    no bytes, as ExecuTorch's serializer does.
    """
    if segment_alignment <= 0:
        raise ValueError(f"segment_alignment must be positive, found {segment_alignment}")
    offsets: list[DataSegment] = []
    end = 0
    for seg in segments:
        if isinstance(seg, SegmentView):
            if not 0 <= seg.segment < len(offsets) or isinstance(segments[seg.segment], SegmentView):
                raise ValueError(f"a segment view must name an earlier stored segment, found index {seg.segment}")
            base_ref = offsets[seg.segment]
            if seg.offset < 0 or seg.size < 0 or seg.offset + seg.size > base_ref.size:
                raise ValueError(
                    f"segment view {seg.offset}..{seg.offset + seg.size} is outside segment {seg.segment} "
                    f"of {base_ref.size} bytes"
                )
            offsets.append(DataSegment(offset=base_ref.offset + seg.offset, size=seg.size))
            continue
        step = math.lcm(segment_alignment, seg.alignment) if isinstance(seg, AlignedSegment) else segment_alignment
        start = aligned(end, step)
        offsets.append(DataSegment(offset=start, size=len(seg)))
        end = start + len(seg)
    program.segments = offsets
    flat = encode(program, FILE_IDENTIFIER)
    if end == 0 and not header_without_data:
        return bytes(flat)
    root = struct.unpack_from("<I", flat, 0)[0]
    program_size = len(flat) + HEADER_LENGTH
    base = aligned(program_size, segment_alignment) if segments else 0
    header = ExtendedHeader(program_size, base, end).to_bytes()
    out = bytearray(struct.pack("<I", root + HEADER_LENGTH) + flat[4:8] + header + flat[8:])
    for seg, ref in zip(segments, offsets):
        if not isinstance(seg, SegmentView):
            out += bytes(base + ref.offset - len(out))
            out += seg.data if isinstance(seg, AlignedSegment) else seg
    return bytes(out)
