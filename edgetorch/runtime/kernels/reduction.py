"""Reduction kernels: sum, mean, prod, amax/amin, max/min, argmax/argmin, any/all, var/std, cumulative ops,
logsumexp, cdist/pdist. Torch-free: imports NumPy and the kernel registry only.

Every kernel follows the registry's calling convention: the out-variant schema's arguments positionally, the
``out`` tensors last, the result written into ``out`` (resized to the true shape) and returned. Half and bfloat16
inputs are accumulated in float32 and integer/bool sums and products in int64, as PyTorch does.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from edgetorch.errors import InvalidArgumentError
from edgetorch.runtime.dtypes import BFLOAT16, numpy_dtype
from edgetorch.runtime.kernels.registry import kernel, wrap_dim
from edgetorch.runtime.memory import resize

LOW_PRECISION_FLOATS = frozenset({np.dtype(np.float16), BFLOAT16})


BLAS_FLOATS = frozenset({np.dtype(np.float32), np.dtype(np.float64)})

# Longest rows summed through BLAS: beyond it NumPy's pairwise summation is as fast and more accurate.
BLAS_ROW_SUM_MAX = 4096


def blas_row_sum_applies(x: np.ndarray, axes: tuple[int, ...] | None) -> bool:
    """Whether a sum of ``x`` over ``axes`` can be a matrix-vector product with ones: float32/64, over the last
    axis only, rows short enough, where it is faster than ``np.add.reduce``."""
    return x.dtype in BLAS_FLOATS and x.ndim > 0 and axes == (x.ndim - 1,) and x.shape[-1] <= BLAS_ROW_SUM_MAX


def row_sums(x: np.ndarray, axis: int) -> np.ndarray:
    """Keepdim-shaped sums of ``x`` over ``axis``, through BLAS (a product with ones) when that is faster."""
    if blas_row_sum_applies(x, (axis,)):
        return np.matmul(x, np.ones(x.shape[-1], x.dtype))[..., None]
    return np.add.reduce(x, axis=axis, keepdims=True)


def extreme_last_axis(find: Callable, x: np.ndarray) -> np.ndarray:
    """The keepdim-shaped maximum (``find=np.argmax``) or minimum (``np.argmin``) over the last axis of ``x``.

    NumPy's argmax/argmin loop over short rows is much faster than ``maximum.reduce``'s; gathering at the found
    index keeps torch's NaN propagation (argmax and argmin stop at the first NaN).
    """
    return np.take_along_axis(x, find(x, axis=-1, keepdims=True), -1)


def is_floating(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is a floating-point dtype (NumPy's own or ml_dtypes' bfloat16)."""
    return dtype.kind == "f" or dtype == BFLOAT16


def acc_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype to accumulate a result of ``dtype`` in: float32 for half/bfloat16, ``dtype`` otherwise."""
    return np.dtype(np.float32) if dtype in LOW_PRECISION_FLOATS else dtype


def reduction_axes(dims: list[int] | int | None, ndim: int, empty_means_all: bool = True) -> tuple[int, ...] | None:
    """Normalised axes for a reduction over ``dims``; None (reduce everything) for None or, usually, ``[]``."""
    if dims is None or (empty_means_all and not isinstance(dims, int) and len(dims) == 0) or ndim == 0:
        return None
    dims = [dims] if isinstance(dims, int) else dims
    axes = tuple(wrap_dim(d, ndim) for d in dims)
    if len(set(axes)) != len(axes):
        raise InvalidArgumentError(f"reduction dims {list(dims)} name a dimension twice; give each dimension once")
    return axes


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...] | None, keepdim: bool) -> tuple[int, ...]:
    """The shape of a reduction of ``shape`` over ``axes`` (None: all)."""
    reduced = range(len(shape)) if axes is None else axes
    if keepdim:
        return tuple(1 if i in reduced else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in reduced)


def write_result(out: np.ndarray, shape: tuple[int, ...], acc: np.dtype, compute: Callable) -> np.ndarray:
    """Resize ``out`` to ``shape`` and fill it with ``compute(out=...)``, computing in ``acc`` (and casting) when
    ``out`` has another dtype."""
    out = resize(out, shape)
    if out.dtype == acc:
        compute(out=out)
    else:
        np.copyto(out, compute(out=None), casting="unsafe")
    return out


def cast_input(x: np.ndarray, dtype: int | None) -> np.ndarray:
    """``x`` converted to the ScalarType ``dtype`` when one is given (the ``dtype=`` argument of sum/prod/...)."""
    if dtype is None:
        return x
    target = numpy_dtype(dtype)
    return x if x.dtype == target else x.astype(target)


def check_nonempty(x: np.ndarray, axes: tuple[int, ...] | None, op: str) -> None:
    """Raise when a reduction without identity (max, min, argmax, ...) would reduce over zero elements."""
    sizes = x.shape if axes is None else [x.shape[a] for a in axes]
    if x.size == 0 and (0 in sizes or axes is None):
        raise InvalidArgumentError(
            f"{op}: cannot reduce an empty dimension of a tensor of shape {x.shape}; "
            "this reduction has no identity, so give it a non-empty input or reduce another dimension"
        )


def _ufunc_reduce(
    ufunc: np.ufunc, x: np.ndarray, dims, keepdim: bool, dtype: int | None, out: np.ndarray
) -> np.ndarray:
    x = cast_input(x, dtype)
    axes = reduction_axes(dims, x.ndim)
    acc = acc_dtype(out.dtype)
    shape = reduced_shape(x.shape, axes, keepdim)
    if ufunc is np.add and x.dtype == acc and blas_row_sum_applies(x, axes):
        out = resize(out, shape)
        np.matmul(x, np.ones(x.shape[-1], acc), out=out.reshape(x.shape[:-1]))
        return out
    return write_result(out, shape, acc, lambda out: ufunc.reduce(x, axis=axes, dtype=acc, keepdims=keepdim, out=out))


@kernel("aten::sum.IntList_out")
def sum_out(x: np.ndarray, dim: list[int] | None, keepdim: bool, dtype: int | None, out: np.ndarray) -> np.ndarray:
    """Sum over ``dim`` (None or [] = all); integers and bools accumulate in the out dtype (int64 by default)."""
    return _ufunc_reduce(np.add, x, dim, keepdim, dtype, out)


@kernel("aten::sum.out")
def sum_all_out(x: np.ndarray, dtype: int | None, out: np.ndarray) -> np.ndarray:
    """Sum of every element."""
    return _ufunc_reduce(np.add, x, None, False, dtype, out)


@kernel("aten::nansum.out")
def nansum_out(x: np.ndarray, dim: list[int] | None, keepdim: bool, dtype: int | None, out: np.ndarray) -> np.ndarray:
    """Sum over ``dim`` treating NaN as zero."""
    if is_floating(x.dtype):
        x = np.where(np.isnan(x), np.zeros((), x.dtype), x)
    return _ufunc_reduce(np.add, x, dim, keepdim, dtype, out)


@kernel("aten::prod.int_out")
def prod_dim_out(x: np.ndarray, dim: int, keepdim: bool, dtype: int | None, out: np.ndarray) -> np.ndarray:
    """Product along one dimension."""
    return _ufunc_reduce(np.multiply, x, dim, keepdim, dtype, out)


@kernel("aten::prod.out")
def prod_out(x: np.ndarray, dtype: int | None, out: np.ndarray) -> np.ndarray:
    """Product of every element."""
    return _ufunc_reduce(np.multiply, x, None, False, dtype, out)


def _mean(x: np.ndarray, dims, keepdim: bool, dtype: int | None, out: np.ndarray) -> np.ndarray:
    x = cast_input(x, dtype)
    axes = reduction_axes(dims, x.ndim)
    count = _count(x.shape, axes)
    acc = acc_dtype(out.dtype)

    def compute(out):
        total = np.add.reduce(x, axis=axes, dtype=acc, keepdims=keepdim, out=out)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.divide(total, count, out=out, casting="unsafe")

    return write_result(out, reduced_shape(x.shape, axes, keepdim), acc, compute)


def _count(shape: tuple[int, ...], axes: tuple[int, ...] | None) -> int:
    return math.prod(shape if axes is None else [shape[a] for a in axes])


@kernel("aten::mean.out")
def mean_out(x: np.ndarray, dim: list[int] | None, keepdim: bool, dtype: int | None, out: np.ndarray) -> np.ndarray:
    """Arithmetic mean over ``dim`` (None or [] = all); the mean of nothing is NaN."""
    return _mean(x, dim, keepdim, dtype, out)


@kernel("aten::mean.dtype_out")
def mean_all_out(x: np.ndarray, dtype: int | None, out: np.ndarray) -> np.ndarray:
    """Arithmetic mean of every element."""
    return _mean(x, None, False, dtype, out)


def _extreme(ufunc: np.ufunc, op: str, x: np.ndarray, dims, keepdim: bool, out: np.ndarray) -> np.ndarray:
    axes = reduction_axes(dims, x.ndim)
    check_nonempty(x, axes, op)
    shape = reduced_shape(x.shape, axes, keepdim)
    if x.ndim and axes == (x.ndim - 1,) and x.dtype not in LOW_PRECISION_FLOATS:
        out = resize(out, shape)
        np.copyto(out, extreme_last_axis(np.argmax if ufunc is np.maximum else np.argmin, x).reshape(shape))
        return out
    with np.errstate(invalid="ignore"):  # NaN propagates, as in torch
        return write_result(out, shape, x.dtype, lambda out: ufunc.reduce(x, axis=axes, keepdims=keepdim, out=out))


@kernel("aten::amax.out")
def amax_out(x: np.ndarray, dim: list[int], keepdim: bool, out: np.ndarray) -> np.ndarray:
    """Maximum over ``dim`` ([] = all); NaN wins."""
    return _extreme(np.maximum, "amax", x, dim, keepdim, out)


@kernel("aten::amin.out")
def amin_out(x: np.ndarray, dim: list[int], keepdim: bool, out: np.ndarray) -> np.ndarray:
    """Minimum over ``dim`` ([] = all); NaN wins."""
    return _extreme(np.minimum, "amin", x, dim, keepdim, out)


@kernel("aten::max.unary_out")
def max_all_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The largest element as a 0-d tensor."""
    return _extreme(np.maximum, "max", x, None, False, out)


@kernel("aten::min.unary_out")
def min_all_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The smallest element as a 0-d tensor."""
    return _extreme(np.minimum, "min", x, None, False, out)


def _arg_extreme(find: Callable, op: str, x: np.ndarray, dim: int | None, keepdim: bool) -> np.ndarray:
    """Indices (keepdim-shaped along ``dim``; flat when ``dim`` is None) of the first extreme element."""
    if dim is None or x.ndim == 0:
        check_nonempty(x, None, op)
        return np.asarray(find(x.reshape(-1)), np.int64)
    axis = wrap_dim(dim, x.ndim)
    check_nonempty(x, (axis,), op)
    if x.dtype in LOW_PRECISION_FLOATS:
        x = x.astype(np.float32)  # exact, and NumPy's NaN-aware argmax/argmin then apply
    return find(x, axis=axis, keepdims=True)


def _arg_out(find: Callable, op: str, x: np.ndarray, dim: int | None, keepdim: bool, out: np.ndarray) -> np.ndarray:
    index = _arg_extreme(find, op, x, dim, keepdim)
    if dim is None or x.ndim == 0:
        shape = (1,) * x.ndim if keepdim else ()
    else:
        shape = reduced_shape(x.shape, (wrap_dim(dim, x.ndim),), keepdim)
    out = resize(out, shape)
    np.copyto(out, index.reshape(shape), casting="unsafe")
    return out


@kernel("aten::argmax.out")
def argmax_out(x: np.ndarray, dim: int | None, keepdim: bool, out: np.ndarray) -> np.ndarray:
    """Index of the first maximum along ``dim`` (of the flattened tensor when None); NaN counts as the maximum."""
    return _arg_out(np.argmax, "argmax", x, dim, keepdim, out)


@kernel("aten::argmin.out")
def argmin_out(x: np.ndarray, dim: int | None, keepdim: bool, out: np.ndarray) -> np.ndarray:
    """Index of the first minimum along ``dim`` (of the flattened tensor when None); NaN counts as the minimum."""
    return _arg_out(np.argmin, "argmin", x, dim, keepdim, out)


def values_and_indices(
    x: np.ndarray, index: np.ndarray, axis: int, keepdim: bool, values: np.ndarray, indices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Write ``x`` gathered at the keepdim-shaped ``index`` along ``axis`` and ``index`` itself into the two outs."""
    shape = reduced_shape(x.shape, (axis,), keepdim) if x.ndim else ()
    values, indices = resize(values, shape), resize(indices, shape)
    gathered = np.take_along_axis(x, index, axis) if x.ndim else x
    np.copyto(values, gathered.reshape(shape), casting="unsafe")
    np.copyto(indices, index.reshape(shape), casting="unsafe")
    return values, indices


@kernel("aten::max.dim_max")
def max_dim_out(
    x: np.ndarray, dim: int, keepdim: bool, values: np.ndarray, indices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Maximum along ``dim`` and the index of its first occurrence."""
    index = _arg_extreme(np.argmax, "max", x, dim, keepdim)
    return values_and_indices(x, index, wrap_dim(dim, x.ndim), keepdim, values, indices)


@kernel("aten::min.dim_min")
def min_dim_out(
    x: np.ndarray, dim: int, keepdim: bool, values: np.ndarray, indices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Minimum along ``dim`` and the index of its first occurrence."""
    index = _arg_extreme(np.argmin, "min", x, dim, keepdim)
    return values_and_indices(x, index, wrap_dim(dim, x.ndim), keepdim, values, indices)


@kernel("aten::aminmax.out")
def aminmax_out(
    x: np.ndarray, dim: int | None, keepdim: bool, min_out: np.ndarray, max_out: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Minimum and maximum along ``dim`` (all when None)."""
    dims = None if dim is None else [dim]
    return (
        _extreme(np.minimum, "aminmax", x, dims, keepdim, min_out),
        _extreme(np.maximum, "aminmax", x, dims, keepdim, max_out),
    )


def _logical(ufunc: np.ufunc, x: np.ndarray, dims, keepdim: bool, out: np.ndarray, empty_means_all: bool):
    axes = reduction_axes(dims, x.ndim, empty_means_all)
    if x.dtype != np.bool_:
        x = x != 0
    shape = reduced_shape(x.shape, axes, keepdim)
    return write_result(
        out, shape, np.dtype(np.bool_), lambda out: ufunc.reduce(x, axis=axes, keepdims=keepdim, out=out)
    )


@kernel("aten::any.out")
def any_dim_out(x: np.ndarray, dim: int, keepdim: bool, out: np.ndarray) -> np.ndarray:
    """Whether any element along ``dim`` is non-zero."""
    return _logical(np.logical_or, x, dim, keepdim, out, True)


@kernel("aten::any.dims_out")
def any_dims_out(x: np.ndarray, dim: list[int] | None, keepdim: bool, out: np.ndarray) -> np.ndarray:
    """Whether any element over ``dim`` is non-zero (None = all, [] = none, as in torch)."""
    return _logical(np.logical_or, x, dim, keepdim, out, False)


@kernel("aten::any.all_out")
def any_all_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Whether any element is non-zero."""
    return _logical(np.logical_or, x, None, False, out, True)


@kernel("aten::all.out")
def all_dim_out(x: np.ndarray, dim: int, keepdim: bool, out: np.ndarray) -> np.ndarray:
    """Whether every element along ``dim`` is non-zero."""
    return _logical(np.logical_and, x, dim, keepdim, out, True)


@kernel("aten::all.dims_out")
def all_dims_out(x: np.ndarray, dim: list[int] | None, keepdim: bool, out: np.ndarray) -> np.ndarray:
    """Whether every element over ``dim`` is non-zero (None = all, [] = none, as in torch)."""
    return _logical(np.logical_and, x, dim, keepdim, out, False)


@kernel("aten::all.all_out")
def all_all_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Whether every element is non-zero."""
    return _logical(np.logical_and, x, None, False, out, True)


@kernel("aten::count_nonzero.dim_IntList_out")
def count_nonzero_dims_out(x: np.ndarray, dim: list[int], out: np.ndarray) -> np.ndarray:
    """Number of non-zero elements over ``dim`` ([] = all)."""
    return _ufunc_reduce(np.add, x != 0, dim, False, None, out)


@kernel("aten::count_nonzero.out")
def count_nonzero_out(x: np.ndarray, dim: int | None, out: np.ndarray) -> np.ndarray:
    """Number of non-zero elements along ``dim`` (all when None)."""
    return _ufunc_reduce(np.add, x != 0, dim, False, None, out)


def moments(
    x: np.ndarray, dims, correction: float | None, acc: np.dtype
) -> tuple[np.ndarray, np.ndarray, tuple[int, ...] | None]:
    """Keepdim-shaped (mean, variance with ``correction`` degrees of freedom removed) over ``dims``, in ``acc``."""
    axes = reduction_axes(dims, x.ndim)
    correction = 1 if correction is None else correction
    xf = x.astype(acc, copy=False)
    mean = np.mean(xf, axis=axes, keepdims=True) if x.size else np.full(reduced_shape(x.shape, axes, True), np.nan, acc)
    centred = xf - mean
    sq = np.multiply(centred, centred, out=centred)
    with np.errstate(invalid="ignore", divide="ignore"):
        var = np.add.reduce(sq, axis=axes, keepdims=True) / np.asarray(max(_count(x.shape, axes) - correction, 0), acc)
    return mean, var, axes


def _float_acc(out: np.ndarray) -> np.dtype:
    return acc_dtype(out.dtype) if is_floating(out.dtype) else np.dtype(np.float64)


def _write_stat(stat: np.ndarray, x: np.ndarray, axes, keepdim: bool, out: np.ndarray) -> np.ndarray:
    shape = reduced_shape(x.shape, axes, keepdim)
    out = resize(out, shape)
    np.copyto(out, stat.reshape(shape), casting="unsafe")
    return out


def _var(x: np.ndarray, dims, correction, keepdim: bool, out: np.ndarray, root: bool) -> np.ndarray:
    _, var, axes = moments(x, dims, correction, _float_acc(out))
    return _write_stat(np.sqrt(var) if root else var, x, axes, keepdim, out)


def _var_mean(x: np.ndarray, dims, correction, keepdim: bool, out0: np.ndarray, out1: np.ndarray, root: bool):
    mean, var, axes = moments(x, dims, correction, _float_acc(out0))
    return (
        _write_stat(np.sqrt(var) if root else var, x, axes, keepdim, out0),
        _write_stat(mean, x, axes, keepdim, out1),
    )


@kernel("aten::var.correction_out")
def var_correction_out(
    x: np.ndarray, dim: list[int] | None, correction: float | None, keepdim: bool, out: np.ndarray
) -> np.ndarray:
    """Variance over ``dim`` dividing by N - correction (correction defaults to 1)."""
    return _var(x, dim, correction, keepdim, out, False)


@kernel("aten::var.out")
def var_out(x: np.ndarray, dim: list[int] | None, unbiased: bool, keepdim: bool, out: np.ndarray) -> np.ndarray:
    """Variance over ``dim``, Bessel-corrected when ``unbiased``."""
    return _var(x, dim, int(unbiased), keepdim, out, False)


@kernel("aten::std.correction_out")
def std_correction_out(
    x: np.ndarray, dim: list[int] | None, correction: float | None, keepdim: bool, out: np.ndarray
) -> np.ndarray:
    """Standard deviation over ``dim`` dividing by N - correction (correction defaults to 1)."""
    return _var(x, dim, correction, keepdim, out, True)


@kernel("aten::std.out")
def std_out(x: np.ndarray, dim: list[int] | None, unbiased: bool, keepdim: bool, out: np.ndarray) -> np.ndarray:
    """Standard deviation over ``dim``, Bessel-corrected when ``unbiased``."""
    return _var(x, dim, int(unbiased), keepdim, out, True)


@kernel("aten::var_mean.correction_out")
def var_mean_correction_out(
    x: np.ndarray, dim: list[int] | None, correction: float | None, keepdim: bool, out0: np.ndarray, out1: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(variance, mean) over ``dim`` in one pass over the data."""
    return _var_mean(x, dim, correction, keepdim, out0, out1, False)


@kernel("aten::std_mean.correction_out")
def std_mean_correction_out(
    x: np.ndarray, dim: list[int] | None, correction: float | None, keepdim: bool, out0: np.ndarray, out1: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(standard deviation, mean) over ``dim``."""
    return _var_mean(x, dim, correction, keepdim, out0, out1, True)


def _cumulative(ufunc: np.ufunc, x: np.ndarray, dim: int, dtype: int | None, out: np.ndarray) -> np.ndarray:
    x = cast_input(x, dtype)
    axis = wrap_dim(dim, x.ndim)
    acc = acc_dtype(out.dtype)
    flat = x.reshape(-1) if x.ndim == 0 else x  # accumulate needs an axis; a 0-d result is its own running total
    return write_result(
        out, x.shape, acc, lambda out: ufunc.accumulate(flat, axis=axis, dtype=acc, out=_as_1d(out)).reshape(x.shape)
    )


def _as_1d(out: np.ndarray | None) -> np.ndarray | None:
    return out.reshape(-1) if out is not None and out.ndim == 0 else out


@kernel("aten::cumsum.out")
def cumsum_out(x: np.ndarray, dim: int, dtype: int | None, out: np.ndarray) -> np.ndarray:
    """Running sum along ``dim``; integers accumulate in the out dtype (int64 by default)."""
    return _cumulative(np.add, x, dim, dtype, out)


@kernel("aten::cumprod.out")
def cumprod_out(x: np.ndarray, dim: int, dtype: int | None, out: np.ndarray) -> np.ndarray:
    """Running product along ``dim``."""
    return _cumulative(np.multiply, x, dim, dtype, out)


def _cumulative_extreme(ufunc: np.ufunc, x: np.ndarray, dim: int, values: np.ndarray, indices: np.ndarray):
    axis = wrap_dim(dim, x.ndim)
    xs = x.reshape(1) if x.ndim == 0 else x
    with np.errstate(invalid="ignore"):
        running = ufunc.accumulate(xs, axis=axis)
    # An element sets the running extreme when it equals it (ties: the later index wins) or is NaN, as in torch.
    sets = xs == running
    if is_floating(x.dtype):
        sets |= np.isnan(xs)
    position = np.arange(xs.shape[axis]).reshape([-1 if i == axis else 1 for i in range(xs.ndim)])
    index = np.maximum.accumulate(np.where(sets, position, 0), axis=axis)
    values, indices = resize(values, x.shape), resize(indices, x.shape)
    np.copyto(values, running.reshape(x.shape))
    np.copyto(indices, index.reshape(x.shape), casting="unsafe")
    return values, indices


@kernel("aten::cummax.out")
def cummax_out(x: np.ndarray, dim: int, values: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Running maximum along ``dim`` and the index where it was last attained."""
    return _cumulative_extreme(np.maximum, x, dim, values, indices)


@kernel("aten::cummin.out")
def cummin_out(x: np.ndarray, dim: int, values: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Running minimum along ``dim`` and the index where it was last attained."""
    return _cumulative_extreme(np.minimum, x, dim, values, indices)


def stable_logsumexp(x: np.ndarray, axes: tuple[int, ...] | None) -> np.ndarray:
    """log(sum(exp(x))) over ``axes`` (keepdim-shaped), shifted by the maximum so nothing overflows."""
    shift = np.max(x, axis=axes, keepdims=True) if x.size else np.zeros(reduced_shape(x.shape, axes, True), x.dtype)
    shift[~np.isfinite(shift)] = 0  # an all -inf (or inf) slice must not produce inf - inf
    with np.errstate(divide="ignore"):
        return np.log(np.add.reduce(np.exp(x - shift), axis=axes, keepdims=True)) + shift


@kernel("aten::logsumexp.out")
def logsumexp_out(x: np.ndarray, dim: list[int], keepdim: bool, out: np.ndarray) -> np.ndarray:
    """log(sum(exp(x))) over ``dim``, computed without overflow."""
    axes = reduction_axes(dim, x.ndim)
    result = stable_logsumexp(x.astype(_float_acc(out), copy=False), axes)
    return _write_stat(result, x, axes, keepdim, out)


@kernel("aten::logcumsumexp.out")
def logcumsumexp_out(x: np.ndarray, dim: int, out: np.ndarray) -> np.ndarray:
    """Running log(sum(exp(x))) along ``dim``."""
    axis = wrap_dim(dim, x.ndim)
    xs = x.reshape(1) if x.ndim == 0 else x
    with np.errstate(invalid="ignore"):
        result = np.logaddexp.accumulate(xs.astype(_float_acc(out), copy=False), axis=axis)
    out = resize(out, x.shape)
    np.copyto(out, result.reshape(x.shape), casting="unsafe")
    return out


def p_norm(x: np.ndarray, p: float, axes: int | tuple[int, ...] | None, keepdim: bool = False) -> np.ndarray:
    """The p-norm of ``x`` over ``axes``: p = 0 counts non-zeros, p = inf (-inf) takes the largest (smallest)
    magnitude, otherwise (sum |x|^p)^(1/p)."""
    mag = np.abs(x)
    if p == 0:
        return np.sum(mag != 0, axis=axes, keepdims=keepdim).astype(mag.dtype)
    if math.isinf(p) and p > 0:
        return np.max(mag, axis=axes, keepdims=keepdim, initial=0)
    if math.isinf(p):
        return np.min(mag, axis=axes, keepdims=keepdim)
    if p == 1:
        return np.sum(mag, axis=axes, keepdims=keepdim)
    if p == 2:
        return np.sqrt(np.sum(mag * mag, axis=axes, keepdims=keepdim))
    return np.power(np.sum(np.power(mag, p), axis=axes, keepdims=keepdim), 1.0 / p)


def _vector_norm(x: np.ndarray, p: float | None, dims, keepdim: bool, dtype: int | None, out: np.ndarray):
    x = cast_input(x, dtype)
    axes = reduction_axes(dims, x.ndim)
    result = p_norm(x.astype(_float_acc(out), copy=False), 2.0 if p is None else p, axes)
    return _write_stat(result, x, axes, keepdim, out)


@kernel("aten::linalg_vector_norm.out")
def linalg_vector_norm_out(
    x: np.ndarray, ord: float, dim: list[int] | None, keepdim: bool, dtype: int | None, out: np.ndarray
) -> np.ndarray:
    """The ``ord``-norm of ``x`` over ``dim`` (None or [] = all) treated as one vector."""
    return _vector_norm(x, ord, dim, keepdim, dtype, out)


@kernel("aten::norm.out")
def norm_out(x: np.ndarray, p: float | None, dim: list[int], keepdim: bool, out: np.ndarray) -> np.ndarray:
    """The ``p``-norm (2 when None) of ``x`` over ``dim``."""
    return _vector_norm(x, p, dim, keepdim, None, out)


@kernel("aten::norm.dtype_out")
def norm_dtype_out(
    x: np.ndarray, p: float | None, dim: list[int], keepdim: bool, dtype: int, out: np.ndarray
) -> np.ndarray:
    """The ``p``-norm of ``x`` over ``dim``, computed in ``dtype``."""
    return _vector_norm(x, p, dim, keepdim, dtype, out)


@kernel("aten::norm.Scalar_out")
def norm_all_out(x: np.ndarray, p: float, out: np.ndarray) -> np.ndarray:
    """The ``p``-norm of every element."""
    return _vector_norm(x, p, None, False, None, out)


@kernel("aten::norm.ScalarOpt_dtype_out")
def norm_all_dtype_out(x: np.ndarray, p: float | None, dtype: int, out: np.ndarray) -> np.ndarray:
    """The ``p``-norm of every element, computed in ``dtype``."""
    return _vector_norm(x, p, None, False, dtype, out)


def _check_p(p: float, op: str) -> None:
    if p < 0:
        raise InvalidArgumentError(f"{op}: p must be a non-negative number, got {p}")


@kernel("aten::_cdist_forward.out")
def cdist_out(x1: np.ndarray, x2: np.ndarray, p: float, compute_mode: int | None, out: np.ndarray) -> np.ndarray:
    """p-norm distances between every row of ``x1`` [..., P, M] and of ``x2`` [..., R, M] -> [..., P, R]."""
    _check_p(p, "cdist")
    acc = _float_acc(out)
    a, b = x1.astype(acc, copy=False), x2.astype(acc, copy=False)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    rows, cols = a.shape[-2], b.shape[-2]
    # torch's matrix-multiply path for p = 2: mode 1 always, mode None (default) when either side has > 25 rows.
    if p == 2 and (compute_mode == 1 or (compute_mode is None and (rows > 25 or cols > 25))):
        sq = np.sum(a * a, -1)[..., :, None] + np.sum(b * b, -1)[..., None, :] - 2 * (a @ np.swapaxes(b, -1, -2))
        result = np.sqrt(np.maximum(sq, 0, out=sq), out=sq)
    else:
        result = p_norm(a[..., :, None, :] - b[..., None, :, :], p, -1)
    out = resize(out, (*batch, rows, cols))
    np.copyto(out, np.broadcast_to(result, out.shape), casting="unsafe")
    return out


@kernel("aten::_pdist_forward.out")
def pdist_out(x: np.ndarray, p: float, out: np.ndarray) -> np.ndarray:
    """p-norm distances between every pair of rows i < j of ``x`` [N, M], in row-major pair order."""
    _check_p(p, "pdist")
    acc = _float_acc(out)
    first, second = np.triu_indices(x.shape[0], 1)
    xf = x.astype(acc, copy=False)
    out = resize(out, (first.size,))
    np.copyto(out, p_norm(xf[first] - xf[second], p, -1), casting="unsafe")
    return out
