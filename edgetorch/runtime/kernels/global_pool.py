"""The compiled tier's global average pooling over channels-last float32 arrays: each image's pixels summed
into its channels in pixel order, then scaled, in one call with NumPy's bits.

NumPy's formulation (``np.add.reduce`` over the spatial axes, then ``np.multiply`` by the reciprocal of the
pixel count) adds the pixels one after another into each channel, so the compiled loop does the same
(no fused multiply-add, no reordering: numba compiles without fastmath) and gives the same bits. It saves
NumPy's two ufunc dispatches, which cost several times the arithmetic of a small layer when they run once an
inference between other layers (a classifier head's pooling). Used through :func:`edgetorch.runtime.ops.pool.
global_avg_pool` by every runtime. Imports NumPy and kernels/compiled.py (which imports numba on the first
compile).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from edgetorch.runtime.kernels import compiled as compiled_kernels


def _global_average(x, y, scale):  # pragma: no cover - compiled
    """y[n, c] = (x[n, 0, c] + x[n, 1, c] + ... + x[n, P-1, c]) * scale for x [N, P, C] (P >= 1), y [N, C],
    both C-contiguous float32; the sums kept in ``y`` (the inner loop over channels, contiguous). Indexed flat
    with unsigned offsets: numba's wraparound check of a signed index keeps the loops from vectorising."""
    nb, pixels, c = x.shape
    xf, yf = x.reshape(-1), y.reshape(-1)
    width = np.uint64(c)
    for n in range(nb):
        base, out = np.uint64(n * pixels * c), np.uint64(n * c)
        for ch in range(width):
            yf[out + ch] = xf[base + ch]
        for p in range(1, pixels):
            row = base + np.uint64(p * c)
            for ch in range(width):
                yf[out + ch] += xf[row + ch]
        for ch in range(width):
            yf[out + ch] *= scale


def global_average_step(x: Any, y: Any, scale: Any) -> Any:
    """The step of ``_global_average(x, y, scale)`` (``x`` [N, P, C] with P >= 1, ``y`` [N, C], C-contiguous
    float32 views, ``scale`` a float32); the tier must be on."""
    HELPERS.require("global_average_step")
    return partial(compiled_kernels.compiled("global_average", _global_average), x, y, np.float32(scale))


HELPERS = compiled_kernels.Helpers(globals())
