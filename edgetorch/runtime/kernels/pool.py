"""Pooling, upsampling, padding and grid-sampling kernels over the last 1-3 (spatial) dims.

Max and average pooling are the op layer's (edgetorch/runtime/ops/pool.py), max pooling's indices found here
from the op's maxima; adaptive pooling
reduces one axis at a time; resampling and padding build per-axis source indices and gather with one
``np.take`` into ``out``. Index formulas follow torch's CPU kernels so results match to the bit where torch's
arithmetic allows. Imports only NumPy and the runtime's own modules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from edgetorch.errors import InvalidArgumentError
from edgetorch.runtime.kernels.linalg import LOW_PRECISION, store, upcast
from edgetorch.runtime.kernels.registry import kernel, register_kernel
from edgetorch.runtime.memory import resize
from edgetorch.runtime.ops import pool as pool_op
from edgetorch.runtime.ops import window
from edgetorch.runtime.ops.window import expand


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float32) if dtype in LOW_PRECISION else dtype


def _grid(per_axis: Sequence[np.ndarray]) -> np.ndarray:
    """Sum of 1-d arrays broadcast to the outer grid ``(len(a0), len(a1), ...)``."""
    d = len(per_axis)
    return np.asarray(sum(a.reshape((-1,) + (1,) * (d - 1 - i)) for i, a in enumerate(per_axis)))


def _spatial_strides(sizes: Sequence[int]) -> list[int]:
    return [math.prod(sizes[i + 1 :]) for i in range(len(sizes))]


class _Windows:
    """Geometry of a pooling sweep over the last ``d`` dims of ``x``."""

    def __init__(self, x: np.ndarray, d: int, kernel_size, stride, padding, dilation, ceil_mode: bool) -> None:
        self.kernel = expand(kernel_size, d)
        self.stride = expand(stride or self.kernel, d)
        self.padding = expand(padding, d)
        self.dilation = expand(dilation, d)
        self.sizes = list(x.shape[-d:])
        self.out_sizes = [
            window.output_size(i, k, s, p, p, dl, ceil_mode)
            for i, k, s, p, dl in zip(self.sizes, self.kernel, self.stride, self.padding, self.dilation)
        ]
        self.lead = x.shape[:-d]
        self.out_shape = self.lead + tuple(self.out_sizes)


def _max_pool(
    x: np.ndarray, d: int, kernel_size, stride, padding, dilation, ceil_mode: bool, out: np.ndarray, indices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Max over each window and the flat (per-plane) input index of the first maximum; NaN wins, as in torch."""
    g = _Windows(x, d, kernel_size, stride, padding, dilation, ceil_mode)
    out, indices = resize(out, g.out_shape), resize(indices, g.out_shape)
    sweep, best, best_view = pool_op.maxima(x, g.kernel, g.stride, g.padding, g.dilation, g.out_sizes)
    taps = list(sweep.taps())
    index, index_view = sweep.virtual(np.dtype(np.int64))
    plane = _spatial_strides(g.sizes)
    starts = [np.arange(m) * s - p for m, s, p in zip(sweep.plane, g.stride, g.padding)]
    first_valid = [np.where(a < 0, a + (-a + dl - 1) // dl * dl, a) for a, dl in zip(starts, g.dilation)]
    # Masked copies are far slower than plain ufuncs, so the winning tap is found arithmetically: the first tap
    # equal to the max is the minimum over taps of (t if equal else T).
    n = len(taps)
    code_dtype = np.min_scalar_type(n)
    winner = np.full(best.shape, n, code_dtype)
    equal, code = np.empty(best.shape, bool), np.empty(best.shape, code_dtype)
    for t, tap in enumerate(taps):
        np.equal(sweep.flat_view(tap), best, out=equal)
        np.multiply(equal, code_dtype.type(n - t), out=code)
        np.subtract(code_dtype.type(n), code, out=code)
        np.minimum(winner, code, out=winner)
    if np.issubdtype(_compute_dtype(x.dtype), np.floating) and np.isnan(best).any():
        for t, tap in enumerate(taps):  # torch lets the last NaN of a window win
            winner = np.where(np.isnan(sweep.flat_view(tap)), t, winner)
    offsets = np.array([sum(k * dl * st for k, dl, st in zip(tap, g.dilation, plane)) for tap in taps] + [0])
    np.add(np.take(offsets, winner), sweep.grid([a * st for a, st in zip(starts, plane)]), out=index)
    lowest = best == pool_op.lowest(x.dtype)
    if lowest.any():  # no element beats the initial -inf: torch reports the window's first in-bounds element
        np.copyto(index, np.where(lowest, sweep.grid([f * st for f, st in zip(first_valid, plane)]), index))
    np.copyto(out, best_view)
    np.copyto(indices, index_view)
    return out, indices


@kernel("aten::max_pool2d_with_indices.out")
def max_pool2d_with_indices(
    self: np.ndarray,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    ceil_mode: bool,
    out: np.ndarray,
    indices: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """2-d max pooling of ``(N, C, H, W)`` or ``(C, H, W)`` with indices into each ``H*W`` plane."""
    return _max_pool(self, 2, kernel_size, stride, padding, dilation, ceil_mode, out, indices)


@kernel("aten::max_pool3d_with_indices.out")
def max_pool3d_with_indices(
    self: np.ndarray,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    ceil_mode: bool,
    out: np.ndarray,
    indices: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """3-d max pooling of ``(N, C, D, H, W)`` or ``(C, D, H, W)`` with indices into each ``D*H*W`` volume."""
    return _max_pool(self, 3, kernel_size, stride, padding, dilation, ceil_mode, out, indices)


def _avg_pool(
    x: np.ndarray,
    d: int,
    kernel_size,
    stride,
    padding,
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
    out: np.ndarray,
) -> np.ndarray:
    g = _Windows(x, d, kernel_size, stride, padding, [1], ceil_mode)
    out = resize(out, g.out_shape)
    pads = [(p, p) for p in g.padding]
    for step in pool_op.avg_pool(x, out, g.kernel, g.stride, pads, "NCHW", count_include_pad, divisor_override):
        step()
    return out


@kernel("aten::avg_pool2d.out")
def avg_pool2d(
    self: np.ndarray,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
    out: np.ndarray,
) -> np.ndarray:
    """2-d average pooling (zero padding; divisor per ``count_include_pad`` or ``divisor_override``)."""
    return _avg_pool(self, 2, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, out)


@kernel("aten::avg_pool3d.out")
def avg_pool3d(
    self: np.ndarray,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
    out: np.ndarray,
) -> np.ndarray:
    """3-d average pooling."""
    return _avg_pool(self, 3, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, out)


@kernel("aten::avg_pool1d.out")
def avg_pool1d(
    self: np.ndarray,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    ceil_mode: bool,
    count_include_pad: bool,
    out: np.ndarray,
) -> np.ndarray:
    """1-d average pooling."""
    return _avg_pool(self, 1, kernel_size, stride, padding, ceil_mode, count_include_pad, None, out)


def adaptive_bounds(n: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of torch's ``m`` adaptive windows ``[floor(o*n/m), ceil((o+1)*n/m))`` over ``n``."""
    o = np.arange(m)
    return o * n // m, -(-(o + 1) * n // m)


def _adaptive_sum(x: np.ndarray, axis: int, m: int) -> np.ndarray:
    """Sums of torch's adaptive windows ``[floor(i*n/m), ceil((i+1)*n/m))`` along ``axis``."""
    n = x.shape[axis]
    if n % m == 0:
        return x.reshape(x.shape[:axis] + (m, n // m) + x.shape[axis + 1 :]).sum(axis + 1)
    start, end = adaptive_bounds(n, m)
    # Overlapping windows: difference of a float64 running sum (exact enough for float32 inputs).
    cs = np.cumsum(x, axis=axis, dtype=np.float64)
    cs = np.concatenate([np.zeros_like(np.take(cs, [0], axis)), cs], axis)
    return (np.take(cs, end, axis) - np.take(cs, start, axis)).astype(x.dtype)


def _adaptive_avg_pool(x: np.ndarray, d: int, output_size: list[int], out: np.ndarray) -> np.ndarray:
    sizes, out_sizes = x.shape[-d:], expand(output_size, d)
    out = resize(out, x.shape[:-d] + tuple(out_sizes))
    acc = upcast(x)
    for i, m in enumerate(out_sizes):
        acc = _adaptive_sum(acc, x.ndim - d + i, m)
    bounds = [adaptive_bounds(n, m) for n, m in zip(sizes, out_sizes)]
    divisor = math.prod((end - start).reshape((-1,) + (1,) * (d - 1 - i)) for i, (start, end) in enumerate(bounds))
    if out.dtype == acc.dtype:
        np.divide(acc, divisor, out=out)
        return out
    return store(out, acc / divisor)


@kernel("aten::_adaptive_avg_pool2d.out")
def adaptive_avg_pool2d(self: np.ndarray, output_size: list[int], out: np.ndarray) -> np.ndarray:
    """2-d adaptive average pooling to ``output_size`` (windows may overlap when sizes do not divide)."""
    return _adaptive_avg_pool(self, 2, output_size, out)


@kernel("aten::_adaptive_avg_pool3d.out")
def adaptive_avg_pool3d(self: np.ndarray, output_size: list[int], out: np.ndarray) -> np.ndarray:
    """3-d adaptive average pooling to ``output_size``."""
    return _adaptive_avg_pool(self, 3, output_size, out)


@kernel("aten::adaptive_avg_pool1d.out")
def adaptive_avg_pool1d(self: np.ndarray, output_size: list[int], out: np.ndarray) -> np.ndarray:
    """1-d adaptive average pooling to ``output_size``."""
    return _adaptive_avg_pool(self, 1, output_size, out)


def gather_spatial(x: np.ndarray, per_axis: Sequence[np.ndarray], out: np.ndarray) -> np.ndarray:
    """``out[..., i, j, ...] = x[..., per_axis[0][i], per_axis[1][j], ...]`` as one flat ``np.take``."""
    d = len(per_axis)
    out = resize(out, x.shape[:-d] + tuple(len(a) for a in per_axis))
    flat = _grid([a * s for a, s in zip(per_axis, _spatial_strides(x.shape[-d:]))]).ravel()
    src = x.reshape(x.shape[:-d] + (-1,))
    if out.flags.c_contiguous and out.dtype == x.dtype:
        np.take(src, flat, axis=-1, out=out.reshape(out.shape[:-d] + (-1,)), mode="clip")
        return out
    return store(out, np.take(src, flat, axis=-1).reshape(out.shape))


def _scale_value(scale: float | None, n_in: int, n_out: int, dtype: np.dtype) -> np.floating:
    """torch's ``compute_scales_value``: the reciprocal of a given scale factor, else in/out."""
    if scale is not None and scale > 0:
        return dtype.type(1.0 / scale)
    return dtype.type(n_in) / dtype.type(n_out)


def _nearest_source(n_in: int, n_out: int, scale: float | None, exact: bool) -> np.ndarray:
    dst = np.arange(n_out)
    if not exact and n_out == n_in:
        return dst
    if not exact and n_out == 2 * n_in:
        return dst >> 1
    s = _scale_value(scale, n_in, n_out, np.dtype(np.float32))
    if exact:
        src = np.floor(((dst + 0.5) * np.float64(s)).astype(np.float32))
    else:
        src = np.floor(dst.astype(np.float32) * s)
    return np.minimum(src.astype(np.int64), n_in - 1)


def _upsample_nearest(
    x: np.ndarray, output_size: Sequence[int], scales: Sequence[float | None], exact: bool, out: np.ndarray
) -> np.ndarray:
    d = len(output_size)
    sources = [_nearest_source(n, m, s, exact) for n, m, s in zip(x.shape[-d:], output_size, scales)]
    return gather_spatial(x, sources, out)


def _vec_sizes(
    x: np.ndarray, output_size: list[int] | None, scale_factors: list[float] | None, d: int
) -> tuple[list[int], Sequence[float | None]]:
    """Output sizes and per-axis scales of a ``.vec`` upsample (exactly one of size or factors is given)."""
    if output_size is not None:
        return [int(s) for s in output_size], [None] * d
    if scale_factors is None:
        raise InvalidArgumentError("upsample needs either output_size or scale_factors; both were None")
    factors = list(scale_factors) * d if len(scale_factors) == 1 else list(scale_factors)
    return [int(n * f) for n, f in zip(x.shape[-d:], factors)], factors


@kernel("aten::upsample_nearest2d.vec_out")
def upsample_nearest2d_vec(
    input: np.ndarray, output_size: list[int] | None, scale_factors: list[float] | None, out: np.ndarray
) -> np.ndarray:
    """Nearest-neighbour 2-d resize to ``output_size`` or by ``scale_factors``."""
    sizes, scales = _vec_sizes(input, output_size, scale_factors, 2)
    return _upsample_nearest(input, sizes, scales, False, out)


def _nearest_kernel(d: int, exact: bool):
    def run(self: np.ndarray, output_size: list[int], *scales_and_out):
        *scales, out = scales_and_out
        return _upsample_nearest(self, expand(output_size, d), scales, exact, out)

    run.__doc__ = f"Nearest{'-exact' if exact else ''} {d}-d resize to ``output_size`` (optional per-axis scales)."
    return run


for _d in (1, 2, 3):
    register_kernel(f"aten::upsample_nearest{_d}d.out", _nearest_kernel(_d, False), nargs=3 + _d)
    register_kernel(f"aten::_upsample_nearest_exact{_d}d.out", _nearest_kernel(_d, True), nargs=3 + _d)


def _linear_taps(
    n_in: int, n_out: int, align_corners: bool, scale: float | None, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Source indices and weights ``(i0, i1, w0, w1)`` of linear interpolation along one axis, as torch computes them."""
    t = dtype.type
    if align_corners:
        s = t(n_in - 1) / t(n_out - 1) if n_out > 1 else t(0)
        src = np.arange(n_out, dtype=dtype) * s
    else:
        s = _scale_value(scale, n_in, n_out, dtype)
        src = np.maximum(s * (np.arange(n_out, dtype=dtype) + t(0.5)) - t(0.5), t(0))
    i0 = src.astype(np.int64)
    i1 = i0 + (i0 < n_in - 1)
    w1 = np.clip(src - i0.astype(dtype), t(0), t(1))
    return i0, i1, t(1) - w1, w1


def _upsample_linear(
    x: np.ndarray, output_size: Sequence[int], align_corners: bool, scales: Sequence[float | None], out: np.ndarray
) -> np.ndarray:
    """Separable (bi/tri)linear resize: interpolate the innermost axis first, as torch nests its loops."""
    d = len(output_size)
    out = resize(out, x.shape[:-d] + tuple(output_size))
    ct = _compute_dtype(x.dtype)
    y = x.astype(ct, copy=False)
    for axis in reversed(range(x.ndim - d, x.ndim)):
        i = axis - (x.ndim - d)
        i0, i1, w0, w1 = _linear_taps(x.shape[axis], output_size[i], align_corners, scales[i], ct)
        shape = (-1,) + (1,) * (x.ndim - 1 - axis)
        y = np.take(y, i0, axis) * w0.reshape(shape) + np.take(y, i1, axis) * w1.reshape(shape)
    return store(out, y)


@kernel("aten::upsample_bilinear2d.vec_out")
def upsample_bilinear2d_vec(
    input: np.ndarray,
    output_size: list[int] | None,
    align_corners: bool,
    scale_factors: list[float] | None,
    out: np.ndarray,
) -> np.ndarray:
    """Bilinear 2-d resize to ``output_size`` or by ``scale_factors``."""
    sizes, scales = _vec_sizes(input, output_size, scale_factors, 2)
    return _upsample_linear(input, sizes, align_corners, scales, out)


def _linear_kernel(d: int):
    def run(self: np.ndarray, output_size: list[int], align_corners: bool, *scales_and_out):
        *scales, out = scales_and_out
        return _upsample_linear(self, expand(output_size, d), align_corners, scales, out)

    run.__doc__ = f"{('Linear', 'Bilinear', 'Trilinear')[d - 1]} {d}-d resize to ``output_size``."
    return run


register_kernel("aten::upsample_linear1d.out", _linear_kernel(1), nargs=5)
register_kernel("aten::upsample_bilinear2d.out", _linear_kernel(2), nargs=6)
register_kernel("aten::upsample_trilinear3d.out", _linear_kernel(3), nargs=7)


@kernel("aten::constant_pad_nd.out")
def constant_pad_nd(self: np.ndarray, pad: list[int], value: float, out: np.ndarray) -> np.ndarray:
    """Pad (or, for negative amounts, crop) the last ``len(pad) // 2`` dims; ``pad`` lists (before, after) from the last dim."""
    d = len(pad) // 2
    lo = [int(pad[2 * (d - 1 - i)]) for i in range(d)]
    hi = [int(pad[2 * (d - 1 - i) + 1]) for i in range(d)]
    sizes = self.shape[self.ndim - d :]
    out = resize(out, self.shape[: self.ndim - d] + tuple(n + a + b for n, a, b in zip(sizes, lo, hi)))
    if any(a > 0 for a in lo + hi):
        out.fill(value)
    src = tuple(slice(max(-a, 0), n - max(-b, 0)) for n, a, b in zip(sizes, lo, hi))
    dst = tuple(slice(max(a, 0), max(a, 0) + max(s.stop - s.start, 0)) for a, s in zip(lo, src))
    np.copyto(out[(Ellipsis,) + dst], self[(Ellipsis,) + src], casting="unsafe")
    return out


def _pad_sources(self: np.ndarray, padding: list[int], reflect: bool) -> list[np.ndarray]:
    """Per-axis source indices of reflection or replication padding (``padding`` listed from the last dim)."""
    d = len(padding) // 2
    sources = []
    for i in range(d):
        n = self.shape[self.ndim - d + i]
        lo, hi = padding[2 * (d - 1 - i)], padding[2 * (d - 1 - i) + 1]
        if reflect and (lo >= n or hi >= n):
            raise InvalidArgumentError(
                f"reflection padding ({lo}, {hi}) must be smaller than the padded dim's size {n}"
            )
        idx = np.arange(-lo, n + hi)
        if reflect:
            idx = np.abs(idx)
            idx = np.where(idx > n - 1, 2 * (n - 1) - idx, idx)
        sources.append(np.clip(idx, 0, n - 1))
    return sources


def _pad_kernel(d: int, reflect: bool):
    def run(self: np.ndarray, padding: list[int], out: np.ndarray) -> np.ndarray:
        return gather_spatial(self, _pad_sources(self, padding, reflect), out)

    run.__doc__ = f"{'Reflection' if reflect else 'Replication'} padding of the last {d} dim(s)."
    return run


for _d in (1, 2, 3):
    register_kernel(f"aten::reflection_pad{_d}d.out", _pad_kernel(_d, True))
    register_kernel(f"aten::replication_pad{_d}d.out", _pad_kernel(_d, False))


def _reflect(coord: np.ndarray, twice_low: int, twice_high: int) -> np.ndarray:
    """Fold ``coord`` into ``[twice_low/2, twice_high/2]`` by mirroring at the borders (torch's reflect_coordinates)."""
    if twice_low == twice_high:
        return np.zeros_like(coord)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    coord = np.abs(coord - low)
    extra = np.fmod(coord, span)
    flips = np.floor(coord / span)
    return np.where(flips % 2 == 0, extra + low, span - extra + low)


def _grid_source(coord: np.ndarray, size: int, padding_mode: int, align_corners: bool) -> np.ndarray:
    """Pixel coordinate of normalised grid values in [-1, 1], after border (1) or reflection (2) padding."""
    if align_corners:
        coord = (coord + 1) / 2 * (size - 1)
    else:
        coord = ((coord + 1) * size - 1) / 2
    if padding_mode == 2:
        coord = _reflect(coord, 0, 2 * (size - 1)) if align_corners else _reflect(coord, -1, 2 * size - 1)
    if padding_mode in (1, 2):
        coord = np.clip(coord, 0, size - 1)
    # Like torch, non-finite or huge coordinates become an out-of-bounds pixel instead of overflowing.
    return np.where(np.isfinite(coord) & (np.abs(coord) < 2**31), coord, -100)


@kernel("aten::grid_sampler_2d.out")
def grid_sampler_2d(
    input: np.ndarray,
    grid: np.ndarray,
    interpolation_mode: int,
    padding_mode: int,
    align_corners: bool,
    out: np.ndarray,
) -> np.ndarray:
    """Sample ``input`` (N, C, H, W) at ``grid`` (N, Ho, Wo, 2) points: bilinear (0) or nearest (1) interpolation."""
    return _grid_sample_into("grid_sampler_2d", input, grid, interpolation_mode, padding_mode, align_corners, out)


def _grid_sample_into(
    name: str, input: np.ndarray, grid: np.ndarray, mode: int, padding_mode: int, align_corners: bool, out: np.ndarray
) -> np.ndarray:
    """The grid samplers' shared body: check the mode, size ``out`` as (N, C, *grid's spatial dims), sample."""
    if mode not in (0, 1):
        raise InvalidArgumentError(
            f"{name}: interpolation mode {mode} (bicubic) is not supported by this runtime; "
            "export the model with mode='bilinear' or 'nearest'"
        )
    out = resize(out, (*input.shape[:2], *grid.shape[1:-1]))
    return store(out, _grid_sample(input, grid, mode, padding_mode, align_corners).reshape(out.shape))


def _window_max(windows: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Max over the last axis of ``windows`` and the plane index (from ``ids``) of the winner: the first maximum,
    or the last NaN when there is one (torch's ``val > max || isnan(val)`` scan)."""
    k = np.argmax(windows, axis=-1)
    if windows.dtype.kind == "f" or windows.dtype in LOW_PRECISION:
        nan = np.isnan(windows)
        last_nan = windows.shape[-1] - 1 - np.argmax(nan[..., ::-1], axis=-1)
        k = np.where(nan.any(axis=-1), last_nan, k)
    return np.take_along_axis(windows, k[..., None], -1)[..., 0], np.take_along_axis(ids, k[..., None], -1)[..., 0]


def _adaptive_max_pool(
    x: np.ndarray, d: int, output_size: list[int], out: np.ndarray, indices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    sizes, out_sizes = x.shape[-d:], expand(output_size, d)
    shape = x.shape[:-d] + tuple(out_sizes)
    out, indices = resize(out, shape), resize(indices, shape)
    bounds = [adaptive_bounds(n, m) for n, m in zip(sizes, out_sizes)]
    plane = np.arange(math.prod(sizes)).reshape(sizes)
    for cell in np.ndindex(*out_sizes):
        window = tuple(slice(start[o], end[o]) for (start, end), o in zip(bounds, cell))
        values = x[(Ellipsis,) + window].reshape(x.shape[:-d] + (-1,))
        ids = np.broadcast_to(plane[window].reshape(-1), values.shape)
        out[(Ellipsis, *cell)], indices[(Ellipsis, *cell)] = _window_max(values, ids)
    return out, indices


@kernel("aten::adaptive_max_pool2d.out")
def adaptive_max_pool2d(
    self: np.ndarray, output_size: list[int], out: np.ndarray, indices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """2-d adaptive max pooling to ``output_size``, with indices into each ``H*W`` plane."""
    return _adaptive_max_pool(self, 2, output_size, out, indices)


@kernel("aten::adaptive_max_pool3d.out")
def adaptive_max_pool3d(
    self: np.ndarray, output_size: list[int], out: np.ndarray, indices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """3-d adaptive max pooling to ``output_size``, with indices into each ``D*H*W`` plane."""
    return _adaptive_max_pool(self, 3, output_size, out, indices)


def _fractional_starts(u: np.ndarray, n: int, m: int, k: int) -> np.ndarray:
    """Torch's pseudo-random window starts: ``int((i + u) * a) - int(u * a)`` with ``a = (n - k) / (m - 1)`` for
    the first ``m - 1`` windows (in ``u``'s precision), the last window flush with the end."""
    u = u[..., None]
    starts = np.full(u.shape[:-1] + (m,), n - k, dtype=np.int64)
    if m > 1:
        alpha = u.dtype.type(n - k) / u.dtype.type(m - 1)
        i = np.arange(m - 1, dtype=u.dtype)
        starts[..., :-1] = ((i + u) * alpha).astype(np.int64) - (u * alpha).astype(np.int64)
    return starts


def _fractional_max_pool(
    x: np.ndarray, d: int, kernel_size, output_size, samples: np.ndarray, out: np.ndarray, indices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Max over windows of ``kernel_size`` at starts drawn from ``samples`` (N, C, d) (torch's fractional pooling:
    in 2-d sample 0 places the width windows and sample 1 the height ones; in 3-d they go T, H, W)."""
    sizes, ks, ms = x.shape[-d:], expand(kernel_size, d), expand(output_size, d)
    if any(m + k - 1 > n for n, k, m in zip(sizes, ks, ms)):
        raise InvalidArgumentError(
            f"fractional_max_pool{d}d: output_size {ms} + kernel_size {ks} - 1 exceeds the input size {list(sizes)}"
        )
    lead = x.shape[:-d]
    out, indices = resize(out, lead + tuple(ms)), resize(indices, lead + tuple(ms))
    u = upcast(samples).reshape(-1, d)
    order = [1, 0] if d == 2 else [0, 1, 2]  # which sample places the windows of each spatial axis
    starts = [_fractional_starts(u[:, order[a]], sizes[a], ms[a], ks[a]) for a in range(d)]  # each (planes, m)
    planes = u.shape[0]
    flat = x.reshape(planes, -1)
    strides = _spatial_strides(sizes)
    # For every plane and output cell, the plane index of each of the window's taps: (planes, *ms, taps).
    base = np.asarray(
        sum(
            (s * st).reshape((planes,) + (1,) * a + (ms[a],) + (1,) * (d - a - 1))
            for a, (s, st) in enumerate(zip(starts, strides))
        )
    )
    taps = np.asarray(sum(g * st for g, st in zip(np.meshgrid(*(np.arange(k) for k in ks), indexing="ij"), strides)))
    taps = taps.reshape(-1)
    ids = base[..., None] + taps
    values = np.take_along_axis(flat, ids.reshape(planes, -1), axis=1).reshape(ids.shape)
    best, where = _window_max(values, ids)
    np.copyto(out, best.reshape(out.shape))
    np.copyto(indices, where.reshape(indices.shape))
    return out, indices


@kernel("aten::fractional_max_pool2d.output")
def fractional_max_pool2d(
    self: np.ndarray,
    kernel_size: list[int],
    output_size: list[int],
    random_samples: np.ndarray,
    output: np.ndarray,
    indices: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """2-d fractional max pooling (Graham, 2014) with the window placement ``random_samples`` (N, C, 2) in [0, 1)."""
    return _fractional_max_pool(self, 2, kernel_size, output_size, random_samples, output, indices)


@kernel("aten::fractional_max_pool3d.output")
def fractional_max_pool3d(
    self: np.ndarray,
    kernel_size: list[int],
    output_size: list[int],
    random_samples: np.ndarray,
    output: np.ndarray,
    indices: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """3-d fractional max pooling with the window placement ``random_samples`` (N, C, 3) in [0, 1)."""
    return _fractional_max_pool(self, 3, kernel_size, output_size, random_samples, output, indices)


def _aa_weights(n_in: int, n_out: int, align_corners: bool, scale: float | None) -> np.ndarray:
    """The (n_out, n_in) anti-aliased linear resampling matrix torch uses (PIL's convolution resize): each output
    pixel averages the inputs under a triangle filter stretched by the downscale factor, weights normalised."""
    if align_corners:
        ratio = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    else:
        ratio = 1.0 / scale if scale is not None and scale > 0 else n_in / n_out
    support = ratio if ratio >= 1.0 else 1.0
    invscale = 1.0 / ratio if ratio >= 1.0 else 1.0
    weights = np.zeros((n_out, n_in))
    for i in range(n_out):
        center = ratio * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), n_in)
        w = np.maximum(0.0, 1.0 - np.abs((np.arange(lo, hi) - center + 0.5) * invscale))
        total = w.sum()
        weights[i, lo:hi] = w / total if total != 0 else w
    return weights


@kernel("aten::_upsample_bilinear2d_aa.out")
def upsample_bilinear2d_aa(
    self: np.ndarray,
    output_size: list[int],
    align_corners: bool,
    scales_h: float | None,
    scales_w: float | None,
    out: np.ndarray,
) -> np.ndarray:
    """Anti-aliased bilinear resize of (N, C, H, W) to ``output_size`` (``antialias=True`` in ``interpolate``)."""
    (h, w), (oh, ow) = self.shape[-2:], expand(output_size, 2)
    out = resize(out, self.shape[:-2] + (oh, ow))
    rows, cols = _aa_weights(h, oh, align_corners, scales_h), _aa_weights(w, ow, align_corners, scales_w)
    return store(out, np.einsum("ih,...hw,jw->...ij", rows, self.astype(np.float64), cols))


@kernel("aten::grid_sampler_3d.out")
def grid_sampler_3d(
    input: np.ndarray,
    grid: np.ndarray,
    interpolation_mode: int,
    padding_mode: int,
    align_corners: bool,
    out: np.ndarray,
) -> np.ndarray:
    """Sample ``input`` (N, C, D, H, W) at ``grid`` (N, Do, Ho, Wo, 3) points (x, y, z): trilinear (0) or nearest (1)."""
    return _grid_sample_into("grid_sampler_3d", input, grid, interpolation_mode, padding_mode, align_corners, out)


def _grid_sample(
    input: np.ndarray, grid: np.ndarray, interpolation_mode: int, padding_mode: int, align_corners: bool
) -> np.ndarray:
    """(N, C, points) samples of ``input`` (N, C, *spatial) at ``grid`` (N, *out, len(spatial)) (x first):
    nearest, or (bi/tri)linear as the sum over the 2**k corners in torch's order (x varying fastest)."""
    n, c, *spatial = input.shape
    k = len(spatial)
    sizes = spatial[::-1]  # x, y, z: the grid's coordinate order
    g = upcast(grid).reshape(n, -1, k)
    coords = [_grid_source(g[..., a], size, padding_mode, align_corners) for a, size in enumerate(sizes)]
    if interpolation_mode == 1:
        corners: list[tuple[list[np.ndarray], np.ndarray | float | None]] = [([np.rint(x) for x in coords], None)]
    else:
        low = [np.floor(x) for x in coords]
        corners = []
        for bits in np.ndindex(*(2,) * k):  # outermost axis first, x varies fastest
            weight: np.ndarray | float = 1.0
            for a in range(k):
                weight = weight * (low[a] + 1 - coords[a] if bits[k - 1 - a] == 0 else coords[a] - low[a])
            corners.append(([low[a] + bits[k - 1 - a] for a in range(k)], weight))
    flat = upcast(input).reshape(n, c, -1)
    acc = np.zeros((n, c, g.shape[1]), flat.dtype)
    for picks, corner_weight in corners:
        inside = np.logical_and.reduce([(p >= 0) & (p < size) for p, size in zip(picks, sizes)])
        offset = np.zeros(picks[0].shape)
        for p, size in zip(picks[::-1], sizes[::-1]):  # row-major: z, then y, then x
            offset = offset * size + p
        index = np.where(inside, offset, 0).astype(np.int64)
        values = np.take_along_axis(flat, index[:, None, :], axis=2)
        scale = inside if corner_weight is None else corner_weight * inside
        acc += values * scale[:, None, :].astype(flat.dtype)
    return acc
