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

Transposes that keep the last axis last copy runs of it (``permute``) over the threads, and a residual add
with its clamp (``add_clamp``) is one pass with NumPy's bits. im2col and max pooling are the op layer's
(edgetorch/runtime/ops/conv.py, ops/pool.py); 3x3 stride-1 convolutions take Winograd's form
(edgetorch/runtime/kernels/winograd.py).

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


def _permute_rows(x, y, s0, s1, s2, first, last):  # pragma: no cover - compiled
    """Rows ``first`` .. ``last`` (of D0 x D1) of y [D0, D1, D2, L] = the permuted view of ``x`` whose element
    (a, b, c, q) sits at flat offset a*s0 + b*s1 + c*s2 + q of ``x``: runs of L contiguous values, indexed flat
    with unsigned offsets: numba checks a signed index for wraparound, which keeps the copy loops from
    vectorising."""
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


_KERNELS = {"bias_clamp": _bias_clamp}

# The fewest output values (rows x columns x channels) a depthwise layer splits across threads at.
prange: Any = range  # numba's, bound before the first compile (importing this module must not import numba)


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
    global prange, _permute_rows, _add_clamp_part
    if not policy.compiled_tier():
        return False
    if prange is range:
        import numba

        prange = numba.prange
        _permute_rows = compiled("permute_rows", _permute_rows)
        _add_clamp_part = compiled("add_clamp_part", _add_clamp_part)
    return True


# ``fn`` compiled with numba and kept under ``name``, or None when the policy turns the tier off: the one
# compile cache of the runtime (kernels/compiled.py), shared with the portable kernels.
compiled = compiled_kernels.compiled


def kernel(name: str) -> Any:
    """The compiled kernel ``name`` (``bias_clamp``: ``_bias_clamp``; the depthwise one is :func:`depthwise`), or
    None when the tier is not usable (the caller then keeps its NumPy path)."""
    return compiled(name, _KERNELS[name])
