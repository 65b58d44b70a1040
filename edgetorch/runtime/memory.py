"""Planned memory: one NumPy arena per memory id, tensors as views at their planned offsets, and the resizing of
a tensor inside its planned slot (dynamic shapes). Torch-free."""

from __future__ import annotations

import math
import weakref

import numpy as np

from edgetorch.errors import Error, ExecutionError, InvalidArgumentError, ProgramLoadError

# A plan asking for more than this is refused rather than allocated; Runtime(max_planned_bytes=...) raises it.
DEFAULT_MAX_PLANNED_BYTES = 32 << 30

# The slots of a static method's tensors (by id; an entry goes with its array). As ExecuTorch's runtime does for
# STATIC tensors, resize refuses to change their size: a kernel of a damaged program writing fewer elements would
# leave the rest of the slot stale, and the method would return it as if computed.
_static_slots: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()


def mark_static(slot: np.ndarray) -> None:
    """Make ``slot`` (a static method's planned or unplanned tensor) one that :func:`resize` may not shrink."""
    _static_slots[id(slot)] = slot


def allocate_arenas(sizes: list[int], limit: int) -> list[np.ndarray | None]:
    """One zeroed uint8 arena per memory id; id 0 is the constant pool and gets none."""
    if any(int(s) < 0 for s in sizes):
        raise ProgramLoadError(f"planned buffer sizes must be non-negative, found {list(sizes)}")
    total = sum(int(s) for s in sizes[1:])
    if total > limit:
        raise ProgramLoadError(
            f"the method plans {total} bytes of memory, more than this runtime's limit of {limit}; "
            "if the program is genuine, raise the limit with load_program(..., max_memory=...) or Runtime(max_planned_bytes=...)"
        )
    return [None] + [np.zeros(int(s), np.uint8) for s in sizes[1:]]


def view_of(
    buf: np.ndarray | memoryview, offset: int, dtype: np.dtype, sizes: list[int], dim_order: list[int], what: str
) -> np.ndarray:
    """A tensor of logical shape ``sizes`` stored at ``buf[offset:]`` in ``dim_order`` (no copy)."""
    numel = math.prod(sizes)
    nbytes = numel * dtype.itemsize
    if offset < 0 or offset + nbytes > len(buf):
        raise ProgramLoadError(
            f"{what} needs bytes {offset}..{offset + nbytes} but its buffer holds only {len(buf)}; the file is corrupt"
        )
    flat = np.frombuffer(buf, dtype=dtype, count=numel, offset=offset) if numel else np.empty(0, dtype)
    if list(dim_order) == list(range(len(sizes))):
        return flat.reshape(sizes)
    physical = [sizes[d] for d in dim_order]
    return flat.reshape(physical).transpose(np.argsort(dim_order))


def check_dim_order(dim_order: list[int], ndim: int, what: str) -> list[int]:
    """``dim_order`` as a list, or the identity when absent; a non-permutation is a corrupt file."""
    order = list(dim_order) if dim_order is not None and len(dim_order) else list(range(ndim))
    if sorted(order) != list(range(ndim)):
        raise ProgramLoadError(f"{what} has dim order {order}, which is not a permutation of 0..{ndim - 1}")
    return order


class TensorResizeError(ExecutionError):
    """A tensor's new shape needs more elements than the slot planned for it (the upper bound) holds."""

    def __init__(self, message: str, planned: np.ndarray, shape: tuple[int, ...]):
        super().__init__(message)
        self.planned = planned
        self.shape = shape

    @property
    def code(self) -> Error:  # type: ignore[override]  # read-only, as ExecutionError's
        """ExecuTorch's code for a bounded tensor asked to outgrow its capacity (it has no kernel cause)."""
        return Error.NotSupported


class StaticResizeError(InvalidArgumentError):
    """A kernel asked to give a STATIC tensor another number of elements; ExecuTorch's ``NotSupported``."""

    code = Error.NotSupported

    def __init__(self, message: str, planned: np.ndarray, shape: tuple[int, ...]):
        super().__init__(message)
        self.planned = planned
        self.shape = shape


def resize(planned: np.ndarray, shape: tuple[int, ...] | list[int]) -> np.ndarray:
    """The tensor of ``shape`` stored at the start of ``planned``'s memory, in its dim order (no copy).

    ``planned`` is a tensor's slot at its upper-bound shape; a dynamic-shape kernel or delegate calls this to
    write a result of the size the inputs call for. Raises :class:`TensorResizeError` when ``shape`` needs more
    elements than the slot holds, and ValueError when ``planned`` is not a whole planned slot (a strided view).
    """
    shape = tuple(int(s) for s in shape)
    if planned.shape == shape:
        return planned
    count = math.prod(shape)
    if count > planned.size:
        raise TensorResizeError(
            f"a result of shape {list(shape)} ({count} elements) does not fit its planned slot of shape "
            f"{list(planned.shape)} ({planned.size} elements); the program was planned for smaller sizes: "
            "re-export it with larger dynamic-shape bounds",
            planned,
            shape,
        )
    if count != planned.size and _static_slots.get(id(planned)) is planned:
        raise StaticResizeError(
            f"a result of shape {list(shape)} ({count} elements) was written into a static-shape tensor of shape "
            f"{list(planned.shape)} ({planned.size} elements); a static tensor cannot be resized (the rest would "
            "keep stale values). The program is damaged, or its tensor should have been exported with a dynamic "
            "shape: re-export it",
            planned,
            shape,
        )
    if planned.flags.c_contiguous:
        return planned.reshape(-1)[:count].reshape(shape)
    # A slot in another dim order (channels-last): resize its physical layout, then view it logically again.
    order = sorted(range(planned.ndim), key=lambda d: -planned.strides[d])
    physical = planned.transpose(order)
    if len(shape) != planned.ndim or not physical.flags.c_contiguous:
        raise ValueError(
            f"cannot resize a strided view of shape {list(planned.shape)} (strides {planned.strides}) to "
            f"{list(shape)}: only a whole planned slot can be resized"
        )
    return physical.reshape(-1)[:count].reshape([shape[d] for d in order]).transpose(np.argsort(order))
