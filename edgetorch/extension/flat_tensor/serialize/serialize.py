"""``FlatTensorSerializer`` and ``FlatTensorHeader``, with ExecuTorch's names, over ``edgetorch.format.ptd``.

The serializer is ExecuTorch's ``DataSerializer`` for ``.ptd`` files: ``serialize`` writes a
``DataPayload`` (unique buffers; per key, which buffer, its alignment, its ``TensorLayout``) with one
segment per buffer a key uses, each segment aligned to the lcm of the config's segment alignment and
the entry's own; ``deserialize`` reads it back into a ``DataPayload`` (alignment is not stored: 1),
refusing a file whose FlatTensor version is newer than ``_FLAT_TENSOR_VERSION``. ``serialize`` also
takes a plain mapping key -> bytes or (bytes, TensorLayout); ``read_named_data`` returns key ->
(bytes, TensorLayout or None). ``_deserialize_to_flat_tensor`` reads the FlatTensor table from the
bytes up to the end of the flatbuffer. The header is the ``FH01`` extended header that follows the
flatbuffer's root offset and identifier. Torch-free (``DataPayload`` is imported when used).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from edgetorch.format.flatbuffer import FlatbufferError, decode, encode
from edgetorch.format.program import DataSegment
from edgetorch.format.ptd import (
    FILE_IDENTIFIER,
    HEADER_LENGTH,
    HEADER_MAGIC,
    SEGMENT_ALIGNMENT,
    FlatTensor,
    NamedData,
    TensorLayout,
    load_ptd,
    save_ptd,
)
from edgetorch.format.pte import FormatError, aligned

if TYPE_CHECKING:
    from edgetorch.exir._serialize.data_serializer import DataPayload
    from edgetorch.exir.named_data_store import NamedDataStoreOutput

__all__ = ["FlatTensorConfig", "FlatTensorHeader", "FlatTensorSerializer"]

# The FlatTensor table version this writer writes and the newest this reader reads.
_FLAT_TENSOR_VERSION: int = 0
# The flatbuffer (after the extended header) starts at a multiple of this.
_FLATBUFFER_ALIGNMENT: int = 16

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


def _deserialize_to_flat_tensor(flatbuffer: bytes | bytearray | memoryview) -> FlatTensor:
    """The FlatTensor table of a ``.ptd``'s leading bytes (the file up to the end of its flatbuffer, or all of it)."""
    view = memoryview(flatbuffer).cast("B")
    if len(view) < 8 or bytes(view[4:8]) != FILE_IDENTIFIER:
        raise FormatError(
            f"expected a FlatTensor flatbuffer with identifier {FILE_IDENTIFIER!r} at bytes 4..8; "
            f"found {bytes(view[4:8])!r}"
        )
    try:
        return decode(view, FlatTensor, FILE_IDENTIFIER)
    except FlatbufferError as e:
        raise FormatError(f"the FlatTensor flatbuffer is malformed: {e}") from None


def _write(segments: list[tuple[bytes, int]], named: list[NamedData], segment_alignment: int) -> bytes:
    """A ``.ptd``: ``segments`` as (bytes, alignment), each at a multiple of its alignment from the segment base."""
    table, blob = [], bytearray()
    for data, alignment in segments:
        blob += bytes(aligned(len(blob), alignment) - len(blob))
        table.append(DataSegment(offset=len(blob), size=len(data)))
        blob += data
    flat = encode(FlatTensor(version=_FLAT_TENSOR_VERSION, segments=table, named_data=named), FILE_IDENTIFIER)
    header_length = aligned(HEADER_LENGTH, _FLATBUFFER_ALIGNMENT)
    base = aligned(len(flat) + header_length, segment_alignment)
    header = FlatTensorHeader(header_length, len(flat), base, len(blob)).to_bytes()
    root = struct.unpack_from("<I", flat, 0)[0]
    out = bytearray(struct.pack("<I", root + header_length) + flat[4:8])
    out += header + bytes(header_length - len(header)) + flat[8:]
    out += bytes(base - len(out))
    return bytes(out + blob)


def _check_alignment(alignment: int, what: str) -> None:
    if alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"{what} must be a power of two; found {alignment}")


class FlatTensorSerializer:
    """Writes and reads ``.ptd`` files of named data (ExecuTorch's ``DataSerializer`` for FlatTensor)."""

    def __init__(self, config: FlatTensorConfig | None = None) -> None:
        self.config = config if config is not None else FlatTensorConfig()

    def serialize(self, data: DataPayload | Mapping[str, Entry]) -> Any:
        """The ``.ptd`` of ``data``: a ``DataPayload`` (returned as a ``Cord``), or key -> bytes or
        (bytes, TensorLayout) (returned as bytes; identical blobs share one segment)."""
        if isinstance(data, Mapping):
            entries = {key: value if isinstance(value, tuple) else (value, None) for key, value in data.items()}
            return save_ptd(entries, self.config.segment_alignment)
        from edgetorch.exir._serialize._cord import Cord

        base_alignment = self.config.segment_alignment
        _check_alignment(base_alignment, "FlatTensorConfig.segment_alignment")
        segment_of: dict[int, int] = {}
        segments: list[tuple[bytes, int]] = []
        named: list[NamedData] = []
        for key, entry in data.named_data.items():
            if not 0 <= entry.buffer_index < len(data.buffers):
                raise IndexError(
                    f"named data {key!r}: buffer_index {entry.buffer_index} is out of range; "
                    f"the payload has {len(data.buffers)} buffers"
                )
            if entry.buffer_index not in segment_of:
                segment_of[entry.buffer_index] = len(segments)
                alignment = math.lcm(base_alignment, entry.alignment or 1)
                segments.append((bytes(Cord(data.buffers[entry.buffer_index])), alignment))
            named.append(
                NamedData(key=key, segment_index=segment_of[entry.buffer_index], tensor_layout=entry.tensor_layout)
            )
        return Cord(_write(segments, named, base_alignment))

    def deserialize(self, blob: Any) -> DataPayload:
        """The ``DataPayload`` of a ``.ptd`` (bytes or a ``Cord``): one buffer per segment, alignment 1."""
        from edgetorch.exir._serialize.data_serializer import DataEntry, DataPayload

        ptd = load_ptd(bytes(blob))
        version = ptd.flat_tensor.version
        if version > _FLAT_TENSOR_VERSION:
            raise NotImplementedError(
                f"this .ptd's FlatTensor version is {version}; this reader reads versions up to "
                f"{_FLAT_TENSOR_VERSION}: write it with a matching edgetorch/ExecuTorch"
            )
        buffers = [bytes(ptd.segment(i)) for i in range(len(ptd.flat_tensor.segments))]
        named = {
            nd.key: DataEntry(buffer_index=nd.segment_index, alignment=1, tensor_layout=nd.tensor_layout)
            for nd in ptd.flat_tensor.named_data
        }
        return DataPayload(buffers=buffers, named_data=named)

    def deserialize_to_named_data_store_output(self, blob: bytes, name: str) -> NamedDataStoreOutput:
        """The ``.ptd`` as a named-data store's output whose external data is tagged ``name``."""
        from edgetorch.exir.named_data_store import NamedDataStoreOutput

        payload = self.deserialize(blob)
        return NamedDataStoreOutput(
            buffers=list(payload.buffers), pte_data={}, external_data={name: payload.named_data}
        )

    def read_named_data(self, blob: bytes) -> dict[str, tuple[bytes, TensorLayout | None]]:
        """Key -> (bytes, TensorLayout or None) of a ``.ptd``."""
        ptd = load_ptd(blob)
        return {nd.key: (bytes(ptd.segment(nd.segment_index)), nd.tensor_layout) for nd in ptd.flat_tensor.named_data}
