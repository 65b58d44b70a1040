"""The XNNPACK runtime half's own compiled kernels (``pip install edgetorch[fast]``): the ones no other runtime
needs. A residual add with its clamp (``add_clamp``) in one pass with NumPy's bits, transposes that keep
the last axis last (``permute``: attention's head transposes) copied in runs of it, and transposes that move
a short axis last (``gather``: an NCHW image to NHWC), all over the threads from the policy's
``split_outputs`` values on.

The delegate's other kernels are the op layer's, shared with the portable runtime: depthwise convolution and
im2col (edgetorch/runtime/ops/conv.py), pooling (ops/pool.py), GEMM epilogues (ops/epilogue.py), GELU and
softmax (ops/activation.py); the packed GEMM and Winograd's convolution are runtime/kernels/gemm.py and
winograd.py. The measured gains: docs/benchmarks.md, "Compiled float kernels of the fast tier".

The tier is used when numba imports and ``EDGETORCH_FAST`` is not ``0``; without it (numba absent, or failing
to import) every caller keeps its NumPy path. Imports only edgetorch/runtime/kernels/compiled.py, which
detects, imports (on the first compile) and caches numba for every runtime.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgetorch.runtime import policy
from edgetorch.runtime.kernels import compiled as compiled_kernels

flat_float32 = compiled_kernels.flat_float32


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


# The kernels over numba's threads: each part a run of rows (elements for add_clamp) computed by the serial
# kernel, called at its address (``compiled_kernels.address``, passed first) so that its code is compiled once,
# not again inside the threaded build.
def _add_clamp_split(part_at, a, b, y, lo, hi, parts):  # pragma: no cover - compiled
    step = -(-y.size // parts)
    for p in prange(parts):
        first = min(y.size, p * step)
        call_at(_add_clamp_part, part_at, (a, b, y, lo, hi, first, min(y.size, first + step)))


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


def _permute_split(rows_at, x, y, s0, s1, s2, parts):  # pragma: no cover - compiled
    rows = y.shape[0] * y.shape[1]
    step = -(-rows // parts)
    for p in prange(parts):
        first = min(rows, p * step)
        call_at(_permute_rows, rows_at, (x, y, s0, s1, s2, first, min(rows, first + step)))


def _gather_rows(x, y, s0, s1, s2, s3, first, last):  # pragma: no cover - compiled
    """Rows ``first`` .. ``last`` (of D0 x D1) of y [D0, D1, D2, L] = the view of ``x`` whose element (a, b, c, q)
    sits at flat offset a*s0 + b*s1 + c*s2 + q*s3 of ``x``, for a short last axis read at a stride (an NCHW
    image's channels): written in order, each of the L values read from its own plane (unsigned offsets, as
    ``_permute_rows``)."""
    xf, yf = x.reshape(-1), y.reshape(-1)
    d1, d2, run = y.shape[1], y.shape[2], y.shape[3]
    for r in range(first, last):
        a = r // d1
        b = r % d1
        dst = np.uint64(r * d2 * run)
        src = np.uint64(a * s0 + b * s1)
        step, plane = np.uint64(s2), np.uint64(s3)
        if run == 3:  # RGB, unrolled: a loop of three values a pixel costs three times the copy
            for c in range(np.uint64(d2)):
                at = src + c * step
                yf[dst] = xf[at]
                yf[dst + np.uint64(1)] = xf[at + plane]
                yf[dst + np.uint64(2)] = xf[at + plane + plane]
                dst += np.uint64(3)
        else:
            for c in range(np.uint64(d2)):
                at = src + c * step
                for q in range(np.uint64(run)):
                    yf[dst + q] = xf[at + q * plane]
                dst += np.uint64(run)


def _gather_split(rows_at, x, y, s0, s1, s2, s3, parts):  # pragma: no cover - compiled
    rows = y.shape[0] * y.shape[1]
    step = -(-rows // parts)
    for p in prange(parts):
        first = min(rows, p * step)
        call_at(_gather_rows, rows_at, (x, y, s0, s1, s2, s3, first, min(rows, first + step)))


prange: Any = range  # numba's, bound before the first compile (importing this module must not import numba)
call_at: Any = None


def add_clamp(a: Any, b: Any, y: Any, lo: float, hi: float) -> Any:
    """The step y = clamp(a + b, lo, hi) in one pass for float32 C-contiguous arrays of one shape (a residual
    add and its ReLU), from the policy's ``split_outputs`` values on over the
    threads; the bits of NumPy's add then clip. The tier must be on; None for other arrays."""
    HELPERS.require("add_clamp")
    if not flat_float32(a, b, y) or not a.shape == b.shape == y.shape:
        return None
    args = (a, b, y, np.float32(lo), np.float32(hi))
    limit = -(-y.size // policy.current().split_outputs)
    worth = y.size >= 2 * policy.current().split_outputs
    return compiled_kernels.part_split_step(
        "add_clamp_split", _add_clamp_split, _add_clamp_part, (*args, 0, y.size), args, limit, worth
    )


def permute(x: Any, view: Any, y: Any) -> Any:
    """The step copying ``view``, a permutation of the float32 C-contiguous ``x`` that keeps x's last axis last,
    into the C-contiguous ``y`` (attention's head transposes), in runs of that axis and over the threads from
    the policy's ``split_outputs`` values. The tier must be on; None when the permutation has more than four
    axes longer than 1 or moves the last axis."""
    HELPERS.require("permute")
    if not flat_float32(x, y) or view.ndim == 0 or view.strides[-1] != view.itemsize:
        return None
    kept = [(d, st // view.itemsize) for d, st in zip(view.shape[:-1], view.strides[:-1]) if d != 1]
    if len(kept) > 3:
        return None
    kept = [(1, 0)] * (3 - len(kept)) + kept
    args = (x, y.reshape(*(d for d, _ in kept), view.shape[-1]), *(st for _, st in kept))
    rows = kept[0][0] * kept[1][0]
    worth = y.size >= policy.current().split_outputs
    return compiled_kernels.part_split_step(
        "permute_split", _permute_split, _permute_rows, (*args, 0, rows), args, rows, worth
    )


def gather(x: Any, view: Any, y: Any) -> Any:
    """The step copying ``view``, a permutation of the float32 C-contiguous ``x`` that moves a short axis last
    (NCHW -> NHWC of an image), into the C-contiguous ``y``, in runs along the next-to-last axis and over the
    threads from the policy's ``split_outputs`` values. The tier must be on; None when the view has more than
    four axes longer than 1, or fewer than two."""
    HELPERS.require("gather")
    kept = [(d, st // view.itemsize) for d, st in zip(view.shape, view.strides) if d != 1]
    if not flat_float32(x, y) or not 2 <= len(kept) <= 4:
        return None
    kept = [(1, 0)] * (4 - len(kept)) + kept
    args = (x, y.reshape(*(d for d, _ in kept)), *(st for _, st in kept))
    rows = kept[0][0] * kept[1][0]
    worth = y.size >= policy.current().split_outputs
    return compiled_kernels.part_split_step(
        "gather_split", _gather_split, _gather_rows, (*args, 0, rows), args, rows, worth
    )


# ``fn`` compiled with numba and kept under ``name``, or None when the policy turns the tier off: the one
# compile cache of the runtime (kernels/compiled.py), shared with the portable kernels.
compiled = compiled_kernels.compiled
HELPERS = compiled_kernels.Helpers(globals(), compile=("_permute_rows", "_gather_rows", "_add_clamp_part"))
