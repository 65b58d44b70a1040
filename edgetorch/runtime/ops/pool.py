"""Pooling as ops: max and average pooling over sliding windows, declared once for every runtime, the layout
(NCHW for the portable kernels, 1 to 3 spatial dims; NHWC for the XNNPACK delegate, 2-d) a parameter.

Each builder returns the steps computing ``y``, which the caller allocates at the output shape
(:func:`window.output_size`, ``ceil_mode`` included: windows that run past the input read the padding's fill).
The formulation each tier keeps:

- max pooling, compiled tier, NHWC float32: one pass with the padding read in place (kernels/windows.py);
- max pooling otherwise: one ``np.maximum`` per tap over views with long contiguous rows (stride-phase
  planes). A maximum is exact and NaN wins in each formulation, so all of them give the same bits.
- average pooling: the taps summed in the window's row order in the compute dtype, then divided by each
  window's tap count (:func:`window.window_counts`) or ``divisor_override``; the same bits in both layouts.
- global average pooling (channels last): the pixels summed in order into each channel, then scaled by the
  reciprocal of their count; compiled tier, float32 with several channels: one call (kernels/global_pool.py),
  otherwise NumPy's reduce and multiply, with the same bits.

Imports NumPy, the policy and the runtime's kernels; never torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from edgetorch.errors import InvalidArgumentError
from edgetorch.runtime import policy
from edgetorch.runtime.dtypes import LOW_PRECISION, store
from edgetorch.runtime.kernels import compiled, global_pool, windows
from edgetorch.runtime.ops import window

Step = Callable[[], object]


def lowest(dtype: np.dtype) -> float:
    """The value no element loses a maximum to: the padding of max pooling."""
    return np.iinfo(dtype).min if np.issubdtype(dtype, np.integer) else -np.inf


def max_pool(
    x: np.ndarray,
    y: np.ndarray,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[tuple[int, int]],
    dilation: Sequence[int],
    layout: str = "NCHW",
) -> list[Step]:
    """The steps computing ``y``, the maximum of each window of ``x`` (NaN wins; the padding never does),
    ``padding`` the amounts before and after each spatial axis. The steps read ``x`` when run."""
    _check(x, y, kernel, layout, "max pooling")
    if layout == "NHWC":
        win = _nhwc_window(x, y, kernel, stride, padding, dilation, "max pooling")
        if policy.compiled_tier() and compiled.flat_float32(x, y):
            geometry = (win.kh, win.kw, win.sh, win.sw, win.dh, win.dw, win.top, win.left)
            step = windows.max_pool_step(x, y, *geometry)
            if step is not None:
                return [step]
        views, steps = win.tap_views(x, lowest(x.dtype))
        return steps + _fold(np.maximum, views, y)
    lo = [p[0] for p in padding]
    return [partial(_nchw_max, x, y, list(kernel), list(stride), lo, list(dilation))]


def maxima(
    x: np.ndarray,
    kernel: Sequence[int],
    stride: Sequence[int],
    lo: Sequence[int],
    dilation: Sequence[int],
    out_sizes: Sequence[int],
) -> tuple[window.PhasePlanes, np.ndarray, np.ndarray]:
    """Each window's maximum over the last ``len(kernel)`` dims of ``x`` (NCHW), padded by ``lo`` before each
    axis: the flat phase planes its taps read, the maxima on their virtual grid, and the maxima's view at the
    output's shape (for max pooling's indices, which compare every tap with its window's maximum)."""
    planes = _flat_planes(x, kernel, stride, dilation, lo, out_sizes, lowest(x.dtype), x.dtype)
    best, best_view = planes.virtual(x.dtype)
    taps = list(planes.taps())
    np.copyto(best, planes.flat_view(taps[0]))
    for tap in taps[1:]:
        np.maximum(best, planes.flat_view(tap), out=best)
    return planes, best, best_view


def avg_pool(
    x: np.ndarray,
    y: np.ndarray,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[tuple[int, int]],
    layout: str = "NCHW",
    count_include_pad: bool = False,
    divisor_override: int | None = None,
    dilation: Sequence[int] | None = None,
) -> list[Step]:
    """The steps computing ``y``, the mean of each window of ``x``: its zero-padded sum divided by the taps
    inside the input (with ``count_include_pad``, inside the padded input; torch's rule) or by
    ``divisor_override``. Integer inputs divide with truncation toward zero, as torch does."""
    _check(x, y, kernel, layout, "average pooling")
    d = len(kernel)
    dilation = list(dilation) if dilation is not None else [1] * d
    spatial = slice(1, 3) if layout == "NHWC" else slice(x.ndim - d, x.ndim)
    sizes, out_sizes = x.shape[spatial], y.shape[spatial]
    ct = np.dtype(np.float32) if x.dtype in LOW_PRECISION else x.dtype
    divisor: int | np.ndarray
    if divisor_override:
        divisor = int(divisor_override)
    else:
        counts = [
            window.window_counts(n, k, s, a, b, m, dl, count_include_pad)
            for n, k, s, (a, b), m, dl in zip(sizes, kernel, stride, padding, out_sizes, dilation)
        ]
        grid = np.asarray(math.prod(c.reshape((-1,) + (1,) * (d - 1 - i)) for i, c in enumerate(counts)))
        divisor = grid.astype(ct) if ct.kind == "f" else grid
    if layout == "NHWC":
        win = _nhwc_window(x, y, kernel, stride, padding, dilation, "average pooling")
        views, steps = win.tap_views(x, 0.0)
        scale = divisor if isinstance(divisor, int) else divisor[..., None]
        return steps + _fold(np.add, views, y) + [partial(np.divide, y, scale, out=y)]
    lo = [p[0] for p in padding]
    return [partial(_nchw_avg, x, y, list(kernel), list(stride), lo, dilation, ct, divisor)]


def global_avg_pool(x: np.ndarray, y: np.ndarray) -> list[Step]:
    """The steps computing ``y``, the mean over every axis of ``x`` between the first (batch) and the last
    (channels), ``y`` of shape [N, C] or with those axes kept as 1. The steps read ``x`` when run."""
    axes = tuple(range(1, x.ndim - 1))
    kept = (x.shape[0],) + (1,) * len(axes) + (x.shape[-1],)
    pixels = math.prod(x.shape[a] for a in axes)
    if x.ndim < 3 or y.shape not in (kept, (x.shape[0], x.shape[-1])) or pixels == 0:
        raise InvalidArgumentError(
            f"global average pooling expects an input with spatial dims and an output of shape {kept} or "
            f"{(x.shape[0], x.shape[-1])}, found shapes {x.shape} and {y.shape}"
        )
    scale = y.dtype.type(1.0 / pixels)
    # NumPy adds the pixels one by one only while the channels are the inner loop: with one channel it sums
    # them pairwise, so that case keeps NumPy's reduce
    if policy.compiled_tier() and compiled.flat_float32(x, y) and x.shape[-1] > 1:
        channels = x.shape[-1]
        return [
            global_pool.global_average_step(x.reshape(x.shape[0], pixels, channels), y.reshape(-1, channels), scale)
        ]
    yk = y.reshape(kept)
    return [partial(np.add.reduce, x, axis=axes, keepdims=True, out=yk), partial(np.multiply, yk, scale, out=yk)]


def _check(x: np.ndarray, y: np.ndarray, kernel: Sequence[int], layout: str, what: str) -> None:
    window.check_layout(layout, what)
    d = len(kernel)
    if layout == "NHWC" and (d != 2 or x.ndim != 4):
        raise InvalidArgumentError(
            f"NHWC {what} expects a 2-d window over a 4-d input, found a {d}-d window and input shape {x.shape}"
        )
    if x.ndim < d + 1 or y.ndim != x.ndim:
        raise InvalidArgumentError(
            f"{what} over {d} spatial dims expects an input and output of the same rank with at least {d + 1} "
            f"dims, found shapes {x.shape} and {y.shape}"
        )


def _nhwc_window(
    x: np.ndarray,
    y: np.ndarray,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[tuple[int, int]],
    dilation: Sequence[int],
    what: str,
) -> window.Window:
    (kh, kw), (sh, sw), (dh, dw), ((top, bottom), (left, right)) = kernel, stride, dilation, padding
    win = window.Window(kh, kw, sh, sw, dh, dw, top, right, bottom, left)
    n, h, w, c = x.shape
    if y.shape != (n, *win.out_hw(h, w), c):
        raise InvalidArgumentError(f"{what} output must have shape {(n, *win.out_hw(h, w), c)}, found {y.shape}")
    return win


def _fold(combine: np.ufunc, views: list[np.ndarray], y: np.ndarray) -> list[Step]:
    """The steps ``y = views[0]``, then ``y = combine(y, view)`` for each further view, in order."""
    return [partial(np.copyto, y, views[0])] + [partial(combine, y, view, out=y) for view in views[1:]]


def _flat_planes(
    x: np.ndarray,
    kernel: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    lo: Sequence[int],
    out_sizes: Sequence[int],
    fill: float,
    dtype: np.dtype,
) -> window.PhasePlanes:
    """The flat phase planes of the NCHW ``x`` (its last ``len(kernel)`` dims spatial), filled from ``x`` now."""
    planes = window.PhasePlanes(x, x.ndim - len(kernel), kernel, stride, dilation, lo, out_sizes, fill, dtype, True)
    planes.refresh()
    return planes


def _nchw_max(
    x: np.ndarray, y: np.ndarray, kernel: list[int], stride: list[int], lo: list[int], dilation: list[int]
) -> None:
    np.copyto(y, maxima(x, kernel, stride, lo, dilation, y.shape[y.ndim - len(kernel) :])[2])


def _nchw_avg(
    x: np.ndarray,
    y: np.ndarray,
    kernel: list[int],
    stride: list[int],
    lo: list[int],
    dilation: list[int],
    ct: np.dtype,
    divisor: int | np.ndarray,
) -> None:
    d = len(kernel)
    planes = _flat_planes(x, kernel, stride, dilation, lo, y.shape[y.ndim - d :], 0, ct)
    acc, acc_view = planes.virtual(ct)
    taps = list(planes.taps())
    np.copyto(acc, planes.flat_view(taps[0]))
    for tap in taps[1:]:
        np.add(acc, planes.flat_view(tap), out=acc)
    if np.issubdtype(ct, np.integer):  # torch divides integers in C++: truncation toward zero
        q = np.abs(acc_view) // divisor
        store(y, np.where(acc_view < 0, -q, q))
        return
    np.divide(acc_view, divisor, out=y, casting="unsafe")
