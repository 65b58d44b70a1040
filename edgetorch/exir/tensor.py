"""TensorSpec: what memory planning and emission know about one tensor value, and the dtype table.

A TensorSpec holds a tensor's dtype, dim order, its shape (an upper bound when
dynamic), whether it is a constant, its lifetime and its planned place
(``mem_id``, ``mem_offset``). ExecuTorch keeps the same in ``exir/tensor.py``.
May import torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from edgetorch.format.program import ScalarType

DTYPE_TO_SCALAR: dict[torch.dtype, ScalarType] = {
    torch.uint8: ScalarType.BYTE,
    torch.int8: ScalarType.CHAR,
    torch.int16: ScalarType.SHORT,
    torch.int32: ScalarType.INT,
    torch.int64: ScalarType.LONG,
    torch.float16: ScalarType.HALF,
    torch.float32: ScalarType.FLOAT,
    torch.float64: ScalarType.DOUBLE,
    torch.complex64: ScalarType.COMPLEX64,
    torch.complex128: ScalarType.COMPLEX128,
    torch.bool: ScalarType.BOOL,
    torch.qint8: ScalarType.QINT8,
    torch.quint8: ScalarType.QUINT8,
    torch.qint32: ScalarType.QINT32,
    torch.bfloat16: ScalarType.BFLOAT16,
    torch.uint16: ScalarType.UINT16,
    torch.uint32: ScalarType.UINT32,
    torch.uint64: ScalarType.UINT64,
    torch.float8_e5m2: ScalarType.FLOAT8E5M2,
    torch.float8_e4m3fn: ScalarType.FLOAT8E4M3FN,
}

SymDim = Any  # an int or a torch.SymInt


@dataclass(eq=False)
class TensorSpec:
    """What the planner and the emitter know about one tensor value (compared by identity)."""

    dtype: torch.dtype
    sym_shape: tuple[SymDim, ...]
    dim_order: tuple[int, ...]
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
    alias_of: TensorSpec | None = None
    """The spec whose bytes this one reuses (a ``memory.view``); such specs are not planned themselves."""

    @classmethod
    def from_val(cls, val: torch.Tensor, name: str = "") -> TensorSpec:
        return cls(val.dtype, tuple(val.shape), _dim_order(val), bool(val.requires_grad), name)

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
