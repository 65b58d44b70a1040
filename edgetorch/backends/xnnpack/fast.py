"""The optional accelerated tier of the XNNPACK runtime half: loops that NumPy runs as many passes, compiled
once with numba (``pip install edgetorch[fast]``) and cached on disk.

NumPy computes a 3x3 depthwise convolution as 9 multiplies and 8 adds over the whole output plus a bias pass:
17 trips through memory, each on one core. The compiled kernel makes one pass, keeps each output pixel's
channels in registers, and never materialises the taps. It sums the taps in the same order as
the NumPy path (tap by tap, then the bias), with no fused multiply-add (numba compiles without fastmath), so
both tiers give the same float32 results.

The layer's activation (a clamp: ReLU, ReLU6, hardtanh) is applied in the same pass, and a GEMM's bias and
clamp are one pass over its output (``bias_clamp``) instead of two.

The tier is used when numba imports and ``EDGETORCH_FAST`` is not ``0``; without it (numba absent, or
failing to import) every caller keeps its NumPy path. Imports only NumPy (and numba when present).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any


def _found() -> bool:
    try:
        return importlib.util.find_spec("numba") is not None
    except (ImportError, ValueError):  # a broken install, or an import hook that refuses it
        return False


# numba is found here but imported on the first compile: importing it costs about half a second, which a
# program without a depthwise convolution should not pay.
AVAILABLE = os.environ.get("EDGETORCH_FAST", "1") != "0" and _found()


def _depthwise_nhwc(x, taps, bias, y, kh, kw, sh, sw, dh, dw, top, left, lo, hi):  # pragma: no cover - compiled
    """y[n, i, j, c] = sum over taps (ki, kj) of x[n, i*sh - top + ki*dh, j*sw - left + kj*dw, c] * w[tap, c]
    (out-of-range input pixels read as zero), plus bias[c], clamped to [lo, hi]; channel multiplier 1."""
    nb, h, wd, c = x.shape
    _, oh, ow, _ = y.shape
    for r in range(nb * oh):
        n = r // oh
        i = r % oh
        for j in range(ow):
            out = y[n, i, j]
            out[:] = 0.0
            for ki in range(kh):
                row = i * sh - top + ki * dh
                if row < 0 or row >= h:
                    continue
                for kj in range(kw):
                    col = j * sw - left + kj * dw
                    if col < 0 or col >= wd:
                        continue
                    src = x[n, row, col]
                    wt = taps[ki * kw + kj]
                    for ch in range(c):
                        out[ch] += src[ch] * wt[ch]
            if bias.shape[0]:
                for ch in range(c):
                    out[ch] += bias[ch]
            for ch in range(c):  # a NaN stays NaN, as with np.clip
                v = out[ch]
                if v < lo:
                    out[ch] = lo
                elif v > hi:
                    out[ch] = hi


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


_KERNELS = {"depthwise": _depthwise_nhwc, "bias_clamp": _bias_clamp}
_compiled: dict[str, Any] = {}


def usable() -> bool:
    """Whether the tier is on and numba imports. The first call imports numba; if that fails (installed but
    broken, e.g. a llvmlite that does not match), the tier turns off and every caller keeps its NumPy path."""
    global AVAILABLE
    if AVAILABLE:
        try:
            import numba  # noqa: F401
        except ImportError:
            AVAILABLE = False
    return AVAILABLE


def compiled(name: str, fn: Any) -> Any:
    """``fn`` compiled with numba and kept under ``name``, or None when the tier is not usable.

    Compiled on first use: about a second the first time on a machine, then loaded from numba's on-disk
    cache. Single-threaded: on the shared 2-core machine numba's parallel loops lost more to waking threads
    than they gained (measured in the note of issue 13)."""
    if not usable():
        return None
    got = _compiled.get(name)
    if got is None:
        import numba

        got = _compiled[name] = numba.njit(cache=True, nogil=True)(fn)
    return got


def kernel(name: str) -> Any:
    """The compiled kernel ``name`` (``depthwise``: ``_depthwise_nhwc``; ``bias_clamp``: ``_bias_clamp``), or
    None when the tier is not usable (the caller then keeps its NumPy path)."""
    return compiled(name, _KERNELS[name])
