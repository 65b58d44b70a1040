"""Indexing kernels: advanced indexing (index, index_put), gather/scatter, index_select/copy/add, masks, nonzero.

Torch-free (NumPy only). Torch's advanced-indexing rules (``None`` entries take a whole axis, boolean
masks stand for their ``nonzero()``, index tensors broadcast together, the indexed axes move to the
front when they are not adjacent) are NumPy's, so an index list becomes a NumPy index tuple.
"""

from __future__ import annotations

import numpy as np

from edgetorch.errors import InvalidArgumentError, OutOfRangeError
from edgetorch.runtime.kernels.promotion import compute_dtype, is_reduced_float
from edgetorch.runtime.kernels.registry import kernel
from edgetorch.runtime.kernels.shape import along, copy_into, wrap_dim
from edgetorch.runtime.memory import resize


def index_tuple(indices: list[np.ndarray | None]) -> tuple:
    """A NumPy index for a torch ``Tensor?[]`` index list (a uint8 tensor is a mask, as a bool one)."""
    return tuple(
        slice(None) if idx is None else idx.astype(np.bool_) if idx.dtype == np.uint8 else idx for idx in indices
    )


@kernel("aten::index.Tensor_out")
def index(self: np.ndarray, indices: list[np.ndarray | None], out: np.ndarray) -> np.ndarray:
    """``self[indices]`` with torch's advanced-indexing rules."""
    return copy_into(out, self[index_tuple(indices)])


def put_indexed(target: np.ndarray, indices: list[np.ndarray | None], values: np.ndarray, accumulate: bool) -> None:
    """``target[indices] = values`` (or ``+=`` with repeated indices summed when ``accumulate``)."""
    where = index_tuple(indices)
    if accumulate:
        np.add.at(target, where, values.astype(target.dtype, copy=False))
    else:
        target[where] = values


@kernel("aten::index_put.out")
def index_put(
    self: np.ndarray, indices: list[np.ndarray | None], values: np.ndarray, accumulate: bool, out: np.ndarray
) -> np.ndarray:
    """A copy of ``self`` with ``values`` (broadcast) written or added at ``indices``."""
    out = copy_into(out, self)
    put_indexed(out, indices, values, accumulate)
    return out


@kernel("aten::index_put_")
def index_put_(self: np.ndarray, indices: list[np.ndarray | None], values: np.ndarray, accumulate: bool) -> np.ndarray:
    """``self`` itself with ``values`` written or added at ``indices`` (in place, e.g. a mutable buffer)."""
    put_indexed(self, indices, values, accumulate)
    return self


@kernel("aten::index_select.out")
def index_select(self: np.ndarray, dim: int, index: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The slices of ``self`` along ``dim`` at positions ``index`` (a 0-D or 1-D tensor)."""
    dim = wrap_dim(dim, self.ndim)
    source = self.reshape(self.shape or (1,))
    shape = source.shape[:dim] + (index.size,) + source.shape[dim + 1 :]
    result = np.take(source, index.reshape(-1), axis=dim, out=resize(out, shape))
    return result.reshape(self.shape) if self.ndim == 0 else result


def along_axis(index: np.ndarray, dim: int) -> tuple:
    """The fancy index of element ``i`` -> ``i`` with coordinate ``dim`` replaced by ``index[i]``.

    Unlike ``np.take_along_axis``, ``index`` may be smaller than the indexed tensor on other axes (torch's rule).
    """
    grids = list(np.ix_(*(np.arange(n) for n in index.shape)))
    grids[dim] = index
    return tuple(grids)


def leading_block(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The view ``x[:shape[0], :shape[1], ...]``."""
    return x[tuple(slice(n) for n in shape)]


@kernel("aten::gather.out")
def gather(self: np.ndarray, dim: int, index: np.ndarray, sparse_grad: bool, out: np.ndarray) -> np.ndarray:
    """``out[i][j] = self[index[i][j]][j]`` for ``dim`` 0 (and likewise for other dims)."""
    where = along_axis(at_least_1d(index), wrap_dim(dim, self.ndim))
    return copy_into(out, at_least_1d(self)[where].reshape(index.shape))


def at_least_1d(x: np.ndarray) -> np.ndarray:
    """A 0-D tensor as a 1-element 1-D view (torch's scatter/gather treat them alike); others unchanged."""
    return x.reshape(x.shape or (1,))


def scattered(self: np.ndarray, dim: int, index: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple]:
    """``out`` resized and holding a copy of ``self``, its at-least-1-D view, and the fancy index to write to."""
    out = copy_into(out, self)
    return out, at_least_1d(out), along_axis(at_least_1d(index), wrap_dim(dim, self.ndim))


def scatter_source(src: np.ndarray | float | int | bool, index: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The part of ``src`` the scatter reads (its leading block of ``index``'s shape), in ``dtype``."""
    if isinstance(src, np.ndarray):
        return leading_block(at_least_1d(src), at_least_1d(index).shape).astype(dtype, copy=False)
    return np.asarray(src).astype(dtype)


REDUCE_UFUNCS = {
    "add": np.add,
    "sum": np.add,
    "multiply": np.multiply,
    "prod": np.multiply,
    "amax": np.maximum,
    "amin": np.minimum,
}


def reduce_ufunc(reduce: str) -> np.ufunc:
    """The NumPy ufunc for a scatter reduction name."""
    try:
        return REDUCE_UFUNCS[reduce]
    except KeyError:
        raise InvalidArgumentError(
            f"unsupported scatter reduction {reduce!r}; expected one of {sorted(REDUCE_UFUNCS)}"
        ) from None


def scatter_into(
    self: np.ndarray,
    dim: int,
    index: np.ndarray,
    src: np.ndarray | float,
    out: np.ndarray,
    reduce: str | None = None,
) -> np.ndarray:
    """A copy of ``self`` with ``src`` written (or reduced with ``reduce``) at ``index`` along ``dim``."""
    out, target, where = scattered(self, dim, index, out)
    values = scatter_source(src, index, target.dtype)
    if reduce is None:
        target[where] = values
    else:
        reduce_ufunc(reduce).at(target, where, values)
    return out


@kernel("aten::scatter.src_out", "aten::scatter.value_out")
def scatter(self: np.ndarray, dim: int, index: np.ndarray, src: np.ndarray | float, out: np.ndarray) -> np.ndarray:
    """A copy of ``self`` with ``self[index[i][j]][j] = src[i][j]`` (dim 0), ``src`` a tensor or a scalar."""
    return scatter_into(self, dim, index, src, out)


@kernel("aten::scatter.reduce_out", "aten::scatter.value_reduce_out")
def scatter_reduce_legacy(
    self: np.ndarray, dim: int, index: np.ndarray, src: np.ndarray | float, reduce: str, out: np.ndarray
) -> np.ndarray:
    """Like scatter, but combining with the existing value by ``reduce`` ("add" or "multiply")."""
    return scatter_into(self, dim, index, src, out, reduce)


@kernel("aten::scatter_add.out")
def scatter_add(self: np.ndarray, dim: int, index: np.ndarray, src: np.ndarray, out: np.ndarray) -> np.ndarray:
    """A copy of ``self`` with ``src`` added at ``index`` along ``dim`` (repeated indices accumulate)."""
    return scatter_into(self, dim, index, src, out, "add")


def reduction_identity(reduce: str, dtype: np.dtype) -> object:
    """The value a reduction starts from, so positions ignore ``self`` when ``include_self`` is False."""
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min if reduce == "amax" else info.max
    if dtype.kind == "b":
        return reduce == "amin"
    return -np.inf if reduce == "amax" else np.inf


@kernel("aten::scatter_reduce.two_out")
def scatter_reduce(
    self: np.ndarray,
    dim: int,
    index: np.ndarray,
    src: np.ndarray,
    reduce: str,
    include_self: bool,
    out: np.ndarray,
) -> np.ndarray:
    """``self`` with ``src`` reduced in at ``index`` by sum, prod, mean, amax or amin."""
    out, target, where = scattered(self, dim, index, out)
    values = scatter_source(src, index, target.dtype)
    if not include_self:
        target[where] = reduction_identity(reduce, target.dtype)
    if reduce == "mean":
        counts = np.full(target.shape, int(include_self), dtype=np.int64)
        np.add.at(counts, where, 1)
        np.add.at(target, where, values)
        np.maximum(counts, 1, out=counts)
        divide = np.floor_divide if target.dtype.kind in "iu" else np.true_divide
        divide(target, counts, out=target, casting="unsafe")
    else:
        reduce_ufunc(reduce).at(target, where, values)
    return out


@kernel("aten::index_copy.out")
def index_copy(self: np.ndarray, dim: int, index: np.ndarray, source: np.ndarray, out: np.ndarray) -> np.ndarray:
    """A copy of ``self`` with the slices at ``index`` along ``dim`` replaced by ``source`` (a KV-cache update)."""
    out = copy_into(out, self)
    dim = wrap_dim(dim, self.ndim)
    shape = list(out.shape)
    shape[dim] = index.size
    out[along(dim, index.reshape(-1))] = source.reshape(shape)
    return out


@kernel("aten::index_add.out")
def index_add(
    self: np.ndarray, dim: int, index: np.ndarray, source: np.ndarray, alpha: float, out: np.ndarray
) -> np.ndarray:
    """A copy of ``self`` with ``alpha * source`` added to the slices at ``index`` along ``dim``."""
    out = copy_into(out, self)
    values = source if alpha == 1 else source * alpha
    np.add.at(out, along(wrap_dim(dim, self.ndim), index.reshape(-1)), values.astype(out.dtype, copy=False))
    return out


@kernel("aten::index_fill.int_Scalar_out", "aten::index_fill.int_Tensor_out")
def index_fill(self: np.ndarray, dim: int, index: np.ndarray, value: np.ndarray | float, out: np.ndarray) -> np.ndarray:
    """A copy of ``self`` with the slices at ``index`` along ``dim`` set to ``value`` (a scalar or 0-D tensor)."""
    out = copy_into(out, self)
    out[along(wrap_dim(dim, self.ndim), index.reshape(-1))] = value
    return out


@kernel("aten::select_scatter.out")
def select_scatter(self: np.ndarray, src: np.ndarray, dim: int, index: int, out: np.ndarray) -> np.ndarray:
    """A copy of ``self`` with slice ``index`` along ``dim`` replaced by ``src``."""
    out = copy_into(out, self)
    out[along(wrap_dim(dim, self.ndim), index)] = src
    return out


@kernel("aten::slice_scatter.out")
def slice_scatter(
    self: np.ndarray,
    src: np.ndarray,
    dim: int,
    start: int | None,
    end: int | None,
    step: int,
    out: np.ndarray,
) -> np.ndarray:
    """A copy of ``self`` with ``self[start:end:step]`` along ``dim`` replaced by ``src``."""
    out = copy_into(out, self)
    out[along(wrap_dim(dim, self.ndim), slice(start, end, step))] = src
    return out


@kernel("aten::masked_scatter.out")
def masked_scatter(self: np.ndarray, mask: np.ndarray, source: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``self`` (broadcast with ``mask``) with the masked positions filled, in order, from ``source``."""
    shape = np.broadcast_shapes(self.shape, mask.shape)
    out = copy_into(out, np.broadcast_to(self, shape))
    full_mask = np.broadcast_to(mask, shape)
    count = int(np.count_nonzero(full_mask))
    if count > source.size:
        raise InvalidArgumentError(f"masked_scatter: mask selects {count} elements but source has only {source.size}")
    out[full_mask] = source.reshape(-1)[:count]
    return out


@kernel("aten::masked_select.out")
def masked_select(self: np.ndarray, mask: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The elements of ``self`` (broadcast with ``mask``) where ``mask`` is true, as a 1-D tensor."""
    shape = np.broadcast_shapes(self.shape, mask.shape)
    return copy_into(out, np.broadcast_to(self, shape)[np.broadcast_to(mask, shape)])


@kernel("aten::nonzero.out")
def nonzero(self: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The coordinates of the non-zero elements of ``self``, one row each (an ``(n, ndim)`` tensor)."""
    return copy_into(out, np.argwhere(self))


@kernel("aten::take.out")
def take(self: np.ndarray, index: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The elements of flattened ``self`` at ``index`` (negative counts from the end), shaped like ``index``."""
    n = self.size
    if index.size and (index.min() < -n or index.max() >= n):
        raise OutOfRangeError(f"take: index out of range for a tensor of {n} elements")
    return copy_into(out, self.reshape(-1)[index])


@kernel("aten::nonzero_static.out")
def nonzero_static(self: np.ndarray, size: int, fill_value: int, out: np.ndarray) -> np.ndarray:
    """The first ``size`` coordinates of non-zero elements, padded with ``fill_value`` rows to ``size``."""
    found = np.argwhere(self)[:size]
    out = resize(out, (size, self.ndim))
    out[: len(found)] = found
    out[len(found) :] = fill_value
    return out


_BAG_SUM, _BAG_MEAN, _BAG_MAX = 0, 1, 2


def _bag_of_each_index(n: int, offsets: np.ndarray, num_bags: int) -> np.ndarray:
    """Torch's ``offset2bag``: the bag each index position falls in (the last bag runs to the end)."""
    starts = offsets[:num_bags].astype(np.int64)
    return np.maximum(np.searchsorted(starts, np.arange(n), side="right") - 1, 0)


def _bag_max(
    rows: np.ndarray, where: np.ndarray, bags: np.ndarray, indices: np.ndarray, num_bags: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per bag and column the largest row value and the index (weight row) of its first occurrence."""
    best = np.full((num_bags, rows.shape[1]), -np.inf, rows.dtype)
    np.maximum.at(best, bags, rows)
    n = indices.shape[0]
    first = np.full(best.shape, n, np.int64)
    np.minimum.at(first, bags, np.where(rows == best[bags], where[:, None], n))
    best[first == n] = 0  # empty bags
    return best, np.append(indices, 0)[first]


def _embedding_bag(
    weight: np.ndarray,
    indices: np.ndarray,
    offsets: np.ndarray,
    mode: int,
    per_sample_weights: np.ndarray | None,
    include_last_offset: bool,
    padding_idx: int,
    outs: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    sum_bag_size: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Both embedding-bag kernels; in sum mode bag_size is ``sum_bag_size`` zeros, max_indices one per bag."""
    if mode not in (_BAG_SUM, _BAG_MEAN, _BAG_MAX):
        raise InvalidArgumentError(f"embedding_bag: mode must be 0 (sum), 1 (mean) or 2 (max), got {mode}")
    n, rows_in_weight = indices.shape[0], weight.shape[0]
    if n and (indices.min() < 0 or indices.max() >= rows_in_weight):
        raise OutOfRangeError(f"embedding_bag: indices must be in [0, {rows_in_weight}), the rows of weight")
    num_bags = offsets.shape[0] - int(include_last_offset)
    bag = _bag_of_each_index(n, offsets, num_bags)
    fast_path = (weight.dtype == np.float32 or is_reduced_float(weight.dtype)) and padding_idx < 0
    keep = indices != padding_idx if padding_idx >= 0 else np.ones(n, np.bool_)
    bag_size = np.bincount(bag[keep], minlength=num_bags)
    rows = weight[indices].astype(compute_dtype(weight.dtype), copy=False)
    if mode == _BAG_MAX:
        where = np.flatnonzero(keep)
        result, max_indices = _bag_max(rows[where], where, bag[where], indices, num_bags)
    else:
        if fast_path and include_last_offset and num_bags:
            keep = keep & (np.arange(n) < offsets[num_bags])  # torch's fast path stops at the last offset
        scaled = rows[keep] if per_sample_weights is None else rows[keep] * per_sample_weights[keep, None]
        result = np.zeros((num_bags, weight.shape[1]), rows.dtype)
        np.add.at(result, bag[keep], scaled)
        if mode == _BAG_MEAN:
            result /= np.maximum(bag_size, 1)[:, None]
            max_indices = bag_size
        else:
            bag_size, max_indices = np.zeros(sum_bag_size, np.int64), np.zeros(num_bags, np.int64)
    return (
        copy_into(outs[0], result),
        copy_into(outs[1], bag[:0] if fast_path and mode == _BAG_SUM else bag),
        copy_into(outs[2], bag_size),
        copy_into(outs[3], max_indices),
    )


@kernel("aten::_embedding_bag.out")
def embedding_bag(
    weight: np.ndarray,
    indices: np.ndarray,
    offsets: np.ndarray,
    scale_grad_by_freq: bool,
    mode: int,
    sparse: bool,
    per_sample_weights: np.ndarray | None,
    include_last_offset: bool,
    padding_idx: int,
    out0: np.ndarray,
    out1: np.ndarray,
    out2: np.ndarray,
    out3: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sums, means or maxima of bags of ``weight`` rows, and torch's CPU side outputs.

    Bag ``b`` holds ``indices[offsets[b]:offsets[b + 1]]``, the last bag running to the end; rows at
    ``padding_idx`` (when >= 0) are left out. The outputs are (result, offset2bag, bag_size,
    max_indices) as torch's CPU kernel fills them, quirks included: its fast path (float32, float16
    and bfloat16 weights, no padding_idx) leaves offset2bag empty for sum, and ends a sum or mean at
    the last offset when ``include_last_offset`` where the other paths run to the end; bag_size
    counts rows for mean and max and is zero for sum; max_indices holds the argmax rows for max and
    repeats bag_size for mean.
    """
    outs = (out0, out1, out2, out3)
    num_bags = offsets.shape[0] - int(include_last_offset)
    return _embedding_bag(
        weight, indices, offsets, mode, per_sample_weights, include_last_offset, padding_idx, outs, num_bags
    )


@kernel("aten::_embedding_bag_forward_only.out")
def embedding_bag_forward_only(
    weight: np.ndarray,
    indices: np.ndarray,
    offsets: np.ndarray,
    scale_grad_by_freq: bool,
    mode: int,
    sparse: bool,
    per_sample_weights: np.ndarray | None,
    include_last_offset: bool,
    padding_idx: int,
    out0: np.ndarray,
    out1: np.ndarray,
    out2: np.ndarray,
    out3: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`embedding_bag` as torch runs it without autograd: in sum mode bag_size has one (zero) entry
    per offset, even the last one that ``include_last_offset`` does not count as a bag. (Eager torch
    sizes max_indices so too, but its shape function, which plans ``out3``, gives one per bag.)"""
    outs = (out0, out1, out2, out3)
    return _embedding_bag(
        weight, indices, offsets, mode, per_sample_weights, include_last_offset, padding_idx, outs, offsets.shape[0]
    )


@kernel("aten::index_reduce.out")
def index_reduce(
    self: np.ndarray,
    dim: int,
    index: np.ndarray,
    source: np.ndarray,
    reduce: str,
    include_self: bool,
    out: np.ndarray,
) -> np.ndarray:
    """``self`` with the slices of ``source`` reduced (prod, mean, amax, amin) into the slices at ``index`` along
    ``dim``; a mean divides by the number of values reduced into each slice (floor division for integers)."""
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise InvalidArgumentError(f"index_reduce: reduce must be 'prod', 'mean', 'amax' or 'amin', got {reduce!r}")
    out = copy_into(out, self)
    dim = wrap_dim(dim, self.ndim)
    target = at_least_1d(out)  # a 0-D self is indexed as one of size 1, as in torch
    where = along(dim, index.reshape(-1).astype(np.int64))
    values = np.asarray(source).astype(out.dtype, copy=False).reshape(target[where].shape)
    if not include_self:
        target[where] = reduction_identity(reduce, out.dtype)
    if reduce != "mean":
        reduce_ufunc(reduce).at(target, where, values)
        return out
    counts = np.full(target.shape[dim], int(include_self), dtype=np.int64)
    np.add.at(counts, index.reshape(-1).astype(np.int64), 1)
    np.add.at(target, where, values)
    counts = np.maximum(counts, 1).reshape((-1,) + (1,) * (target.ndim - dim - 1))
    divide = np.floor_divide if out.dtype.kind in "iu" else np.true_divide
    divide(target, counts.astype(out.dtype), out=target, casting="unsafe")
    return out


@kernel("aten::put.out")
def put(self: np.ndarray, index: np.ndarray, source: np.ndarray, accumulate: bool, out: np.ndarray) -> np.ndarray:
    """A copy of ``self`` with ``source`` written (or, with ``accumulate``, added) at the flat indices ``index``."""
    out = copy_into(out, self)
    flat = out.reshape(-1)
    where = index.reshape(-1).astype(np.int64)
    if where.size and (where.max() >= flat.size or where.min() < -flat.size):
        raise OutOfRangeError(f"put: an index is out of range for a tensor of {flat.size} elements; found {where}")
    values = np.asarray(source).reshape(-1).astype(out.dtype, copy=False)
    if accumulate:
        np.add.at(flat, where, values)
    else:
        flat[where] = values
    return out


def _segment_bounds(
    data: np.ndarray, axis: int, lengths: np.ndarray | None, offsets: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of every segment, each shaped like the batch dims before ``axis`` plus the segment dim."""
    if offsets is not None:
        offsets = offsets.astype(np.int64)
        return offsets[..., :-1], offsets[..., 1:]
    if lengths is None:
        raise InvalidArgumentError("segment_reduce: expected lengths or offsets; found neither")
    ends = np.cumsum(lengths.astype(np.int64), axis=-1)
    return ends - lengths, ends


@kernel("aten::segment_reduce.out")
def segment_reduce(
    data: np.ndarray,
    reduce: str,
    lengths: np.ndarray | None,
    indices: np.ndarray | None,
    offsets: np.ndarray | None,
    axis: int,
    unsafe: bool,
    initial: float | None,
    out: np.ndarray,
) -> np.ndarray:
    """Reduce (max, min, sum, mean, prod) consecutive segments of ``data`` along ``axis``, their sizes given by
    ``lengths`` or ``offsets`` (batched over the dims before ``axis``). An empty segment gives ``initial``, or
    the reduction's identity (NaN for mean); a mean divides ``initial`` + the sum by the segment's length."""
    ufuncs = {"max": np.maximum, "min": np.minimum, "sum": np.add, "mean": np.add, "prod": np.multiply}
    if reduce not in ufuncs:
        raise InvalidArgumentError(f"segment_reduce: reduce must be one of {sorted(ufuncs)}, got {reduce!r}")
    axis = wrap_dim(axis, data.ndim)
    starts, ends = _segment_bounds(data, axis, lengths, offsets)
    segments = starts.shape[-1]
    out = resize(out, data.shape[:axis] + (segments,) + data.shape[axis + 1 :])
    x = data.astype(np.float64) if data.dtype.kind == "f" or is_reduced_float(data.dtype) else data
    identity = {"max": -np.inf, "min": np.inf, "sum": 0, "mean": 0, "prod": 1}[reduce]
    start_value = identity if initial is None else initial
    result = np.empty(out.shape, dtype=np.float64 if x.dtype.kind == "f" else x.dtype)
    for batch in np.ndindex(*data.shape[:axis]):
        for s in range(segments):
            lo, hi = int(starts[batch + (s,)]), int(ends[batch + (s,)])
            part = x[batch + (slice(lo, hi),)]
            value = (
                ufuncs[reduce].reduce(part, axis=0, initial=start_value)
                if hi > lo
                else np.full(part.shape[1:], start_value, dtype=result.dtype)
            )
            if reduce in ("max", "min") and hi > lo and x.dtype.kind == "f":  # NaN wins, as in torch
                value = np.where(np.isnan(part).any(axis=0), np.nan, value)
            if reduce == "mean":
                value = (
                    value / (hi - lo) if hi > lo else (np.full(part.shape[1:], np.nan) if initial is None else value)
                )
            result[batch + (s,)] = value
    np.copyto(out, result, casting="unsafe")
    return out
