"""The ETDump schema (ExecuTorch's ``etdump_schema_flatcc.fbs``) as dataclasses, and its file form.

An ETDump is what a traced runtime writes: one ``RunData`` block per run
(``"Default"`` for loading, ``"Execute"`` for each execution), each a list of
events: profile events (a name, the instruction, start and end ticks), debug
events (a value the instruction produced; tensor data lives in a separate
debug buffer at ``Tensor.offset``) and allocation events. The file is a
size-prefixed flatbuffer with identifier ``ED00``, as ExecuTorch's flatcc
runtime writes it. Field order follows the schema. Torch-free.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from edgetorch.format.flatbuffer import (
    BYTE,
    BYTES,
    FLOAT,
    INT,
    LONG,
    STRING,
    UINT,
    ULONG,
    FlatbufferError,
    Vector,
    decode,
    encode,
    fb,
)
from edgetorch.format.program import Bool, Double, Int, ScalarType  # the same tables as program.fbs

FILE_IDENTIFIER = b"ED00"
# ExecuTorch's runtime writes chain_index -1 (as an unsigned 64-bit number) on program-output debug events.
NO_CHAIN = 2**64 - 1


class ValueType(enum.IntEnum):
    Null = 0
    Int = 1
    Bool = 2
    Float = 3
    Double = 4
    Tensor = 5
    TensorList = 6
    String = 7
    # ExecuTorch's devtools spell the members in capitals (``ValueType.TENSOR``): the same members.
    NULL = 0
    INT = 1
    BOOL = 2
    FLOAT = 3
    DOUBLE = 4
    TENSOR = 5
    TENSOR_LIST = 6
    STRING = 7


@dataclass
class Tensor:
    scalar_type: ScalarType = fb(BYTE, ScalarType.BYTE, ScalarType)
    sizes: list = fb(Vector(LONG))
    strides: list = fb(Vector(LONG))
    offset: int = fb(LONG)  # where the data starts in the debug buffer


@dataclass
class Float:
    float_val: float = fb(FLOAT)


@dataclass
class TensorList:
    tensors: list = fb(Vector(Tensor))


@dataclass
class Value:
    """One logged value: ``val`` says which of the fields holds it; ``output`` marks a program output."""

    val: ValueType = fb(BYTE, ValueType.Null, ValueType)
    tensor: Tensor | None = fb(Tensor)
    tensor_list: TensorList | None = fb(TensorList)
    int_value: Int | None = fb(Int)
    float_value: Float | None = fb(Float)
    double_value: Double | None = fb(Double)
    bool_value: Bool | None = fb(Bool)
    output: Bool | None = fb(Bool)


@dataclass
class DebugEvent:
    chain_index: int = fb(ULONG)
    instruction_id: int = fb(INT, -1)
    debug_entry: Value | None = fb(Value)
    delegate_debug_id_int: int = fb(INT, -1)
    delegate_debug_id_str: str | None = fb(STRING)
    name: str | None = fb(STRING)


@dataclass
class AllocationEvent:
    allocator_id: int = fb(INT)
    allocation_size: int = fb(ULONG)


@dataclass
class ProfileEvent:
    name: str | None = fb(STRING)
    chain_index: int = fb(INT)
    instruction_id: int = fb(INT, -1)
    delegate_debug_id_int: int = fb(INT, -1)
    delegate_debug_id_str: str | None = fb(STRING)
    delegate_debug_metadata: bytes | memoryview | None = fb(BYTES, None)
    start_time: int = fb(ULONG)
    end_time: int = fb(ULONG)


@dataclass
class Event:
    """Exactly one of the three is set."""

    profile_event: ProfileEvent | None = fb(ProfileEvent)
    allocation_event: AllocationEvent | None = fb(AllocationEvent)
    debug_event: DebugEvent | None = fb(DebugEvent)


@dataclass
class Allocator:
    name: str | None = fb(STRING)


@dataclass
class RunData:
    name: str | None = fb(STRING)
    bundled_input_index: int = fb(INT, -1)
    allocators: list = fb(Vector(Allocator))
    events: list = fb(Vector(Event))


@dataclass
class ETDump:
    version: int = fb(UINT)
    run_data: list = fb(Vector(RunData))


def serialize_etdump(etdump: ETDump) -> bytes:
    """The ETDump as ExecuTorch writes it: a size-prefixed flatbuffer with identifier ``ED00``."""
    return encode(etdump, FILE_IDENTIFIER, size_prefixed=True)


def deserialize_etdump(data: bytes | memoryview) -> ETDump:
    """Read an ETDump (size-prefixed, as ExecuTorch writes it; a plain flatbuffer is accepted too)."""
    view = memoryview(data).cast("B")
    if len(view) >= 12 and bytes(view[8:12]) == FILE_IDENTIFIER:
        return decode(view, ETDump, FILE_IDENTIFIER, size_prefixed=True)
    if len(view) >= 8 and bytes(view[4:8]) == FILE_IDENTIFIER:
        return decode(view, ETDump, FILE_IDENTIFIER)
    raise FlatbufferError(
        "not an ETDump: expected the file identifier 'ED00' at byte 8 (or 4); write ETDumps with "
        "ETDumpGen or ExecuTorch's runtime"
    )
