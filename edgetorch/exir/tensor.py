"""TensorSpec: what memory planning and emission know about one tensor value, and the dtype table.

A TensorSpec holds a tensor's dtype, dim order, its shape (an upper bound when
dynamic), whether it is a constant, its lifetime and its planned place
(``mem_id``, ``mem_offset``). ExecuTorch keeps the same in ``exir/tensor.py``.
May import torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import guard_or_false, guard_or_true

from edgetorch.errors import EdgetorchError
from edgetorch.format.program import (
    AllocationDetails,
    DeviceType,
    ExtraTensorInfo,
    ScalarType,
    Tensor,
    TensorShapeDynamism,
)

DTYPE_TO_SCALAR: dict[torch.dtype, ScalarType] = {
    torch.uint8: ScalarType.BYTE,
    torch.int8: ScalarType.CHAR,
    torch.int16: ScalarType.SHORT,
    torch.int32: ScalarType.INT,
    torch.int64: ScalarType.LONG,
    torch.float16: ScalarType.HALF,
    torch.float32: ScalarType.FLOAT,
    torch.float64: ScalarType.DOUBLE,
    torch.complex32: ScalarType.COMPLEX32,
    torch.complex64: ScalarType.COMPLEX64,
    torch.complex128: ScalarType.COMPLEX128,
    torch.bool: ScalarType.BOOL,
    torch.qint8: ScalarType.QINT8,
    torch.quint8: ScalarType.QUINT8,
    torch.qint32: ScalarType.QINT32,
    torch.bfloat16: ScalarType.BFLOAT16,
    torch.quint4x2: ScalarType.QUINT4X2,
    torch.uint16: ScalarType.UINT16,
    torch.uint32: ScalarType.UINT32,
    torch.uint64: ScalarType.UINT64,
    torch.float8_e5m2: ScalarType.FLOAT8E5M2,
    torch.float8_e4m3fn: ScalarType.FLOAT8E4M3FN,
}

SCALAR_TO_DTYPE: dict[ScalarType, torch.dtype] = {code: dtype for dtype, code in DTYPE_TO_SCALAR.items()}

SymDim = Any  # an int or a torch.SymInt


class AddressSpaceOverflowException(EdgetorchError, ValueError):
    """A planned offset does not fit the schema's 64-bit (low, high) pair."""


@dataclass(eq=False)
class TensorSpec:
    """What the planner and the emitter know about one tensor value (compared by identity)."""

    dtype: torch.dtype
    sym_shape: tuple[SymDim, ...] = ()
    dim_order: tuple[int, ...] = ()
    requires_grad: bool = False
    name: str = ""
    shape: tuple[int, ...] | None = None
    const: bool = False
    storage: torch.Tensor | None = None
    lifetime: list = field(default_factory=lambda: [None, None])
    mem_id: int | None = None
    mem_offset: int | None = None
    mem_obj_id: int | None = None
    """Which shared memory object of its arena the planner put the tensor in (tensors with the same id overlap)."""
    alignment: int = 16
    """The alignment ``allocated_memory`` rounds to; the planner sets it with ``realign``."""
    storage_base: TensorSpec | None = None
    """The spec whose bytes this one reuses (a ``memory.view``); such specs are not planned themselves."""
    storage_base_offset: int = 0
    """Where in ``storage_base``'s bytes this one starts."""
    dynamism_override: TensorShapeDynamism | None = None
    """A dynamism a pass set explicitly (``spec.shape_dynamism = ...``); None: derived from the shape."""
    device: DeviceType = DeviceType.CPU
    """Where the tensor lives at run time; only ``PropagateDevicePass`` sets another (a device delegate's I/O)."""
    device_index: int = 0

    def __post_init__(self) -> None:
        # ExecuTorch's keyword form TensorSpec(dtype=..., shape=[...]): a static, contiguous tensor.
        if not self.sym_shape and self.shape:
            self.sym_shape = tuple(self.shape)
        if self.shape is not None and not isinstance(self.shape, tuple):
            self.shape = tuple(self.shape)
        if not self.dim_order and self.sym_shape:
            self.dim_order = tuple(range(len(self.sym_shape)))

    @classmethod
    def from_val(cls, val: torch.Tensor, name: str = "") -> TensorSpec:
        return cls(val.dtype, tuple(val.shape), _dim_order(val), bool(val.requires_grad), name)

    @classmethod
    def from_tensor(cls, tensor: torch.Tensor, const: bool = False) -> TensorSpec:
        """The spec of a concrete tensor; a constant keeps a contiguous copy of its data as ``storage``."""
        if const:
            tensor = tensor.contiguous()
        spec = cls(tensor.dtype, tuple(tensor.shape), dim_order_from_stride(tensor.stride()), tensor.requires_grad)
        spec.shape = tuple(tensor.shape)
        spec.const = const
        spec.storage = tensor if const else None
        return spec

    @property
    def inplace_base(self) -> TensorSpec | None:
        """``storage_base`` for a spec that reuses its base's bytes from their start (ExecuTorch's older name)."""
        if self.storage_base is not None and self.storage_base_offset != 0:
            raise ValueError(
                f"inplace_base names a base at offset 0, but this spec starts at byte {self.storage_base_offset} "
                "of its base; read storage_base and storage_base_offset instead"
            )
        return self.storage_base

    @inplace_base.setter
    def inplace_base(self, base: TensorSpec | None) -> None:
        if self.storage_base_offset != 0:
            raise ValueError(
                f"inplace_base can be set only while storage_base_offset is 0 (found {self.storage_base_offset}); "
                "set storage_base for a base at a non-zero offset"
            )
        self.storage_base = base

    @property
    def dynamic(self) -> bool:
        """True when some dimension is symbolic (planned at its upper bound)."""
        return any(isinstance(d, torch.SymInt) for d in self.sym_shape)

    @property
    def scalar_type(self) -> ScalarType:
        return DTYPE_TO_SCALAR[self.dtype]

    @property
    def nbytes(self) -> int:
        """Bytes at the planned (upper-bound) shape."""
        shape = self.shape if self.shape is not None else self.sym_shape
        return math.prod(shape) * self.dtype.itemsize

    def aligned_nbytes(self, alignment: int) -> int:
        """Bytes the tensor occupies in an arena aligned to ``alignment``: ``nbytes`` rounded up."""
        return -(-self.nbytes // alignment) * alignment

    @property
    def allocated_memory(self) -> int:
        """Bytes the tensor occupies in its arena at the spec's ``alignment`` (ExecuTorch's property)."""
        return self.aligned_nbytes(self.alignment)

    def realign(self, alignment: int) -> int:
        """Plan this tensor at ``alignment`` from now on; returns its ``allocated_memory``."""
        self.alignment = alignment
        return self.allocated_memory

    @property
    def shape_dynamism(self) -> TensorShapeDynamism:
        """DYNAMIC_BOUND for a tensor planned at its upper-bound shape, else STATIC (unless a pass set it)."""
        if self.dynamism_override is not None:
            return self.dynamism_override
        return TensorShapeDynamism.DYNAMIC_BOUND if self.dynamic else TensorShapeDynamism.STATIC

    @shape_dynamism.setter
    def shape_dynamism(self, value: TensorShapeDynamism) -> None:
        self.dynamism_override = TensorShapeDynamism(value)

    @property
    def is_upper_bound_tensor(self) -> bool:
        return self.shape_dynamism == TensorShapeDynamism.DYNAMIC_BOUND

    def init_mem_planning_fields(self) -> None:
        """Forget any plan: no lifetime, arena, offset or memory object (a copied spec is planned afresh)."""
        self.lifetime = [None, None]
        self.mem_id = self.mem_offset = self.mem_obj_id = None

    def debug(self) -> str:
        """Every planning field on one line (``__repr__`` is the short form)."""
        return (
            f"TensorSpec(id={id(self)}, name={self.name}, const={self.const}, scalar_type={self.scalar_type}, "
            f"allocated_memory={self.allocated_memory}, mem_id={self.mem_id}, mem_offset={self.mem_offset}, "
            f"lifetime={self.lifetime}, shape_dynamism={self.shape_dynamism}, shape={self.shape}, "
            f"sym_shape={self.sym_shape})"
        )

    def __repr__(self) -> str:
        return f"TensorSpec({self.name}, {self.dtype}, {self.shape or self.sym_shape}, mem_id={self.mem_id}, offset={self.mem_offset})"


def _dim_order(val: torch.Tensor) -> tuple[int, ...]:
    try:
        return tuple(val.dim_order())
    except (RuntimeError, ValueError, TypeError):  # symbolic strides that cannot be ordered
        return tuple(range(val.dim()))


def make_spec(val: Any, name: str = "") -> Any:
    """A spec tree mirroring ``val``: TensorSpec for tensors, None for everything else."""
    if isinstance(val, torch.Tensor):
        return TensorSpec.from_val(val, name)
    if isinstance(val, (list, tuple)):
        return type(val)(make_spec(v, f"{name}[{i}]") for i, v in enumerate(val))
    return None


def spec_leaves(spec: Any) -> list[TensorSpec]:
    """The TensorSpecs in a spec tree, in order."""
    if isinstance(spec, TensorSpec):
        return [spec]
    if isinstance(spec, (list, tuple)):
        return [leaf for s in spec for leaf in spec_leaves(s)]
    return []


def num_bytes_from_shape_and_dtype(shape: Sequence[int], dtype: torch.dtype) -> int:
    """Bytes of a contiguous tensor of ``shape`` and ``dtype``."""
    return math.prod(shape) * dtype.itemsize


def contiguous_stride_from_shape(shape: Sequence[SymDim]) -> tuple[SymDim, ...]:
    """Row-major strides of ``shape``; a 0-sized dimension counts as 1, as in PyTorch."""
    strides: list[SymDim] = []
    step: SymDim = 1
    for size in reversed(shape):
        strides.append(step)
        # A symbolic size is never compared with 0 (that would guard on an unbacked value).
        step = step * size if not isinstance(size, int) or size != 0 else step
    return tuple(reversed(strides))


def dim_order_from_stride(stride: Sequence[SymDim]) -> tuple[int, ...]:
    """Dimensions from outermost (largest stride) to innermost; equal strides keep their order.

    A 0 stride (a broadcast dimension) has no place in a dim order and raises RuntimeError. Symbolic
    strides are ordered when it can be proved without guarding: ``1`` and ``u0`` divide ``2 * u0``, so
    they are inner to it; two unrelated unbacked strides raise torch's data-dependent error.
    """
    for s in stride:
        torch._check(s != 0, lambda: "a 0 stride (broadcast dimension) has no dim order in ExecuTorch")
    order = list(range(len(stride)))
    # Insertion sort, outermost first: stable, and it compares each pair through _inner_to only.
    for i in range(1, len(order)):
        j = i
        while j > 0 and _inner_to(stride[order[j - 1]], stride[order[j]]):
            order[j - 1], order[j] = order[j], order[j - 1]
            j -= 1
    return tuple(order)


def _inner_to(a: SymDim, b: SymDim) -> bool:
    """True when stride ``a`` is smaller than ``b``, proved without guarding on unbacked symbols if possible."""
    if guard_or_false(a < b):
        return True
    if guard_or_false(b % a == 0) and guard_or_true(a != b):
        return True
    return bool(a < b)


def stride_from_dim_order(sizes: Sequence[SymDim], dim_order: Sequence[int]) -> list[SymDim]:
    """Strides of a dense tensor of ``sizes`` laid out in ``dim_order`` (a 0-sized dimension counts as 1)."""
    strides: list[SymDim] = list(sizes)
    step: SymDim = 1
    for dim in reversed(dim_order):
        strides[dim] = step
        size = sizes[dim]
        step = step * size if not isinstance(size, int) or size != 0 else step
    return strides


def scalar_type_enum(dtype: torch.dtype) -> ScalarType:
    """The schema's code for ``dtype``."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"expected a torch.dtype, found {type(dtype).__name__} {dtype!r}")
    if dtype not in DTYPE_TO_SCALAR:
        raise ValueError(f"dtype {dtype} has no ExecuTorch scalar type; use one of {sorted(map(str, DTYPE_TO_SCALAR))}")
    return DTYPE_TO_SCALAR[dtype]


def get_scalar_type(code: ScalarType) -> torch.dtype:
    """The torch dtype of a schema scalar type code."""
    return SCALAR_TO_DTYPE[ScalarType(code)]


def make_allocation_info(mem_id: int, mem_offset: int) -> AllocationDetails:
    """The schema's allocation record: ``mem_offset`` split into its low and high 32 bits."""
    if mem_offset < 0:
        raise ValueError(f"mem_offset {mem_offset} is negative; a planned offset counts bytes from the arena start")
    if mem_offset >> 64:
        raise AddressSpaceOverflowException(
            f"mem_offset {mem_offset} does not fit in 64 bits; plan the tensor into a smaller arena"
        )
    return AllocationDetails(
        memory_id=mem_id, memory_offset_low=mem_offset & 0xFFFFFFFF, memory_offset_high=mem_offset >> 32
    )


def make_tensor_value(
    data_buffer_idx: int,
    allocation_info: AllocationDetails | None,
    spec: TensorSpec,
    extra_tensor_info: ExtraTensorInfo | None = None,
) -> Tensor:
    """The schema Tensor of ``spec``: its data at ``data_buffer_idx`` (0 = none), planned at ``allocation_info``.
    A tensor on a device other than the CPU says so in its extra info (a CPU one writes nothing, as ExecuTorch)."""
    if spec.device != DeviceType.CPU:
        if extra_tensor_info is None:
            extra_tensor_info = ExtraTensorInfo()
        extra_tensor_info.device_type, extra_tensor_info.device_index = spec.device, spec.device_index
    return Tensor(
        scalar_type=spec.scalar_type,
        sizes=list(spec.shape if spec.shape is not None else spec.sym_shape),
        dim_order=list(spec.dim_order),
        requires_grad=spec.requires_grad,
        data_buffer_idx=data_buffer_idx,
        allocation_info=allocation_info,
        shape_dynamism=spec.shape_dynamism,
        extra_tensor_info=extra_tensor_info,
    )
