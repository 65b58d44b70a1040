"""The optional accelerated tier of the XNNPACK runtime half: loops that NumPy runs as many passes, compiled
once with numba (``pip install edgetorch[fast]``) and cached on disk.

NumPy computes a 3x3 depthwise convolution as 9 multiplies and 8 adds over the whole output plus a bias pass:
17 trips through memory, each on one core. The compiled kernel makes one pass, keeps each output pixel's
channels in registers, and never materialises the taps. It sums the taps in the same order as
the NumPy path (tap by tap, then the bias), with no fused multiply-add (numba compiles without fastmath), so
both tiers give the same float32 results.

The tier is used when numba imports and ``EDGETORCH_FAST`` is not ``0``; without it every caller keeps its
NumPy path. Imports only NumPy (and numba when present).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

# numba is found here but imported on the first compile: importing it costs about half a second, which a
# program without a depthwise convolution should not pay.
AVAILABLE = os.environ.get("EDGETORCH_FAST", "1") != "0" and importlib.util.find_spec("numba") is not None


def _depthwise_nhwc(x, taps, bias, y, kh, kw, sh, sw, dh, dw, top, left):  # pragma: no cover - compiled
    """y[n, i, j, c] = sum over taps (ki, kj) of x[n, i*sh - top + ki*dh, j*sw - left + kj*dw, c] * w[tap, c]
    (out-of-range input pixels read as zero), plus bias[c]; channel multiplier 1."""
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


_compiled: dict[str, Any] = {}


def depthwise_nhwc() -> Any:
    """The compiled depthwise convolution ``f(x, taps, bias, y, kh, kw, sh, sw, dh, dw, top, left)`` (see
    ``_depthwise_nhwc``), compiled on first use: about a second the first time on a machine, then loaded from
    numba's on-disk cache. Single-threaded: on the shared 2-core machine numba's parallel loops lost more to
    waking threads than they gained (measured in the note of issue 13)."""
    fn = _compiled.get("depthwise")
    if fn is None:
        import numba

        fn = _compiled["depthwise"] = numba.njit(cache=True, nogil=True)(_depthwise_nhwc)
    return fn
