"""RMSNorm as an op: the portable runtime's fused RMSNorm chain (runtime/fusion.py) and the XNNPACK delegate's
(backends/xnnpack/runtime/chains.py) both take it from here.

:func:`rms_scale` is the NumPy formula, ``x * rsqrt(mean(t, -1) + eps)`` from ``t`` (``x ** 2``, or another power
the program asks for), with the float32 operations of the unfused chain: NumPy's reduction for the sum, then
divide, add, square root and reciprocal, each rounded to float32. :func:`rms_norm` is the step builder of the
whole norm, weight included: the compiled tier's one-pass kernel where the policy allows it and the arrays suit
it (equal to the NumPy formula within float32 rounding: it sums the squares in its own order), else the formula.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import numpy as np

from edgetorch.runtime import policy
from edgetorch.runtime.kernels import compiled

Step = Callable[[], object]


def rms_norm(x: np.ndarray, w: np.ndarray, eps: np.ndarray, y: np.ndarray) -> Step:
    """The step ``y = w * (x * rsqrt(mean(x ** 2, -1) + eps))`` over the last axis of the float32 ``x`` (``w``
    [K] float32, ``eps`` a one-element float32 array, ``y`` x's shape, not ``x``)."""
    one_eps = float(eps.reshape(-1)[0])
    if policy.compiled_tier() and compiled.flat_float32(x, w, y) and x.ndim and x.size:
        k = x.shape[-1]
        return compiled.rows_step("rms_norm", x.reshape(-1, k), w, np.float32(one_eps), y.reshape(-1, k), split=False)
    return partial(_rms_norm, x, w, eps, one_eps, y)


def _rms_norm(x: np.ndarray, w: np.ndarray, eps: np.ndarray, one_eps: float, y: np.ndarray) -> None:
    np.multiply(x, x, out=y)
    rms_scale(x, y, eps, one_eps)
    np.multiply(w, y, out=y)


def rms_scale(x: np.ndarray, t: np.ndarray, eps: np.ndarray, one_eps: float | None) -> None:
    """``t`` (float32, x's shape) holds ``x ** p`` on entry and ``x * rsqrt(mean(x ** p, -1) + eps)`` on return.

    ``eps`` is the epsilon as an array that broadcasts against the row means; ``one_eps`` its value as a float
    when it has one element (None otherwise). ``t`` may be the caller's output buffer but not ``x``."""
    total = np.add.reduce(t, axis=-1, keepdims=True)
    n = x.shape[-1]
    # One row (a decode step): its four float32 scalar operations in Python floats, each rounded back to float32,
    # which gives float32's own results (binary64 carries more than twice float32's precision, so rounding twice
    # is exact for +, /, sqrt), instead of four ufunc calls on a 1-element array.
    a = np.float32(np.float32(total.item() / n) + one_eps) if total.size == 1 and one_eps is not None else None
    if a is not None and 0 < a < np.inf:
        np.multiply(x, np.float32(1.0 / float(np.float32(math.sqrt(a)))), out=t)
        return
    with np.errstate(all="ignore"):
        np.divide(total, n, out=total, casting="unsafe")
        np.add(total, eps, out=total)
        np.sqrt(total, out=total)
        np.reciprocal(total, out=total)
    np.multiply(x, total, out=t)
