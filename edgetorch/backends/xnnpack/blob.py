"""The XNNPACK delegate blob: an ``XH00`` header, an ``XNNGraph`` flatbuffer, then constant data.

Layout (little-endian): bytes 0-4 zero, 4-8 the magic ``XH00`` (where a bare
flatbuffer keeps its identifier, so a reader can tell the two apart), 8-10 the
header length (30), 10-14 the flatbuffer offset, 14-18 its size, 18-22 the
constant data offset, 22-30 its size. The writer pads the header and the
flatbuffer to 16 bytes so constants stay 16-byte aligned. A blob without the
header is a bare ``XNNGraph`` flatbuffer. Torch-free.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from edgetorch.backends.xnnpack.schema import (
    FILE_IDENTIFIER,
    LEGACY_FILE_IDENTIFIER,
    NAMED_CONSTANT_OFFSET,
    XNNGraph,
)
from edgetorch.errors import EdgetorchError
from edgetorch.format.flatbuffer import FlatbufferError, decode, encode

HEADER_MAGIC = b"XH00"
HEADER_LENGTH = 30
CONSTANT_ALIGNMENT = 16
_HEADER = struct.Struct("<4s4sHIIIQ")


class BlobError(EdgetorchError, ValueError):
    """The bytes are not a well-formed XNNPACK delegate blob."""


@dataclass
class XNNHeader:
    """The ``XH00`` header, with ExecuTorch's API: ``from_bytes`` parses exactly a header's bytes (magic and
    length checked, ValueError otherwise), ``is_valid`` checks the offsets, ``to_bytes`` refuses an invalid
    header. ``read`` finds the header at the start of a whole blob, as a loader needs."""

    MAGIC_OFFSET: ClassVar[slice] = slice(4, 8)
    HEADER_SIZE_OFFSET: ClassVar[slice] = slice(8, 10)
    FLATBUFFER_OFFSET_OFFSET: ClassVar[slice] = slice(10, 14)
    FLATBUFFER_SIZE_OFFSET: ClassVar[slice] = slice(14, 18)
    CONSTANT_DATA_OFFSET_OFFSET: ClassVar[slice] = slice(18, 22)
    CONSTANT_DATA_SIZE_OFFSET: ClassVar[slice] = slice(22, 30)
    EXPECTED_MAGIC: ClassVar[bytes] = HEADER_MAGIC
    EXPECTED_LENGTH: ClassVar[int] = HEADER_LENGTH

    flatbuffer_offset: int
    flatbuffer_size: int
    constant_data_offset: int
    constant_data_size: int

    def is_valid(self) -> bool:
        """A non-empty flatbuffer, and constant data (of non-negative size) that starts after it."""
        after_flatbuffer = self.constant_data_offset >= self.flatbuffer_offset + self.flatbuffer_size
        return self.flatbuffer_size > 0 and after_flatbuffer and self.constant_data_size >= 0

    def to_bytes(self) -> bytes:
        if not self.is_valid():
            raise BlobError(
                f"Invalid XNNHeader: header failed is_valid() check ({self}); expected a non-empty flatbuffer "
                "and constant data starting after it"
            )
        return _HEADER.pack(
            b"\0\0\0\0",
            HEADER_MAGIC,
            HEADER_LENGTH,
            self.flatbuffer_offset,
            self.flatbuffer_size,
            self.constant_data_offset,
            self.constant_data_size,
        )

    @staticmethod
    def from_bytes(data: bytes | memoryview) -> XNNHeader:
        """The header ``data`` holds: at most ``EXPECTED_LENGTH`` bytes, as many as its length field says."""
        if len(data) > HEADER_LENGTH:
            raise BlobError(
                f"Invalid XNNHeader: expected no more than {HEADER_LENGTH} bytes, got {len(data)}; "
                "pass the header's bytes only (XNNHeader.read finds it at the start of a blob)"
            )
        magic = bytes(data[XNNHeader.MAGIC_OFFSET])
        if magic != HEADER_MAGIC:
            raise BlobError(f"Invalid XNNHeader: invalid magic bytes {magic!r}, expected {HEADER_MAGIC!r}")
        length = int.from_bytes(bytes(data[XNNHeader.HEADER_SIZE_OFFSET]), "little")
        if length != len(data):
            raise BlobError(
                f"Invalid XNNHeader: Invalid parsed length: data given was {len(data)} bytes, "
                f"parsed length was {length} bytes"
            )
        _, _, _, fb_off, fb_size, const_off, const_size = _HEADER.unpack_from(data, 0)
        return XNNHeader(fb_off, fb_size, const_off, const_size)

    @staticmethod
    def read(data: bytes | memoryview) -> XNNHeader | None:
        """The header at the start of the blob ``data``, checked against its size; None for a bare flatbuffer."""
        if len(data) < 8 or bytes(data[4:8]) != HEADER_MAGIC:
            return None
        if len(data) < HEADER_LENGTH:
            raise BlobError(f"expected a {HEADER_LENGTH}-byte XNNPACK header, the blob has only {len(data)} bytes")
        _, _, length, fb_off, fb_size, const_off, const_size = _HEADER.unpack_from(data, 0)
        if length < HEADER_LENGTH:
            raise BlobError(f"XNNPACK header length is {length}; expected at least {HEADER_LENGTH}")
        header = XNNHeader(fb_off, fb_size, const_off, const_size)
        header.check(len(data))
        return header

    def check(self, blob_size: int) -> None:
        if self.flatbuffer_size == 0 or self.flatbuffer_offset + self.flatbuffer_size > blob_size:
            raise BlobError(
                f"XNNPACK header puts the flatbuffer at {self.flatbuffer_offset}+{self.flatbuffer_size} "
                f"but the blob has {blob_size} bytes; the blob is truncated or corrupt"
            )
        if self.constant_data_offset + self.constant_data_size > blob_size:
            raise BlobError(
                f"XNNPACK header puts constant data at {self.constant_data_offset}+{self.constant_data_size} "
                f"but the blob has {blob_size} bytes; the blob is truncated or corrupt"
            )


@dataclass
class XnnpackBlob:
    """A decoded delegate blob: the graph and a view of the constant data that follows it."""

    graph: XNNGraph
    constant_data: memoryview

    def constant(self, index: int, named_data: Mapping[str, memoryview]) -> memoryview:
        """The bytes of constant ``index``: from the blob, the named data store, or a legacy in-graph buffer."""
        entries = self.graph.constant_data
        if entries:
            if not 0 < index < len(entries):
                raise BlobError(f"constant index {index} is out of range 1..{len(entries) - 1}")
            entry = entries[index]
            if entry.named_key:
                return _named(entry.named_key, entry.size, named_data)
            end = entry.offset + entry.size
            if entry.offset == NAMED_CONSTANT_OFFSET or end > len(self.constant_data):
                raise BlobError(
                    f"constant {index} spans bytes {entry.offset}..{end} of constant data that has "
                    f"{len(self.constant_data)} bytes; the blob is truncated or corrupt"
                )
            return self.constant_data[entry.offset : end]
        legacy = self.graph.constant_buffer or []
        if not 0 < index < len(legacy) or legacy[index].storage is None:
            raise BlobError(f"constant index {index} refers to no constant data in this blob")
        return legacy[index].storage


def _named(key: str, size: int, named_data: Mapping[str, memoryview]) -> memoryview:
    data = named_data.get(key)
    if data is None:
        raise BlobError(
            f"the blob refers to named constant {key!r}, which is in neither the program's named data nor a data "
            "file loaded with it; pass the .ptd written with the program: Runtime.get().load_program(pte, data_files=[ptd])"
        )
    if len(data) < size:
        raise BlobError(f"named constant {key!r} has {len(data)} bytes; the blob expects {size}")
    return memoryview(data)[:size]


def parse_blob(data: bytes | memoryview) -> XnnpackBlob:
    """Decode a delegate blob; the constant data stays a view of ``data``."""
    view = memoryview(data).cast("B")
    header = XNNHeader.read(view)
    if header is None:
        fb_view, consts = view, view[:0]
    else:
        fb_view = view[header.flatbuffer_offset : header.flatbuffer_offset + header.flatbuffer_size]
        consts = view[header.constant_data_offset : header.constant_data_offset + header.constant_data_size]
    ident = bytes(fb_view[4:8])
    if ident not in (FILE_IDENTIFIER, LEGACY_FILE_IDENTIFIER):
        raise BlobError(
            f"expected the XNNPACK graph identifier {FILE_IDENTIFIER!r} (or {LEGACY_FILE_IDENTIFIER!r}), "
            f"found {ident!r}; this is not an XNNPACK delegate blob"
        )
    try:
        graph = decode(fb_view, XNNGraph)
    except FlatbufferError as e:
        raise BlobError(f"the XNNGraph flatbuffer is malformed: {e}") from None
    return XnnpackBlob(graph, consts)


def _pad(n: int) -> int:
    return -n % CONSTANT_ALIGNMENT


def build_blob(graph: XNNGraph, constant_data: bytes | memoryview = b"") -> bytes:
    """Serialize ``graph`` and ``constant_data`` into a blob ExecuTorch's XnnpackBackend can load."""
    flat = encode(graph, FILE_IDENTIFIER)
    fb_offset = HEADER_LENGTH + _pad(HEADER_LENGTH)
    const_offset = fb_offset + len(flat) + _pad(len(flat))
    header = XNNHeader(fb_offset, len(flat), const_offset, len(constant_data)).to_bytes()
    return b"".join([header, bytes(_pad(HEADER_LENGTH)), flat, bytes(_pad(len(flat))), bytes(constant_data)])
