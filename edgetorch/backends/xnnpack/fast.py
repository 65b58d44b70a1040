"""The optional accelerated tier of the XNNPACK runtime half: loops that NumPy runs as many passes, compiled
once with numba (``pip install edgetorch[fast]``) and cached on disk.

NumPy computes a 3x3 depthwise convolution as 9 multiplies and 8 adds over the whole output plus a bias pass:
17 trips through memory, each on one core. The compiled kernel makes one pass, keeps each output pixel's
channels in registers, and never materialises the taps. It sums the taps in the same order as
the NumPy path (tap by tap, then the bias), with no fused multiply-add (numba compiles without fastmath), so
both tiers give the same float32 results.

The layer's activation (a clamp: ReLU, ReLU6, hardtanh) is applied in the same pass, and a GEMM's bias and
clamp are one pass over its output (``bias_clamp``) instead of two. From the policy's ``split_outputs`` outputs on, the
depthwise layer's rows are split over the runtime's threads (numba's ``prange``; each output computed as on
one thread). The measured gains of these kernels: docs/benchmarks.md, "Compiled float kernels of the fast
tier".

Fully connected and convolution layers with constant float32 weights run the tier's packed GEMM
(edgetorch/runtime/kernels/gemm.py) with their bias and clamp in the same pass; it sums each output's
products in its own order, so those layers agree with the NumPy tier's sgemm within float32 rounding, not
bit for bit.

Convolutions that need im2col fill their columns in one compiled pass (``im2col``, the padding read in place),
and transposes that keep the last axis last copy runs of it (``permute``), both over the threads; so do max
pooling (``max_pool``) and a residual add with its clamp (``add_clamp``), each with NumPy's bits. (3x3
stride-1 convolutions take Winograd's form: edgetorch/runtime/kernels/winograd.py.)

GELU and softmax nodes take the op layer's steps (edgetorch/runtime/ops/activation.py). The tier is used when numba
imports and ``EDGETORCH_FAST`` is not ``0``; without it (numba absent, or failing to import) every caller
keeps its NumPy path. Imports only edgetorch/runtime/kernels/compiled.py, which detects, imports (on the first
compile) and caches numba for both this module and the portable kernels.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from edgetorch.runtime import policy
from edgetorch.runtime.kernels import compiled as compiled_kernels

flat_float32 = compiled_kernels.flat_float32


def _bias_clamp(y, bias, lo, hi):  # pragma: no cover - compiled
    """In place on the [M, C] ``y``: y[m, c] = clamp(y[m, c] + bias[c], lo, hi); an empty bias adds nothing.
    The same float32 add then compare as NumPy's add and clip, so the result is the same bit for bit."""
    m, c = y.shape
    with_bias = bias.shape[0] > 0
    for i in range(m):
        row = y[i]
        for ch in range(c):
            v = row[ch] + bias[ch] if with_bias else row[ch]
            if v < lo:
                v = lo
            elif v > hi:
                v = hi
            row[ch] = v


def _add_clamp_part(a, b, y, lo, hi, first, last):  # pragma: no cover - compiled
    """Elements ``first`` .. ``last`` of the flat y = clamp(a + b, lo, hi): NumPy's add then clip, so the same
    bits (NaN kept)."""
    af, bf, yf = a.reshape(-1), b.reshape(-1), y.reshape(-1)
    for q in range(np.uint64(first), np.uint64(last)):
        v = af[q] + bf[q]
        if v < lo:
            v = lo
        elif v > hi:
            v = hi
        yf[q] = v


def _add_clamp(a, b, y, lo, hi):  # pragma: no cover - compiled
    _add_clamp_part(a, b, y, lo, hi, 0, y.size)


def _add_clamp_split(a, b, y, lo, hi, parts):  # pragma: no cover - compiled
    step = -(-y.size // parts)
    for p in prange(parts):
        first = min(y.size, p * step)
        _add_clamp_part(a, b, y, lo, hi, first, min(y.size, first + step))


def _im2col_rows(x, cols, oh, ow, kh, kw, sh, sw, dh, dw, top, left, first, last):  # pragma: no cover
    """Output rows ``first`` .. ``last`` (of all images' rows, n * OH + i) of the im2col buffer: cols[pixel,
    (ki, kj, c)] = x[n, i*sh - top + ki*dh, j*sw - left + kj*dw, c], zero outside the input (the padding, read
    in place: no padded copy). With dilation 1 a kernel row of taps inside the input is one run of KW x C
    contiguous values, copied as one loop.

    Both arrays are indexed flat with unsigned offsets: numba checks a signed index for wraparound, which keeps
    the copy loops from vectorising, and a view a run (a slice) costs more than a 21-value run."""
    nb, h, wd, c = x.shape
    run, width = kw * c, kh * kw * c
    xf, cf = x.reshape(-1), cols.reshape(-1)
    zero = np.float32(0)
    for r in range(first, last):
        n = r // oh
        i = r % oh
        for j in range(ow):
            c0 = j * sw - left
            whole = dw == 1 and c0 >= 0 and c0 + kw <= wd
            for ki in range(kh):
                row = i * sh - top + ki * dh
                o = np.uint64((r * ow + j) * width + ki * run)
                if row < 0 or row >= h:
                    for q in range(np.uint64(run)):
                        cf[o + q] = zero
                elif whole:
                    at = np.uint64(((n * h + row) * wd + c0) * c)
                    for q in range(np.uint64(run)):
                        cf[o + q] = xf[at + q]
                else:
                    for kj in range(kw):
                        col = c0 + kj * dw
                        d = o + np.uint64(kj * c)
                        if col < 0 or col >= wd:
                            for q in range(np.uint64(c)):
                                cf[d + q] = zero
                        else:
                            at = np.uint64(((n * h + row) * wd + col) * c)
                            for q in range(np.uint64(c)):
                                cf[d + q] = xf[at + q]


def _im2col(x, cols, oh, ow, kh, kw, sh, sw, dh, dw, top, left):  # pragma: no cover - compiled
    _im2col_rows(x, cols, oh, ow, kh, kw, sh, sw, dh, dw, top, left, 0, x.shape[0] * oh)


def _im2col_split(x, cols, oh, ow, kh, kw, sh, sw, dh, dw, top, left, parts):  # pragma: no cover - compiled
    rows = x.shape[0] * oh
    step = -(-rows // parts)
    for p in prange(parts):
        first = min(rows, p * step)
        _im2col_rows(x, cols, oh, ow, kh, kw, sh, sw, dh, dw, top, left, first, min(rows, first + step))


def _permute_rows(x, y, s0, s1, s2, first, last):  # pragma: no cover - compiled
    """Rows ``first`` .. ``last`` (of D0 x D1) of y [D0, D1, D2, L] = the permuted view of ``x`` whose element
    (a, b, c, q) sits at flat offset a*s0 + b*s1 + c*s2 + q of ``x``: runs of L contiguous values, indexed flat
    with unsigned offsets (see _im2col_rows)."""
    xf, yf = x.reshape(-1), y.reshape(-1)
    d1, d2, run = y.shape[1], y.shape[2], y.shape[3]
    for r in range(first, last):
        a = r // d1
        b = r % d1
        for c in range(d2):
            src = np.uint64(a * s0 + b * s1 + c * s2)
            dst = np.uint64((r * d2 + c) * run)
            for q in range(np.uint64(run)):
                yf[dst + q] = xf[src + q]


def _permute(x, y, s0, s1, s2):  # pragma: no cover - compiled
    _permute_rows(x, y, s0, s1, s2, 0, y.shape[0] * y.shape[1])


def _permute_split(x, y, s0, s1, s2, parts):  # pragma: no cover - compiled
    rows = y.shape[0] * y.shape[1]
    step = -(-rows // parts)
    for p in prange(parts):
        first = min(rows, p * step)
        _permute_rows(x, y, s0, s1, s2, first, min(rows, first + step))


def _larger(a, b):  # pragma: no cover - compiled (inlined)
    """The larger of ``a`` and ``b``, NaN if either is (np.maximum's rule)."""
    return a if (a > b) | (a != a) else b


def _max_pool_rows(x, y, kh, kw, sh, sw, dh, dw, top, left, first, last):  # pragma: no cover - compiled
    """Output rows ``first`` .. ``last`` (of all images' rows, n * OH + i) of the max pooling y[n, i, j, c] =
    max over taps (ki, kj) inside the input of x[n, i*sh - top + ki*dh, j*sw - left + kj*dw, c] (-inf where
    no tap is inside): NaN wins, as np.maximum's. A kernel row of three taps inside the input is one loop
    (three loads a value, against a loop a tap); indexed flat with
    unsigned offsets (see _im2col_rows)."""
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


_KERNELS = {"bias_clamp": _bias_clamp}

# The fewest output values (rows x columns x channels) a depthwise layer splits across threads at.
prange: Any = range  # numba's, bound before the first compile (importing this module must not import numba)


def im2col(x: Any, cols: Any, oh: int, ow: int, *window: Any) -> Any:
    """The step that fills the [N * OH * OW, KH * KW * C] float32 ``cols`` from the NHWC float32 ``x``
    (C-contiguous both; ``window`` is kh, kw, sh, sw, dh, dw, top, left), padding included: one pass instead of
    a padded copy and a strided copy with C-long inner loops; from the policy's ``split_outputs`` values on, split over the
    threads. None when the tier is not usable."""
    if not _bind():
        return None
    args = (x, cols, oh, ow, *window)
    serial = partial(compiled("im2col", _im2col), *args)
    parallel = compiled("im2col_split", _im2col_split, parallel=True)
    return compiled_kernels.split_step(
        serial, parallel, args, x.shape[0] * oh, cols.size >= policy.current().split_outputs
    )


def add_clamp(a: Any, b: Any, y: Any, lo: float, hi: float) -> Any:
    """The step y = clamp(a + b, lo, hi) in one pass for float32 C-contiguous arrays of one shape (a residual
    add and its ReLU), from the policy's ``split_outputs`` values on over the
    threads; the bits of NumPy's add then clip. None when the tier is not usable or for other arrays."""
    if not flat_float32(a, b, y) or not a.shape == b.shape == y.shape or not _bind():
        return None
    args = (a, b, y, np.float32(lo), np.float32(hi))
    serial = partial(compiled("add_clamp", _add_clamp), *args)
    parallel = compiled("add_clamp_split", _add_clamp_split, parallel=True)
    limit = -(-y.size // policy.current().split_outputs)
    return compiled_kernels.split_step(serial, parallel, args, limit, y.size >= 2 * policy.current().split_outputs)


def max_pool(x: Any, y: Any, *window: Any) -> Any:
    """The step of the max pooling of the NHWC float32 ``x`` into ``y`` (C-contiguous both; ``window`` is kh,
    kw, sh, sw, dh, dw, top, left) in one pass, the padding read in place, instead of a padded copy per
    stride phase and a NumPy pass per tap; from the policy's ``split_outputs`` values on, split over the threads. None when the tier is not usable or
    for other arrays."""
    if not flat_float32(x, y) or not _bind():
        return None
    args = (x, y, *window)
    serial = partial(compiled("max_pool", _max_pool), *args)
    parallel = compiled("max_pool_split", _max_pool_split, parallel=True)
    return compiled_kernels.split_step(
        serial, parallel, args, y.shape[0] * y.shape[1], y.size >= policy.current().split_outputs
    )


def permute(x: Any, view: Any, y: Any) -> Any:
    """The step copying ``view``, a permutation of the float32 C-contiguous ``x`` that keeps x's last axis last,
    into the C-contiguous ``y`` (attention's head transposes), in runs of that axis and over the threads from
    the policy's ``split_outputs`` values; None when the tier is not usable or the permutation has more than four axes longer
    than 1 or moves the last axis."""
    if not flat_float32(x, y) or view.ndim == 0 or view.strides[-1] != view.itemsize or not _bind():
        return None
    kept = [(d, st // view.itemsize) for d, st in zip(view.shape[:-1], view.strides[:-1]) if d != 1]
    if len(kept) > 3:
        return None
    kept = [(1, 0)] * (3 - len(kept)) + kept
    args = (x, y.reshape(*(d for d, _ in kept), view.shape[-1]), *(st for _, st in kept))
    serial = partial(compiled("permute", _permute), *args)
    parallel = compiled("permute_split", _permute_split, parallel=True)
    return compiled_kernels.split_step(
        serial, parallel, args, kept[0][0] * kept[1][0], y.size >= policy.current().split_outputs
    )


def _bind() -> bool:
    """Whether the tier is usable; on the first call, binds numba's ``prange`` and compiles the row helpers the
    split kernels call (numba resolves a kernel's globals when it compiles it)."""
    global prange, _im2col_rows, _permute_rows, _max_pool_rows, _larger, _add_clamp_part
    if not policy.compiled_tier():
        return False
    if prange is range:
        import numba

        prange = numba.prange
        _im2col_rows = compiled("im2col_rows", _im2col_rows)
        _permute_rows = compiled("permute_rows", _permute_rows)
        _larger = numba.njit(cache=True, nogil=True, inline="always")(_larger)  # first: the row kernel calls it
        _max_pool_rows = compiled("max_pool_rows", _max_pool_rows)
        _add_clamp_part = compiled("add_clamp_part", _add_clamp_part)
    return True


# ``fn`` compiled with numba and kept under ``name``, or None when the policy turns the tier off: the one
# compile cache of the runtime (kernels/compiled.py), shared with the portable kernels.
compiled = compiled_kernels.compiled


def kernel(name: str) -> Any:
    """The compiled kernel ``name`` (``bias_clamp``: ``_bias_clamp``; the depthwise one is :func:`depthwise`), or
    None when the tier is not usable (the caller then keeps its NumPy path)."""
    return compiled(name, _KERNELS[name])
