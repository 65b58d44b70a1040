"""The compiled tier's sliding-window kernels over channels-last (NHWC) float32 arrays: im2col's columns and max
pooling, each one pass with the padding read in place (no padded copy), with NumPy's bits.

From the policy's ``split_outputs`` outputs on, output rows are split over the runtime's threads (numba's
``prange``; each output computed as on one thread). Used through the op layer (edgetorch/runtime/ops/conv.py
``im2col``, edgetorch/runtime/ops/pool.py ``max_pool``) by every runtime. Imports NumPy, the policy and
kernels/compiled.py (which imports numba on the first compile).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from edgetorch.runtime import policy
from edgetorch.runtime.kernels import compiled as compiled_kernels

prange: Any = range  # numba's, bound before the first compile (importing this module must not import numba)


def _im2col_rows(x, cols, oh, ow, kh, kw, sh, sw, dh, dw, top, left, first, last):  # pragma: no cover - compiled
    """Output rows ``first`` .. ``last`` (of all images' rows, n * OH + i) of the im2col buffer: cols[pixel,
    (ki, kj, c)] = x[n, i*sh - top + ki*dh, j*sw - left + kj*dw, c], zero outside the input, a kernel row at a
    time (:func:`_kernel_row`).

    Both arrays are indexed flat with unsigned offsets: numba checks a signed index for wraparound, which keeps
    the copy loops from vectorising, and a view a run (a slice) costs more than a short run's copy."""
    nb, h, wd, c = x.shape
    run, width = kw * c, kh * kw * c
    xf, cf = x.reshape(-1), cols.reshape(-1)
    one, pixel = np.uint64(1), np.uint64(c)
    for r in range(first, last):
        n = r // oh
        i = r % oh
        for j in range(ow):
            c0 = j * sw - left
            for ki in range(kh):
                row = i * sh - top + ki * dh
                o = np.uint64((r * ow + j) * width + ki * run)
                at = np.uint64(((n * h + row) * wd) * c) if 0 <= row < h else np.uint64(0)
                _kernel_row(xf, cf, o, at, c0, kw, dw, wd, c, pixel, one, row < 0 or row >= h)


def _kernel_row(xf, cf, o, at, c0, kw, dw, wd, c, sc, sk, outside):  # pragma: no cover - compiled (inlined)
    """cf[o : o + KW * C] = one kernel row of a window: the taps at columns c0 + kj * dw of the input row that
    starts at flat offset ``at`` of ``xf`` (a column ``sc`` values after the last, a channel ``sk``), zero for
    the columns outside the input and for the whole row when it is ``outside``. With contiguous pixels and
    dilation 1, a row of taps inside the input is one run of KW x C values, copied as one loop."""
    run = np.uint64(kw * c)
    if outside:
        for q in range(run):
            cf[o + q] = 0.0
    elif sk == 1 and sc == c and dw == 1 and c0 >= 0 and c0 + kw <= wd:
        src = at + np.uint64(c0) * sc
        for q in range(run):
            cf[o + q] = xf[src + q]
    else:
        for kj in range(kw):
            col = c0 + kj * dw
            d = o + np.uint64(kj * c)
            if col < 0 or col >= wd:
                for q in range(np.uint64(c)):
                    cf[d + q] = 0.0
            else:
                src = at + np.uint64(col) * sc
                for q in range(np.uint64(c)):
                    cf[d + q] = xf[src + q * sk]


def _im2col(x, cols, oh, ow, kh, kw, sh, sw, dh, dw, top, left):  # pragma: no cover - compiled
    _im2col_rows(x, cols, oh, ow, kh, kw, sh, sw, dh, dw, top, left, 0, x.shape[0] * oh)


def _im2col_split(x, cols, oh, ow, kh, kw, sh, sw, dh, dw, top, left, parts):  # pragma: no cover - compiled
    rows = x.shape[0] * oh
    step = -(-rows // parts)
    for p in prange(parts):
        first = min(rows, p * step)
        _im2col_rows(x, cols, oh, ow, kh, kw, sh, sw, dh, dw, top, left, first, min(rows, first + step))


def _larger(a, b):  # pragma: no cover - compiled (inlined)
    """The larger of ``a`` and ``b``, NaN if either is (np.maximum's rule)."""
    return a if (a > b) | (a != a) else b


def _max_pool_rows(x, y, kh, kw, sh, sw, dh, dw, top, left, first, last):  # pragma: no cover - compiled
    """Output rows ``first`` .. ``last`` (of all images' rows, n * OH + i) of the max pooling y[n, i, j, c] =
    max over taps (ki, kj) inside the input of x[n, i*sh - top + ki*dh, j*sw - left + kj*dw, c] (-inf where
    no tap is inside): NaN wins, as np.maximum's. A kernel row of three taps inside the input is one loop
    (three loads a value, against a loop a tap); indexed flat with unsigned offsets (see _im2col_rows)."""
    nb, h, wd, c = x.shape
    oh, ow = y.shape[1], y.shape[2]
    xf, yf = x.reshape(-1), y.reshape(-1)
    run = np.uint64(c)
    for r in range(first, last):
        n = r // oh
        i = r % oh
        for j in range(ow):
            o = np.uint64((r * ow + j) * c)
            c0 = j * sw - left
            triple = kw == 3 and c0 >= 0 and c0 + 2 * dw < wd
            for q in range(run):
                yf[o + q] = -np.inf
            for ki in range(kh):
                row = i * sh - top + ki * dh
                if row < 0 or row >= h:
                    continue
                if triple:
                    a = np.uint64(((n * h + row) * wd + c0) * c)
                    b, d = a + np.uint64(dw * c), a + np.uint64(2 * dw * c)
                    for q in range(run):
                        yf[o + q] = _larger(_larger(yf[o + q], xf[a + q]), _larger(xf[b + q], xf[d + q]))
                    continue
                for kj in range(kw):
                    col = c0 + kj * dw
                    if col < 0 or col >= wd:
                        continue
                    a = np.uint64(((n * h + row) * wd + col) * c)
                    for q in range(run):
                        yf[o + q] = _larger(yf[o + q], xf[a + q])


def _max_pool(x, y, kh, kw, sh, sw, dh, dw, top, left):  # pragma: no cover - compiled
    _max_pool_rows(x, y, kh, kw, sh, sw, dh, dw, top, left, 0, y.shape[0] * y.shape[1])


def _max_pool_split(x, y, kh, kw, sh, sw, dh, dw, top, left, parts):  # pragma: no cover - compiled
    rows = y.shape[0] * y.shape[1]
    step = -(-rows // parts)
    for p in prange(parts):
        first = min(rows, p * step)
        _max_pool_rows(x, y, kh, kw, sh, sw, dh, dw, top, left, first, min(rows, first + step))


def im2col_step(x: Any, cols: Any, oh: int, ow: int, *window: Any) -> Any:
    """The step that fills the C-contiguous float32 ``cols`` (N * OH * OW rows of KH * KW * C values) from the
    C-contiguous NHWC float32 ``x`` (``window``: kh, kw, sh, sw, dh, dw, top, left); the tier must be on."""
    HELPERS.require("im2col_step")
    args = (x, cols, oh, ow, *window)
    serial = partial(compiled_kernels.compiled("im2col", _im2col), *args)
    parallel = compiled_kernels.compiled("im2col_split", _im2col_split, parallel=True)
    return compiled_kernels.split_step(
        serial, parallel, args, x.shape[0] * oh, cols.size >= policy.current().split_outputs
    )


def max_pool_step(x: Any, y: Any, *window: Any) -> Any:
    """The step of the max pooling of the C-contiguous NHWC float32 ``x`` into ``y`` (C-contiguous, at the
    output shape; ``window``: kh, kw, sh, sw, dh, dw, top, left); the tier must be on."""
    HELPERS.require("max_pool_step")
    args = (x, y, *window)
    serial = partial(compiled_kernels.compiled("max_pool", _max_pool), *args)
    parallel = compiled_kernels.compiled("max_pool_split", _max_pool_split, parallel=True)
    return compiled_kernels.split_step(
        serial, parallel, args, y.shape[0] * y.shape[1], y.size >= policy.current().split_outputs
    )


HELPERS = compiled_kernels.Helpers(
    globals(), compile=("_im2col_rows", "_max_pool_rows"), inline=("_larger", "_kernel_row")
)
