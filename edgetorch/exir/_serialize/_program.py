"""A Program with its data held inline <-> ``.pte`` bytes with that data in segments (ExecuTorch's helpers).

In a :class:`PTEFile` the Program keeps its constants in ``constant_buffer`` (index 0 the empty
placeholder), every delegate blob in ``backend_delegate_data``, mutable buffers' initial states in
``mutable_data`` and named data in ``named_data``. Serializing moves constants, initial states and
named data into segments (and delegate blobs too, with ``extract_delegate_segments``);
deserializing moves them back. Imports only the format code and the named data store.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
from dataclasses import dataclass
from typing import Any

from edgetorch.exir.named_data_store import DataEntry, NamedDataStoreOutput
from edgetorch.format.flatbuffer import Union
from edgetorch.format.program import (
    BackendDelegateDataReference,
    BackendDelegateInlineData,
    Buffer,
    DataLocation,
    NamedData,
    Program,
    SubsegmentOffsets,
)
from edgetorch.format.pte import AlignedSegment, ExtendedHeader, FormatError, load_pte, pack_aligned, save_pte

__all__ = ["PTEFile", "deserialize_pte_binary", "serialize_pte_binary"]  # and ExecuTorch's private helpers below


@dataclass
class PTEFile:
    """A program and the data that goes in segments beside it."""

    program: Program
    mutable_data: list[Buffer] | None = None
    named_data: NamedDataStoreOutput | None = None


def serialize_pte_binary(
    pte_file: PTEFile,
    *,
    extract_delegate_segments: bool = False,
    segment_alignment: int = 128,
    constant_tensor_alignment: int | None = None,
    delegate_alignment: int | None = None,
) -> bytes:
    """The ``.pte`` bytes of ``pte_file`` (its Program is not changed)."""
    alignment = constant_tensor_alignment or 16
    for name, value in (("constant_tensor_alignment", alignment), ("delegate_alignment", delegate_alignment)):
        if value is not None and (value <= 0 or value & (value - 1)):
            raise ValueError(f"{name} must be a power of two, found {value}")
    source = pte_file.program
    blobs = [b.storage for b in source.constant_buffer] + [d.data for d in source.backend_delegate_data]
    program = copy.deepcopy(source, memo={id(blob): blob for blob in blobs})  # the structure, not the data
    segments: list[bytes | AlignedSegment] = []
    if program.constant_buffer:
        data, offsets = pack_aligned([b.storage for b in program.constant_buffer], alignment)
        program.constant_segment = SubsegmentOffsets(segment_index=0, offsets=offsets)
        program.constant_buffer = []
        segments.append(data)
    if pte_file.mutable_data is not None:
        data, offsets = pack_aligned([b.storage for b in pte_file.mutable_data], alignment)
        if data:
            program.mutable_data_segments = [SubsegmentOffsets(segment_index=len(segments), offsets=offsets)]
            segments.append(data)
    if extract_delegate_segments:
        _extract_delegates(program, segments)
    if pte_file.named_data is not None and pte_file.named_data.pte_data:
        if program.named_data:
            raise ValueError("the Program already names data; give the named data either in it or in PTEFile")
        named, where = [], {}
        for key, entry in pte_file.named_data.pte_data.items():
            if entry.buffer_index not in where:
                where[entry.buffer_index] = len(segments)
                blob = bytes(pte_file.named_data.buffers[entry.buffer_index])
                segments.append(AlignedSegment(blob, entry.alignment))
            named.append(NamedData(key=key, segment_index=where[entry.buffer_index]))
        program.named_data = named
    return save_pte(program, segments, segment_alignment, header_without_data=False)


def _extract_delegates(program: Program, segments: list[bytes | AlignedSegment]) -> None:
    """Move every non-empty inline delegate blob into a segment (identical blobs share one); an empty blob
    stays inline. ValueError for a delegate that is not inline, or an inline blob no delegate uses."""
    inline = program.backend_delegate_data
    kept: list[BackendDelegateInlineData] = []
    used: set[int] = set()
    segment_of: dict[bytes, int] = {}
    for plan in program.execution_plan:
        for delegate in plan.delegates:
            ref = delegate.processed
            if ref.location != DataLocation.INLINE:
                raise ValueError(f"delegate {delegate.id!r} is not inline ({ref}); the Program must hold its blobs")
            if not 0 <= ref.index < len(inline):
                raise ValueError(
                    f"delegate {delegate.id!r} names inline blob {ref.index}, but the Program has {len(inline)}"
                )
            used.add(ref.index)
            blob = bytes(inline[ref.index].data)
            if blob:
                if blob not in segment_of:
                    segment_of[blob] = len(segments)
                    segments.append(blob)
                delegate.processed = BackendDelegateDataReference(DataLocation.SEGMENT, segment_of[blob])
            else:
                delegate.processed = BackendDelegateDataReference(DataLocation.INLINE, len(kept))
                kept.append(inline[ref.index])
    unused = sorted(set(range(len(inline))) - used)
    if unused:
        raise ValueError(f"inline delegate blobs {unused} are used by no delegate; remove them from the Program")
    program.backend_delegate_data = kept


def deserialize_pte_binary(program_data: bytes) -> PTEFile:
    """The :class:`PTEFile` of ``.pte`` bytes, segment data moved back into the Program; FormatError if malformed."""
    pte = load_pte(program_data)
    program = pte.program
    if program.constant_segment is not None and program.segments:
        data = bytes(pte.segment(program.constant_segment.segment_index))
        offsets = program.constant_segment.offsets
        ends = [*offsets[1:], len(data)]
        program.constant_buffer = [Buffer(storage=data[start:end]) for start, end in zip(offsets, ends)]
        program.constant_segment = SubsegmentOffsets(segment_index=0, offsets=[])
    for plan in program.execution_plan:
        for delegate in plan.delegates:
            if delegate.processed.location == DataLocation.SEGMENT:
                blob = bytes(pte.segment(delegate.processed.index))
                delegate.processed.location = DataLocation.INLINE
                delegate.processed.index = len(program.backend_delegate_data)
                program.backend_delegate_data.append(BackendDelegateInlineData(data=blob))
    mutable = None
    if program.mutable_data_segments:
        segment = program.mutable_data_segments[0]
        data = bytes(pte.segment(segment.segment_index))
        ends = [*segment.offsets[1:], len(data)]
        mutable = [Buffer(storage=data[start:end]) for start, end in zip(segment.offsets, ends)]
        program.mutable_data_segments = None
    named = None
    if program.named_data:
        named = NamedDataStoreOutput()
        buffer_of: dict[int, int] = {}
        for entry in program.named_data:
            if not 0 <= entry.segment_index < len(program.segments):
                raise FormatError(f"named data {entry.key!r} names segment {entry.segment_index}, which does not exist")
            if entry.segment_index not in buffer_of:  # keys sharing a segment share a buffer
                buffer_of[entry.segment_index] = len(named.buffers)
                named.buffers.append(bytes(pte.segment(entry.segment_index)))
            named.pte_data[entry.key] = DataEntry(buffer_of[entry.segment_index], 1)
        program.named_data = []
    program.segments = []
    _own_bytes(program)  # decoded byte vectors are views of the file: the Program gets its own copies
    return PTEFile(program, mutable, named)


def _own_bytes(value: Any) -> None:
    """Replace every memoryview inside a decoded schema object with bytes, in place."""
    if isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, memoryview):
                value[i] = bytes(item)
            else:
                _own_bytes(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if isinstance(item, memoryview):
                setattr(value, f.name, bytes(item))
            elif isinstance(item, list) or dataclasses.is_dataclass(item):
                _own_bytes(item)


_ExtendedHeader = ExtendedHeader


def _get_extended_header(program_data: bytes) -> ExtendedHeader | None:
    """The extended header of ``.pte`` bytes if it is there and well-formed, else None."""
    try:
        header = ExtendedHeader.from_bytes(program_data[8:])
    except ValueError:
        return None
    return header if header.is_valid() else None


def _program_to_json(program: Program) -> str:
    """A JSON text of every field of ``program``, for comparing programs (bytes as lists of ints, enums as
    ints, each union value with a ``<field>_type`` entry naming its member)."""
    return json.dumps(_plain(program))


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            out[f.name] = _plain(item)
            if isinstance(f.metadata.get("fb"), Union) and item is not None:
                out[f"{f.name}_type"] = type(item).__name__
        return out
    if isinstance(value, bytes | bytearray | memoryview):
        return list(bytes(value))
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    return value
