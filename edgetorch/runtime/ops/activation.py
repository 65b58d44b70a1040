"""Activations and softmax as ops: one step builder each, used by the portable kernels, the load-time fusions
and the XNNPACK delegate alike, so that the same op gives the same bits in every runtime on the same tier.

A builder takes its input and output arrays (the output may be the input) and returns the step that computes
it: the compiled tier's one-pass kernel when the runtime's policy allows the tier and the arrays suit it
(float32, C-contiguous), else the NumPy formula. ``split`` lets a compiled step cut its rows over the policy's
threads; only a caller that holds BLAS's own threads meanwhile may ask for it (see kernels/blas_threads.py).

Imports NumPy, the policy, the compiled tier and the shared formulas.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import numpy as np

from edgetorch.runtime import policy
from edgetorch.runtime.kernels import compiled
from edgetorch.runtime.kernels.reduction import extreme_last_axis, row_sums
from edgetorch.runtime.ops.numeric import ERFC_EXPONENT, blockwise, erf_block, horner

Step = Callable[[], object]
_F32 = np.dtype(np.float32)


def gelu(x: np.ndarray, y: np.ndarray, approximate: str = "none", split: bool = False) -> Step:
    """The step ``y = GELU(x)``: exact (``approximate="none"``, x Phi(x)) or torch's tanh form, over float
    arrays of one shape and dtype. Float32 uses erfc's fit in both tiers (no 1 + erf(x) that cancels for
    negative x); float64 the erf formula."""
    tanh = approximate == "tanh"
    if policy.compiled_tier() and compiled.flat_float32(x, y):
        return compiled.rows_step("gelu_tanh" if tanh else "gelu", x.reshape(-1), y.reshape(-1), split=split)
    if tanh:
        return partial(blockwise, _gelu_tanh_block, 1, x, y)
    if x.dtype == _F32:
        return partial(blockwise, _gelu_erfc_block, 3, x, y)
    return partial(blockwise, _gelu_erf_block, 4, x, y)


def _gelu_erf_block(x, out, e, a, s, r):
    np.multiply(x, x.dtype.type(1 / math.sqrt(2)), out=e)
    erf_block(e, out, a, s, r)
    out += x.dtype.type(1)
    np.multiply(x, x.dtype.type(0.5), out=e)
    out *= e


def _gelu_erfc_block(x, out, a, t, e):
    # x * Phi(x) = max(x, 0) - |x| * erfc(|x| / sqrt2) / 2 for either sign of x: no 1 + erf(x) that cancels
    # for negative x, so small results keep their relative precision (float32 only: the fit is not float64's).
    f = x.dtype.type
    np.absolute(x, out=a)
    np.multiply(a, f(0.5 / math.sqrt(2)), out=t)
    t += f(1)
    np.divide(f(1), t, out=t)
    horner((0.0, ERFC_EXPONENT), t, t, e)  # float32-precise erfc
    np.square(x, out=out)
    out *= f(-0.5)
    e += out
    np.exp(e, out=e)
    e *= t
    e *= a
    e *= f(0.5)
    np.maximum(x, f(0), out=out)
    out -= e


def _gelu_tanh_block(x, out, t):
    np.square(x, out=t)
    t *= x.dtype.type(0.044715)
    t *= x
    t += x
    t *= x.dtype.type(math.sqrt(2 / math.pi))
    np.tanh(t, out=t)
    t += x.dtype.type(1)
    t *= x
    np.multiply(t, x.dtype.type(0.5), out=out)


def swiglu(gate: np.ndarray, up: np.ndarray, y: np.ndarray) -> Step:
    """The step ``y = silu(gate) * up`` (a gated linear unit's gate, SiLU times the up projection) over float
    arrays of one shape; ``y`` is neither input. The NumPy formula is the unfused chain's: 1 / (1 + e^-g), times
    g, times u, each rounded to the dtype; the compiled kernel computes the same terms with its own exp (within
    1 ulp)."""
    if policy.compiled_tier() and compiled.flat_float32(gate, up, y):
        return compiled.rows_step("swiglu", gate.reshape(-1), up.reshape(-1), y.reshape(-1), split=False)
    return partial(_swiglu, gate, up, y)


def _swiglu(gate: np.ndarray, up: np.ndarray, y: np.ndarray) -> None:
    one = y.dtype.type(1)
    with np.errstate(over="ignore"):  # e^-g overflows for g below about -88: the sigmoid is then 0, as it should be
        np.negative(gate, out=y)
        np.exp(y, out=y)
    np.add(y, one, out=y)
    np.reciprocal(y, out=y)
    np.multiply(gate, y, out=y)
    np.multiply(y, up, out=y)


def softmax(x: np.ndarray, y: np.ndarray, split: bool = False) -> Step:
    """The step ``y = softmax(x)`` over the last axis (``y`` may be ``x``), shifted by each row's maximum. A
    row holding a NaN gives NaNs, as in torch."""
    if policy.compiled_tier() and compiled.flat_float32(x, y) and x.ndim and x.size:
        n = x.shape[-1]
        return compiled.rows_step("softmax", x.reshape(-1, n), y.reshape(-1, n), False, split=split)
    return partial(_softmax_rows, x, y)


def _softmax_rows(x: np.ndarray, y: np.ndarray) -> None:
    if not x.size:
        return
    xs, ys = (x.reshape(1), y.reshape(1)) if x.ndim == 0 else (x, y)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        shift = extreme_last_axis(np.argmax, xs)  # argmax stops at the first NaN: torch's propagation
        np.subtract(xs, shift, out=ys)
        np.exp(ys, out=ys)
        ys *= np.reciprocal(row_sums(ys, ys.ndim - 1))
