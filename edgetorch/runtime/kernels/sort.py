"""Sorting and selection kernels: sort, argsort, msort, topk, kthvalue, median, nanmedian, mode. Torch-free:
imports NumPy, the kernel registry and the reduction helpers.

Orders follow PyTorch: NaN sorts above every number (last ascending, first descending), sorts are stable (equal
elements keep their input order, also when descending), and indices are int64.
"""

from __future__ import annotations

import numpy as np

from edgetorch.errors import OutOfRangeError
from edgetorch.runtime.kernels.reduction import (
    LOW_PRECISION_FLOATS,
    check_nonempty,
    is_floating,
    reduced_shape,
    values_and_indices,
    wrap_dim,
)
from edgetorch.runtime.kernels.registry import kernel
from edgetorch.runtime.memory import resize


def _lift(x: np.ndarray, dim: int) -> tuple[np.ndarray, int]:
    """``x`` (a 0-d tensor as shape (1,)) and ``dim`` as a non-negative axis of it."""
    return (x.reshape(1) if x.ndim == 0 else x), wrap_dim(dim, x.ndim)


def _sort_key(x: np.ndarray) -> np.ndarray:
    """An array NumPy sorts in torch's order: half/bfloat16 widened to float32 so NaN sorts last."""
    return x.astype(np.float32) if x.dtype in LOW_PRECISION_FLOATS else x


def stable_argsort(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """int64 indices that stably sort ``x`` (at least 1-d) along ``axis``; NaN counts as the largest value."""
    key = _sort_key(x)
    if not descending:
        return np.argsort(key, axis=axis, kind="stable")
    # Sorting the reversed array ascending and reversing the result keeps equal elements in input order.
    order = np.argsort(np.flip(key, axis), axis=axis, kind="stable")
    return np.flip(key.shape[axis] - 1 - order, axis)


def _write(out: np.ndarray, value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    out = resize(out, shape)
    np.copyto(out, value.reshape(shape), casting="unsafe")
    return out


def _sort(x: np.ndarray, dim: int, descending: bool, values: np.ndarray, indices: np.ndarray):
    xs, axis = _lift(x, dim)
    order = stable_argsort(xs, axis, descending)
    return _write(values, np.take_along_axis(xs, order, axis), x.shape), _write(indices, order, x.shape)


@kernel("aten::sort.values")
def sort_values(
    x: np.ndarray, dim: int, descending: bool, values: np.ndarray, indices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``x`` sorted along ``dim`` and the indices each sorted element came from."""
    return _sort(x, dim, descending, values, indices)


@kernel("aten::sort.values_stable")
def sort_values_stable(
    x: np.ndarray, stable: bool | None, dim: int, descending: bool, values: np.ndarray, indices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """As :func:`sort_values`; every sort here is stable, so ``stable`` changes nothing."""
    return _sort(x, dim, descending, values, indices)


@kernel("aten::argsort.stable_out")
def argsort_out(x: np.ndarray, stable: bool, dim: int, descending: bool, out: np.ndarray) -> np.ndarray:
    """The indices that stably sort ``x`` along ``dim``."""
    xs, axis = _lift(x, dim)
    return _write(out, stable_argsort(xs, axis, descending), x.shape)


@kernel("aten::msort.out")
def msort_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``x`` sorted ascending along its first dimension."""
    xs, axis = _lift(x, 0)
    return _write(out, np.take_along_axis(xs, stable_argsort(xs, axis, False), axis), x.shape)


def _preference_key(x: np.ndarray, largest: bool) -> np.ndarray:
    """A key whose ascending order puts the elements topk wants first (NaN counts as the largest value)."""
    key = _sort_key(x)
    if key.dtype == np.bool_:
        key = key.view(np.uint8)
    if not largest:
        return key
    if is_floating(key.dtype):
        return np.where(np.isnan(key), -np.inf, -key).astype(key.dtype, copy=False)
    return np.invert(key)  # order-reversing for signed and unsigned integers, and it cannot overflow


@kernel("aten::topk.values")
def topk_values(
    x: np.ndarray, k: int, dim: int, largest: bool, sorted: bool, values: np.ndarray, indices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest (or smallest) elements along ``dim`` and their indices, always in sorted order (a valid
    answer for ``sorted=False`` too); equal elements come in input order."""
    xs, axis = _lift(x, dim)
    n = xs.shape[axis]
    if not 0 <= k <= n:
        raise OutOfRangeError(f"topk: k must be between 0 and {n} (the size of dim {dim}), got {k}")
    if 0 < k < n:
        chosen = np.argpartition(_preference_key(xs, largest), k - 1, axis=axis)
        chosen = np.sort(np.take(chosen, np.arange(k), axis=axis), axis=axis)
    else:
        chosen = np.broadcast_to(np.arange(n).reshape([-1 if i == axis else 1 for i in range(xs.ndim)]), xs.shape)
        chosen = np.take(chosen, np.arange(k), axis=axis)
    picked = np.take_along_axis(xs, chosen, axis)
    order = stable_argsort(picked, axis, descending=largest)
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1 :] if x.ndim else ()
    return _write(values, np.take_along_axis(picked, order, axis), shape), _write(
        indices, np.take_along_axis(chosen, order, axis), shape
    )


def _nan_count(xs: np.ndarray, axis: int) -> np.ndarray:
    """How many NaN each slice along ``axis`` holds, keepdim-shaped."""
    if not is_floating(xs.dtype):
        return np.zeros(reduced_shape(xs.shape, (axis,), True), np.int64)
    return np.add.reduce(np.isnan(xs), axis=axis, keepdims=True, dtype=np.int64)


def _select(x: np.ndarray, dim: int, keepdim: bool, op: str, rank, values: np.ndarray, indices: np.ndarray):
    """Write the element of ascending rank ``rank(xs, axis, n)`` (keepdim-shaped) along ``dim`` and its index."""
    xs, axis = _lift(x, dim)
    check_nonempty(xs, (axis,), op)
    order = stable_argsort(xs, axis, descending=False)
    index = np.take_along_axis(order, np.asarray(rank(xs, axis, xs.shape[axis]), np.int64), axis)
    if x.ndim == 0:
        return _write(values, x, ()), _write(indices, np.zeros((), np.int64), ())
    return values_and_indices(x, index, axis, keepdim, values, indices)


def _median_rank(xs: np.ndarray, axis: int, n: int):
    """The lower median's rank; in a slice holding NaN, the first NaN's (median propagates NaN)."""
    nans = _nan_count(xs, axis)
    return np.where(nans > 0, n - nans, (n - 1) // 2)


def _nanmedian_rank(xs: np.ndarray, axis: int, n: int):
    """The lower median's rank among the non-NaN elements (NaN only when a slice is all NaN)."""
    return np.maximum((n - _nan_count(xs, axis) - 1) // 2, 0)


@kernel("aten::kthvalue.values")
def kthvalue_values(
    x: np.ndarray, k: int, dim: int, keepdim: bool, values: np.ndarray, indices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k``-th smallest element (1-based) along ``dim`` and its index."""
    n = x.shape[wrap_dim(dim, x.ndim)] if x.ndim else 1
    if not 1 <= k <= n:
        raise OutOfRangeError(f"kthvalue: k must be between 1 and {n} (the size of dim {dim}), got {k}")
    return _select(
        x,
        dim,
        keepdim,
        "kthvalue",
        lambda xs, axis, n: np.full(reduced_shape(xs.shape, (axis,), True), k - 1),
        values,
        indices,
    )


@kernel("aten::median.dim_values")
def median_dim_values(
    x: np.ndarray, dim: int, keepdim: bool, values: np.ndarray, indices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The lower median along ``dim`` and its index; NaN if the slice holds one."""
    return _select(x, dim, keepdim, "median", _median_rank, values, indices)


@kernel("aten::nanmedian.dim_values")
def nanmedian_dim_values(
    x: np.ndarray, dim: int, keepdim: bool, values: np.ndarray, indices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The lower median of the non-NaN elements along ``dim`` and its index."""
    return _select(x, dim, keepdim, "nanmedian", _nanmedian_rank, values, indices)


def _median_all(x: np.ndarray, op: str, rank, out: np.ndarray) -> np.ndarray:
    flat = x.reshape(-1)
    check_nonempty(flat, (0,), op)
    order = stable_argsort(flat, 0, descending=False)
    return _write(out, flat[order[np.asarray(rank(flat, 0, flat.size)).reshape(())]], ())


@kernel("aten::median.out")
def median_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The lower median of every element; NaN if any element is NaN."""
    return _median_all(x, "median", _median_rank, out)


@kernel("aten::nanmedian.out")
def nanmedian_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The lower median of every non-NaN element."""
    return _median_all(x, "nanmedian", _nanmedian_rank, out)


@kernel("aten::mode.values")
def mode_values(
    x: np.ndarray, dim: int, keepdim: bool, values: np.ndarray, indices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The most frequent value along ``dim`` (the smallest among equally frequent ones) and the index of its last
    occurrence, as torch returns."""
    xs, axis = _lift(x, dim)
    check_nonempty(xs, (axis,), "mode")
    moved = np.moveaxis(xs, axis, -1)
    order = stable_argsort(moved, -1, descending=False)
    ordered = np.take_along_axis(moved, order, -1)
    position = np.arange(moved.shape[-1])
    starts = np.ones(moved.shape, bool)
    starts[..., 1:] = ordered[..., 1:] != ordered[..., :-1]
    run_length = position - np.maximum.accumulate(np.where(starts, position, 0), axis=-1) + 1
    # The first longest run ends at the smallest most frequent value; a stable sort puts its last occurrence there.
    run_end = np.argmax(run_length, axis=-1, keepdims=True)
    index = np.moveaxis(np.take_along_axis(order, run_end, -1), -1, axis)
    if x.ndim == 0:
        return _write(values, x, ()), _write(indices, np.zeros((), np.int64), ())
    return values_and_indices(x, index, axis, keepdim, values, indices)
