"""Float formulas the ops share, in NumPy: erf (NumPy has none), erfc's float32 fit, polynomial evaluation,
a bitwise select, and running a many-pass formula block by block so its work buffers stay in cache.

Imports only NumPy.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)

# erfc(z) = t * exp(-z^2 + P(t)), t = 1 / (1 + z / 2), z >= 0: the Chebyshev fit of Numerical Recipes (section
# 6.2, "erfcc"), relative error below 1.2e-7 for every z. The float32 GELU uses it in both tiers.
ERFC_EXPONENT = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
                 0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277)  # fmt: skip


# erf: NumPy has none. Fitted once at import, from math.erf, as polynomials on a few intervals:
# erf(x) = x * P(x^2) for |x| <= 1, and 1 - exp(-x^2) * Q(|x|) beyond (Q fits erfc(x)*exp(x^2),
# an entire function, so low degrees reach float64 precision). Past the last piece erf rounds to +-1.


def _fit(fn: Callable[[float], float], lo: float, hi: float, degree: int, center: float) -> tuple[float, np.ndarray]:
    """Power-series coefficients, in (x - center), of the Chebyshev interpolant of ``fn`` on [lo, hi]."""
    nodes = np.cos(np.pi * (np.arange(degree + 1) + 0.5) / (degree + 1))
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    values = np.array([fn(mid + half * float(v)) for v in nodes])
    in_nodes = np.polynomial.Polynomial(
        np.polynomial.chebyshev.cheb2poly(np.polynomial.chebyshev.chebfit(nodes, values, degree))
    )
    return center, in_nodes(np.polynomial.Polynomial([(center - mid) / half, 1 / half])).coef


def _erf_over_x(t: float) -> float:
    return math.erf(math.sqrt(t)) / math.sqrt(t)


def _erfcx(x: float) -> float:
    return math.erfc(x) * math.exp(x * x)


def _erf_table(small_degree: int, pieces: list[tuple[float, float, int]]) -> dict:
    return {
        "small": _fit(_erf_over_x, 0.0, 1.0, small_degree, 0.0),
        "pieces": [(lo, hi, _fit(_erfcx, lo, hi, d, (lo + hi) / 2)) for lo, hi, d in pieces],
    }


_ERF = {
    _F32: _erf_table(5, [(1.0, 4.0, 10)]),
    _F64: _erf_table(16, [(1.0, 2.0, 14), (2.0, 3.5, 14), (3.5, 6.0, 12)]),
}


def horner(fit: tuple[float, np.ndarray], x: np.ndarray, s: np.ndarray, r: np.ndarray) -> np.ndarray:
    """The fitted polynomial at ``x`` into ``r``, using ``s`` (which may be ``x``) for x - center."""
    center, coefs = fit
    ft = r.dtype.type
    if center:
        x = np.subtract(x, ft(center), out=s)
    np.multiply(x, ft(coefs[-1]), out=r)
    r += ft(coefs[-2])
    for c in coefs[-3::-1]:
        r *= x
        r += ft(c)
    return r


_INT_OF_SIZE: dict[int, np.dtype] = {
    1: np.dtype(np.int8),
    2: np.dtype(np.int16),
    4: np.dtype(np.int32),
    8: np.dtype(np.int64),
}


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(_INT_OF_SIZE[x.dtype.itemsize])


def select_into(out: np.ndarray, cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``out = where(cond, a, b)`` for boolean ``cond`` and arrays of ``out``'s dtype, broadcast to ``out``.

    Selects bit patterns with integer ops (b ^ ((a ^ b) & mask)), which keeps every value (NaN payloads,
    signed zeros) and runs far faster than a masked copy on random masks, where NumPy's masked loops
    mispredict branches. ``out`` may be ``a`` or ``b``.
    """
    if out.size < 4096:  # below this np.where's fewer calls win (measured)
        np.copyto(out, np.where(cond, a, b))
        return out
    if cond.size * 8 <= out.size:  # a broadcast condition (an attention row mask): if uniform, one copy
        uniform = None if cond.any() and not cond.all() else a if cond.all() else b
        if uniform is not None:  # an attention mask that selects one side everywhere
            np.copyto(out, uniform)
            return out
    if np.may_share_memory(out, b):
        if np.may_share_memory(out, a):
            b = b.copy()
        else:  # write over b last: out = a ^ ((a ^ b) & ~mask)
            cond, a, b = ~cond, b, a
    mask = np.negative(cond.view(np.int8), dtype=_INT_OF_SIZE[out.dtype.itemsize])
    bits, base = _bits(out), _bits(b)
    np.bitwise_xor(_bits(a), base, out=bits)
    np.bitwise_and(bits, mask, out=bits)
    np.bitwise_xor(bits, base, out=bits)
    return out


# Multi-pass formulas run block by block: NumPy makes one pass over memory per ufunc call, so a formula
# of tens of passes over arrays larger than the L2 cache is bound by memory bandwidth. Blocks of 64K
# elements keep the work buffers in cache (erf on 1M float32 runs in half the time); smaller
# blocks lose more to per-call overhead than they gain.
_BLOCK = 1 << 16


def blockwise(fn: Callable, nbuf: int, x: np.ndarray, out: np.ndarray, *params) -> np.ndarray:
    """``fn(x_block, out_block, *work_buffers, *params)`` over 1-D blocks of ``x`` and ``out`` (same shape).

    ``fn`` may read its ``x`` block after writing its ``out`` block: aliased inputs are copied first.
    """
    if not out.flags.c_contiguous:
        tmp = blockwise(fn, nbuf, x, np.empty(out.shape, out.dtype), *params)
        np.copyto(out, tmp)
        return out
    if np.may_share_memory(x, out):
        x = x.copy()
    flat_x, flat_out = x.reshape(-1), out.reshape(-1)
    n = flat_out.size
    buffers = [np.empty(min(n, _BLOCK), out.dtype) for _ in range(nbuf)]
    for i in range(0, n, _BLOCK):
        j = min(i + _BLOCK, n)
        fn(flat_x[i:j], flat_out[i:j], *(b[: j - i] for b in buffers), *params)
    return out


def erf_block(x: np.ndarray, out: np.ndarray, a: np.ndarray, s: np.ndarray, r: np.ndarray) -> None:
    # erf(x) = x * P(x^2) for |x| <= 1, and sign(x) * (1 - exp(-x^2) * Q(|x|)) on each piece beyond.
    # Every formula is evaluated on the whole block with its argument clamped into its interval, so all
    # values are finite, then selected bitwise where |x| is past the piece's start; past the last
    # interval the clamped formula rounds to +-1. Outside |x| <= 1 the first formula's value is unused.
    table = _ERF[x.dtype]
    one = x.dtype.type(1)
    np.square(x, out=a)
    np.minimum(a, one, out=a)
    horner(table["small"], a, a, out)
    out *= x
    for lo, hi, fit in table["pieces"]:
        np.absolute(x, out=a)
        past = np.greater(a, lo)
        np.clip(a, lo, hi, out=a)
        horner(fit, a, s, r)
        np.square(a, out=a)
        np.negative(a, out=a)
        np.exp(a, out=a)
        r *= a
        np.subtract(one, r, out=r)
        np.copysign(r, x, out=r)
        select_into(out, past, r, out)


def erf(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The error function of a float32/float64 array, within a few ulp of the correctly rounded value."""
    return blockwise(erf_block, 3, x, out)
