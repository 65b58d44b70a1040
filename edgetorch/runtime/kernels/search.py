"""Searching, set and counting kernels outside Core ATen: bucketize, searchsorted, isin, unique (sorted, by
dim, consecutive), histc and histogram.

unique's output sizes depend on the data: each kernel resizes its outs inside the planned (upper-bound)
slots. Bin selection follows torch's: histc maps x to int((x - min) * bins / (max - min)) in the input's
precision, histogram searches the bin edges; the last bin includes its right edge, other values outside
the range (and NaN) are not counted. Imports only NumPy and the runtime.
"""

from __future__ import annotations

import functools
import math
from typing import Literal

import numpy as np

from edgetorch.runtime.kernels.promotion import result_type
from edgetorch.runtime.kernels.registry import kernel
from edgetorch.runtime.memory import resize

Number = bool | int | float


def _store(out: np.ndarray, shape: tuple[int, ...], value: np.ndarray | Number) -> np.ndarray:
    out = resize(out, shape)
    np.copyto(out, value, casting="unsafe")
    return out


def _search(sequence: np.ndarray, values: np.ndarray, right: bool, sorter: np.ndarray | None) -> np.ndarray:
    """Insertion indices of ``values`` into ``sequence`` along its last dim (1-d, or one row per leading index)."""
    side: Literal["left", "right"] = "right" if right else "left"
    dtype = result_type(sequence, values)
    sequence, values = sequence.astype(dtype, copy=False), np.asarray(values).astype(dtype, copy=False)
    if sequence.ndim <= 1:
        return np.searchsorted(sequence, values, side=side, sorter=sorter)
    if sequence.shape[:-1] != values.shape[:-1]:
        raise ValueError(
            f"searchsorted: the leading dims of sorted_sequence {sequence.shape} and input {values.shape} must match"
        )
    rows, n = sequence.reshape(-1, sequence.shape[-1]), values.shape[-1]
    flat = values.reshape(-1, n)
    sorts = sorter.reshape(rows.shape) if sorter is not None else [None] * len(rows)
    found = [np.searchsorted(r, v, side=side, sorter=s) for r, v, s in zip(rows, flat, sorts)]
    return np.array(found, dtype=np.int64).reshape(values.shape)


@kernel("aten::searchsorted.Tensor_out", "aten::searchsorted.Scalar_out")
def searchsorted(
    sorted_sequence: np.ndarray,
    self: np.ndarray | Number,
    out_int32: bool,
    right: bool,
    side: str | None,
    sorter: np.ndarray | None,
    out: np.ndarray,
) -> np.ndarray:
    """Indices where ``self`` would be inserted into ``sorted_sequence`` (last dim) to keep it sorted."""
    if side is not None and side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    if side == "left" and right:
        raise ValueError("searchsorted: side='left' contradicts right=True")
    side = side or ("right" if right else "left")
    if sorter is not None and sorter.size == 0:
        sorter = None
    found = _search(sorted_sequence, np.asarray(self), side == "right", sorter)
    return _store(out, np.shape(self), found)


@kernel("aten::bucketize.Tensor_out", "aten::bucketize.Scalar_out")
def bucketize(
    self: np.ndarray | Number, boundaries: np.ndarray, out_int32: bool, right: bool, out: np.ndarray
) -> np.ndarray:
    """The bucket of each value: i with boundaries[i-1] < x <= boundaries[i] (< and <= swapped when ``right``)."""
    if boundaries.ndim != 1:
        raise ValueError(f"bucketize: boundaries must be 1-d, got shape {boundaries.shape}")
    found = _search(boundaries, np.asarray(self), right, None)
    return _store(out, np.shape(self), found)


def _isin(elements, test_elements, invert, out):
    dtype = result_type(np.asarray(elements), np.asarray(test_elements))
    a = np.asarray(elements).astype(dtype, copy=False)
    b = np.asarray(test_elements).astype(dtype, copy=False)
    return _store(out, a.shape, np.isin(a, b, invert=invert))


@kernel("aten::isin.Tensor_Tensor_out", "aten::isin.Tensor_Scalar_out", "aten::isin.Scalar_Tensor_out")
def isin(
    elements: np.ndarray | Number,
    test_elements: np.ndarray | Number,
    assume_unique: bool,
    invert: bool,
    out: np.ndarray,
) -> np.ndarray:
    """Whether each element occurs in ``test_elements`` (negated with ``invert``)."""
    return _isin(elements, test_elements, invert, out)


def _unique_outs(values, inverse, counts, want_inverse, want_counts, inverse_shape, out0, out1, out2):
    out0 = _store(out0, values.shape, values)
    out1 = _store(out1, inverse_shape if want_inverse else (0,), inverse.reshape(inverse_shape) if want_inverse else 0)
    out2 = _store(out2, counts.shape if want_counts else (0,), counts if want_counts else 0)
    return out0, out1, out2


@kernel("aten::_unique2.out")
def unique2(
    self: np.ndarray,
    sorted: bool,
    return_inverse: bool,
    return_counts: bool,
    out0: np.ndarray,
    out1: np.ndarray,
    out2: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct values of ``self`` (sorted, NaNs kept apart as torch does), with inverse indices and counts."""
    values, inverse, counts = np.unique(self.reshape(-1), return_inverse=True, return_counts=True, equal_nan=False)
    return _unique_outs(values, inverse, counts, return_inverse, return_counts, self.shape, out0, out1, out2)


@kernel("aten::unique_dim.out")
def unique_dim(
    self: np.ndarray,
    dim: int,
    sorted: bool,
    return_inverse: bool,
    return_counts: bool,
    out0: np.ndarray,
    out1: np.ndarray,
    out2: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct slices of ``self`` along ``dim``, in lexicographic order, with inverse indices and counts."""
    dim = dim % max(self.ndim, 1)
    values, inverse, counts = np.unique(self, axis=dim, return_inverse=True, return_counts=True)
    return _unique_outs(values, inverse, counts, return_inverse, return_counts, (self.shape[dim],), out0, out1, out2)


@kernel("aten::unique_consecutive.out")
def unique_consecutive(
    self: np.ndarray,
    return_inverse: bool,
    return_counts: bool,
    dim: int | None,
    out0: np.ndarray,
    out1: np.ndarray,
    out2: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``self`` with runs of equal values (or equal slices along ``dim``) collapsed to one."""
    if dim is None:
        x, axis, inverse_shape = self.reshape(-1), 0, self.shape
    else:
        axis = dim % max(self.ndim, 1)
        x, inverse_shape = self, (self.shape[axis],)
    n = x.shape[axis]
    if n == 0:
        starts = np.zeros(0, np.int64)
    else:
        moved = np.moveaxis(x, axis, 0).reshape(n, -1)
        changed = np.any(moved[1:] != moved[:-1], axis=1)
        starts = np.concatenate([[0], np.flatnonzero(changed) + 1])
    values = np.take(x, starts, axis=axis)
    counts = np.diff(np.append(starts, n))
    inverse = np.repeat(np.arange(len(starts)), counts)
    return _unique_outs(values, inverse, counts, return_inverse, return_counts, inverse_shape, out0, out1, out2)


def _linspace(start: float, end: float, steps: int, dtype: np.dtype) -> np.ndarray:
    """torch.linspace in ``dtype``: the first half stepped up from start, the second half down from end."""
    if steps == 1:
        return np.array([start], dtype)
    ct = np.dtype(np.float32) if dtype != np.float64 else dtype
    lo, hi = ct.type(start), ct.type(end)
    step = (hi - lo) / ct.type(steps - 1)
    i = np.arange(steps)
    half = steps // 2
    values = np.where(i < half, lo + step * i.astype(ct), hi - step * (steps - 1 - i).astype(ct))
    return values.astype(dtype)


def _counts(values: np.ndarray, bins: np.ndarray, weight: np.ndarray | None, dtype: np.dtype) -> np.ndarray:
    nbins = len(bins) - 1
    x = values.reshape(-1)
    keep = (x >= bins[0]) & (x <= bins[-1])
    pos = np.minimum(np.searchsorted(bins, x[keep], side="right") - 1, nbins - 1)
    w = None if weight is None else weight.reshape(-1)[keep].astype(np.float64)
    return np.bincount(pos, weights=w, minlength=nbins).astype(dtype)


@kernel("aten::histc.out")
def histc(self: np.ndarray, bins: int, min: Number, max: Number, out: np.ndarray) -> np.ndarray:
    """Counts of ``self`` in ``bins`` equal-width bins over [min, max] (the data's range when min == max)."""
    if bins <= 0:
        raise ValueError(f"histc: bins must be positive, got {bins}")
    lo, hi = float(min), float(max)
    if lo == hi and self.size:
        lo, hi = float(np.min(self)), float(np.max(self))
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if not (np.isfinite(lo) and np.isfinite(hi)) or lo > hi:
        raise ValueError(f"histc: range [{lo}, {hi}] must be finite with min < max")
    edges = _linspace(lo, hi, bins + 1, self.dtype)
    ct = edges.dtype
    x = self.reshape(-1).astype(ct, copy=False)
    left, right = edges[0], edges[-1]
    keep = (x >= left) & (x <= right)
    with np.errstate(all="ignore"):
        pos = ((x[keep] - left) * ct.type(bins) / (right - left)).astype(np.int64)
    pos = np.minimum(pos, bins - 1)
    return _store(out, (bins,), np.bincount(pos, minlength=bins))


def _finish_histogram(counts, edges, density, hist, bin_edges):
    if density:
        counts = counts.astype(np.float64)
        counts = counts / counts.sum() / np.diff(edges.astype(np.float64))
    return _store(hist, counts.shape, counts), _store(bin_edges, edges.shape, edges)


@kernel("aten::histogram.bins_tensor_out")
def histogram_bins(
    self: np.ndarray,
    bins: np.ndarray,
    weight: np.ndarray | None,
    density: bool,
    hist: np.ndarray,
    bin_edges: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Counts (or weights, or a density) of ``self`` in the bins whose edges ``bins`` lists."""
    counts = _counts(self, bins, weight, hist.dtype)
    return _finish_histogram(counts, bins, density, hist, bin_edges)


@kernel("aten::histogram.bin_ct_out")
def histogram_count(
    self: np.ndarray,
    bins: int,
    range: list[float] | None,
    weight: np.ndarray | None,
    density: bool,
    hist: np.ndarray,
    bin_edges: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Counts of ``self`` in ``bins`` equal-width bins over ``range`` (default: the data's min to max)."""
    if range is not None:
        lo, hi = float(range[0]), float(range[1])
    elif self.size:
        lo, hi = float(np.min(self)), float(np.max(self))
    else:
        lo, hi = 0.0, 1.0
    if not (np.isfinite(lo) and np.isfinite(hi)) or lo > hi:
        raise ValueError(f"histogram: range [{lo}, {hi}] must be finite with min <= max")
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    edges = _linspace(lo, hi, bins + 1, self.dtype)
    counts = _counts(self, edges, weight, hist.dtype)
    return _finish_histogram(counts, edges, density, hist, bin_edges)


def _histogramdd_edges(self: np.ndarray, bins: list[int], range: list[float] | None) -> list[np.ndarray]:
    """Equal-width bin edges per dimension of the points ``self`` (..., D): over ``range`` (lo0, hi0, lo1, ...)
    or each dimension's data min to max, widened by 0.5 either side when the two meet (as histogram)."""
    points = self.reshape(-1, self.shape[-1])
    dims = points.shape[1]
    counts = list(bins) * dims if len(bins) == 1 else list(bins)
    edges = []
    for d in map(int, np.arange(dims)):  # ``range`` is the argument here
        if range is not None:
            lo, hi = float(range[2 * d]), float(range[2 * d + 1])
        elif points.shape[0]:
            lo, hi = float(points[:, d].min()), float(points[:, d].max())
        else:
            lo, hi = 0.0, 1.0
        if not (np.isfinite(lo) and np.isfinite(hi)) or lo > hi:
            raise ValueError(f"histogramdd: range [{lo}, {hi}] of dimension {d} must be finite with min <= max")
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        edges.append(_linspace(lo, hi, counts[d] + 1, self.dtype))
    return edges


def _histogramdd(
    self: np.ndarray, edges: list[np.ndarray], weight: np.ndarray | None, density: bool, out: np.ndarray
) -> np.ndarray:
    """Counts (weights, or a density) of the points ``self`` (..., D) in the grid of bins ``edges``."""
    points = self.reshape(-1, self.shape[-1])
    shape = tuple(len(e) - 1 for e in edges)
    keep = np.ones(points.shape[0], bool)
    for d, e in enumerate(edges):
        keep &= (points[:, d] >= e[0]) & (points[:, d] <= e[-1])
    where = [np.minimum(np.searchsorted(e, points[keep, d], side="right") - 1, len(e) - 2) for d, e in enumerate(edges)]
    w = None if weight is None else weight.reshape(-1)[keep].astype(np.float64)
    flat = np.ravel_multi_index(where, shape) if where and points[keep].size else np.zeros(0, np.int64)
    counts = np.bincount(flat, weights=w, minlength=math.prod(shape)).reshape(shape).astype(np.float64)
    if density:
        widths = [np.diff(e.astype(np.float64)) for e in edges]
        volume = functools.reduce(np.multiply.outer, widths) if widths else np.ones(())
        counts = counts / counts.sum() / volume
    return _store(out, shape, counts)


@kernel("aten::_histogramdd_bin_edges.out")
def histogramdd_bin_edges(
    self: np.ndarray,
    bins: list[int],
    range: list[float] | None,
    weight: np.ndarray | None,
    density: bool,
    out: list[np.ndarray],
) -> list[np.ndarray]:
    """The bin edges of each dimension for ``histogramdd`` with bin counts ``bins``."""
    return [_store(o, e.shape, e) for o, e in zip(out, _histogramdd_edges(self, bins, range))]


@kernel("aten::_histogramdd_from_bin_cts.out")
def histogramdd_from_bin_cts(
    self: np.ndarray,
    bins: list[int],
    range: list[float] | None,
    weight: np.ndarray | None,
    density: bool,
    out: np.ndarray,
) -> np.ndarray:
    """The D-dimensional histogram of the points ``self`` (..., D) with ``bins`` equal-width bins per dimension."""
    return _histogramdd(self, _histogramdd_edges(self, bins, range), weight, density, out)


@kernel("aten::_histogramdd_from_bin_tensors.out")
def histogramdd_from_bin_tensors(
    self: np.ndarray, bins: list[np.ndarray], weight: np.ndarray | None, density: bool, out: np.ndarray
) -> np.ndarray:
    """The D-dimensional histogram of the points ``self`` (..., D) over the bin edges ``bins``, one per dimension."""
    return _histogramdd(self, list(bins), weight, density, out)
