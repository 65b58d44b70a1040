"""Compiled passes of the quantized XNNPACK nodes, in the optional [fast] tier (numba; see fast.py).

NumPy runs a static node's requantization as separate passes over its output (bias add, scale,
clip, round: four trips through memory, each a ufunc call) and a dynamic convert as a dozen small
calls (row minimum and maximum, the parameter formula, divide, round, clip). Each kernel here makes
one pass (two for the convert: the row range, then the values) with the same float32 operations in
the same order as the NumPy path: every float32 ``+``, ``*`` and ``/`` is correctly rounded in both,
numba compiles without fastmath (no fused multiply-add, no reassociation), ``np.rint`` rounds half
to even in both, and a clip is a max then a min. So both tiers give the same bits, which
tests/backends/xnnpack/test_quantized_fast_tier.py checks against the NumPy path.

Used when the runtime's policy allows the compiled tier (edgetorch/runtime/policy.py). Imports only NumPy
(and numba on first compile).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgetorch.backends.xnnpack import fast


def _requantize(acc, bias, factor, lo, hi, out):  # pragma: no cover - compiled
    """out[i, c] = rint(clip((acc[i, c] + bias[c]) * factor[c], lo, hi)) (no bias when ``bias`` is empty).

    ``acc`` is the exact int32 accumulator held in float32, ``bias`` the int32 bias in float32 (their sum
    is exact below 2**24, as in the sgemm that adds it on the NumPy path), ``factor`` XNNPACK's per-channel
    requantization scale, [lo, hi] the output's integer range minus its zero point."""
    m, c = acc.shape
    with_bias = bias.shape[0] > 0
    for i in range(m):
        a = acc[i]
        o = out[i]
        for j in range(c):
            v = a[j]
            if with_bias:
                v = v + bias[j]
            v = v * factor[j]
            if v < lo:
                v = lo
            if v > hi:
                v = hi
            o[j] = np.rint(v)


def _dynamic_quantize(x, centred, scale, zero_point, dequantized):  # pragma: no cover - compiled
    """Per row of ``x`` [rows, K]: XNNPACK's dynamic int8 parameters (the row's range widened to hold 0,
    scale = range / 255, the zero point nudged to an integer in [-128, 127]) into ``scale`` and
    ``zero_point`` [rows, 1], and the centred integers clip(rint(x / scale), -128 - zp, 127 - zp);
    when ``dequantized`` has rows, also centred * scale into its first K columns and 1 into its last (the
    input buffer of a dynamically quantized fully connected, [rows, K + 1], the ones multiplying the bias row:
    set at every call, since the buffer's memory is shared)."""
    rows, k = x.shape
    zero = np.float32(0)
    for r in range(rows):
        row = x[r]
        lo = zero
        hi = zero
        for j in range(k):
            v = row[j]
            if v < lo:
                lo = v
            if v > hi:
                hi = v
        s = np.float32(1) if lo == hi else (hi - lo) / np.float32(255)
        a = lo / s
        b = hi / s
        z = np.float32(-128) - a if a + b > np.float32(-1) else np.float32(127) - b
        z = np.rint(z)
        if z < np.float32(-128):
            z = np.float32(-128)
        if z > np.float32(127):
            z = np.float32(127)
        scale[r, 0] = s
        zero_point[r, 0] = z
        qlo = np.float32(-128) - z
        qhi = np.float32(127) - z
        o = centred[r]
        for j in range(k):
            t = np.rint(row[j] / s)
            if t < qlo:
                t = qlo
            if t > qhi:
                t = qhi
            o[j] = t
        if dequantized.shape[0]:
            d = dequantized[r]
            for j in range(k):
                d[j] = o[j] * s
            d[k] = np.float32(1)


def _quantized_add(a, sa, b, sb, flo, fhi, inv, lo, hi, out):  # pragma: no cover - compiled
    """out[i] = rint(clip(clip(a[i] * sa + b[i] * sb, flo, fhi) * inv, lo, hi)): two centred integer inputs
    dequantized and summed, the node's float clamp [flo, fhi], requantized by ``inv`` = 1 / output scale."""
    for i in range(a.shape[0]):
        f = a[i] * sa + b[i] * sb
        if f < flo:
            f = flo
        if f > fhi:
            f = fhi
        v = f * inv
        if v < lo:
            v = lo
        if v > hi:
            v = hi
        out[i] = np.rint(v)


def requantize() -> Any:
    """The compiled ``f(acc, bias, factor, lo, hi, out)`` of ``_requantize`` (2-d float32 arrays, float32
    bounds), compiled on first use and then loaded from numba's on-disk cache."""
    return fast.compiled("requantize", _requantize)


def dynamic_quantize() -> Any:
    """The compiled ``f(x, centred, scale, zero_point, dequantized)`` of ``_dynamic_quantize`` (float32
    arrays; ``dequantized`` [0, 0] when not wanted)."""
    return fast.compiled("dynamic_quantize", _dynamic_quantize)


def quantized_add() -> Any:
    """The compiled ``f(a, sa, b, sb, flo, fhi, inv, lo, hi, out)`` of ``_quantized_add`` (1-d float32
    arrays, float32 scalars)."""
    return fast.compiled("quantized_add", _quantized_add)
