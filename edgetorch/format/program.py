"""The ExecuTorch Program schema (``program.fbs``, ``scalar_type.fbs``) as dataclasses.

Field order follows the schema, which fixes each field's vtable slot. Torch-free.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from edgetorch.format.flatbuffer import (
    BOOL,
    BYTE,
    BYTES,
    DOUBLE,
    INT,
    LONG,
    STRING,
    UBYTE,
    UINT,
    ULONG,
    Union,
    Vector,
    fb,
)  # fmt: skip


class ScalarType(enum.IntEnum):
    BYTE = 0
    CHAR = 1
    SHORT = 2
    INT = 3
    LONG = 4
    HALF = 5
    FLOAT = 6
    DOUBLE = 7
    # Complex values: ExecuTorch's schema comments these codes out, but its Python ScalarType uses them.
    COMPLEX32 = 8
    COMPLEX64 = 9
    COMPLEX128 = 10
    BOOL = 11
    QINT8 = 12
    QUINT8 = 13
    QINT32 = 14
    BFLOAT16 = 15
    QUINT4X2 = 16
    QUINT2X4 = 17
    BITS16 = 22
    FLOAT8E5M2 = 23
    FLOAT8E4M3FN = 24
    FLOAT8E5M2FNUZ = 25
    FLOAT8E4M3FNUZ = 26
    UINT16 = 27
    UINT32 = 28
    UINT64 = 29


class TensorShapeDynamism(enum.IntEnum):
    STATIC = 0
    DYNAMIC_BOUND = 1
    DYNAMIC_UNBOUND = 2


class TensorDataLocation(enum.IntEnum):
    SEGMENT = 0
    EXTERNAL = 1


class DeviceType(enum.IntEnum):
    CPU = 0
    CUDA = 1


class DataLocation(enum.IntEnum):
    INLINE = 0
    SEGMENT = 1


@dataclass
class ContainerMetadata:
    encoded_inp_str: str | None = fb(STRING)
    encoded_out_str: str | None = fb(STRING)


@dataclass
class Null:
    pass


@dataclass
class AllocationDetails:
    memory_id: int = fb(UINT)
    memory_offset_low: int = fb(UINT)
    memory_offset_high: int = fb(UINT)

    @property
    def memory_offset(self) -> int:
        return self.memory_offset_low | (self.memory_offset_high << 32)


@dataclass
class ExtraTensorInfo:
    mutable_data_segments_idx: int = fb(ULONG)
    fully_qualified_name: str | None = fb(STRING)
    location: TensorDataLocation = fb(BYTE, TensorDataLocation.SEGMENT, TensorDataLocation)
    device_type: DeviceType = fb(BYTE, DeviceType.CPU, DeviceType)
    device_index: int = fb(BYTE)


@dataclass
class Tensor:
    scalar_type: ScalarType = fb(BYTE, ScalarType.BYTE, ScalarType)
    storage_offset: int = fb(INT)
    sizes: list = fb(Vector(INT))
    dim_order: list = fb(Vector(UBYTE))
    requires_grad: bool = fb(BOOL)
    data_buffer_idx: int = fb(UINT)
    allocation_info: AllocationDetails | None = fb(AllocationDetails)
    layout: int = fb(BYTE)
    shape_dynamism: TensorShapeDynamism = fb(BYTE, TensorShapeDynamism.STATIC, TensorShapeDynamism)
    extra_tensor_info: ExtraTensorInfo | None = fb(ExtraTensorInfo)


@dataclass
class Int:
    int_val: int = fb(LONG)


@dataclass
class Bool:
    bool_val: bool = fb(BOOL)


@dataclass
class Double:
    double_val: float = fb(DOUBLE)


@dataclass
class String:
    string_val: str | None = fb(STRING)


@dataclass
class IntList:
    """Items are indices of Int values, so a list can hold symbolic sizes."""

    items: list = fb(Vector(LONG))


@dataclass
class DoubleList:
    items: list = fb(Vector(DOUBLE))


@dataclass
class BoolList:
    items: list = fb(Vector(BOOL))


@dataclass
class TensorList:
    """Items are indices of Tensor values."""

    items: list = fb(Vector(INT))


@dataclass
class OptionalTensorList:
    """Items are indices of Tensor or Null values (-1 also means None)."""

    items: list = fb(Vector(INT))


KERNEL_TYPES = Union(
    (Null, Int, Bool, Double, Tensor, String, IntList, DoubleList, BoolList, TensorList, OptionalTensorList)
)


@dataclass
class EValue:
    val: object = fb(KERNEL_TYPES)


@dataclass
class Operator:
    name: str | None = fb(STRING)
    overload: str | None = fb(STRING)


@dataclass
class KernelCall:
    op_index: int = fb(INT)
    args: list = fb(Vector(INT))


@dataclass
class DelegateCall:
    delegate_index: int = fb(INT)
    args: list = fb(Vector(INT))


@dataclass
class MoveCall:
    move_from: int = fb(INT)
    move_to: int = fb(INT)


@dataclass
class JumpFalseCall:
    cond_value_index: int = fb(INT)
    destination_instruction: int = fb(INT)


@dataclass
class FreeCall:
    value_index: int = fb(INT)


INSTRUCTION_ARGUMENTS = Union((KernelCall, DelegateCall, MoveCall, JumpFalseCall, FreeCall))


@dataclass
class Instruction:
    instr_args: object = fb(INSTRUCTION_ARGUMENTS)


@dataclass
class Frame:
    filename: str | None = fb(STRING)
    lineno: int = fb(INT)
    name: str | None = fb(STRING)
    context: str | None = fb(STRING)


@dataclass
class FrameList:
    items: list = fb(Vector(Frame))


@dataclass
class BackendDelegateDataReference:
    location: DataLocation = fb(BYTE, DataLocation.INLINE, DataLocation)
    index: int = fb(UINT)


@dataclass
class CompileSpec:
    key: str | None = fb(STRING)
    value: bytes = fb(BYTES)


@dataclass
class BackendDelegate:
    id: str | None = fb(STRING)
    processed: BackendDelegateDataReference | None = fb(BackendDelegateDataReference)
    compile_specs: list = fb(Vector(CompileSpec))


@dataclass
class Chain:
    inputs: list = fb(Vector(INT))
    outputs: list = fb(Vector(INT))
    instructions: list = fb(Vector(Instruction))
    stacktrace: list | None = fb(Vector(FrameList), default=None)


@dataclass
class NonConstBufferDevice:
    buffer_idx: int = fb(INT)
    device_type: DeviceType = fb(BYTE, DeviceType.CPU, DeviceType)
    device_index: int = fb(BYTE)


@dataclass
class ExecutionPlan:
    name: str | None = fb(STRING)
    container_meta_type: ContainerMetadata | None = fb(ContainerMetadata)
    values: list = fb(Vector(EValue))
    inputs: list = fb(Vector(INT))
    outputs: list = fb(Vector(INT))
    chains: list = fb(Vector(Chain))
    operators: list = fb(Vector(Operator))
    delegates: list = fb(Vector(BackendDelegate))
    non_const_buffer_sizes: list = fb(Vector(LONG))
    non_const_buffer_device: list | None = fb(Vector(NonConstBufferDevice), default=None)


@dataclass
class Buffer:
    storage: bytes = fb(Vector(UBYTE, align=16, blob=True))


@dataclass
class BackendDelegateInlineData:
    data: bytes = fb(Vector(UBYTE, align=16, blob=True))


@dataclass
class DataSegment:
    offset: int = fb(ULONG)
    size: int = fb(ULONG)


@dataclass
class SubsegmentOffsets:
    segment_index: int = fb(UINT)
    offsets: list = fb(Vector(ULONG))


@dataclass
class NamedData:
    key: str | None = fb(STRING)
    segment_index: int = fb(UINT)


@dataclass
class Program:
    version: int = fb(UINT)
    execution_plan: list = fb(Vector(ExecutionPlan))
    constant_buffer: list = fb(Vector(Buffer))
    backend_delegate_data: list = fb(Vector(BackendDelegateInlineData))
    segments: list = fb(Vector(DataSegment))
    constant_segment: SubsegmentOffsets | None = fb(SubsegmentOffsets)
    mutable_data_segments: list | None = fb(Vector(SubsegmentOffsets), default=None)
    named_data: list | None = fb(Vector(NamedData), default=None)
