"""The compiled tier's depthwise convolution over channels-last (NHWC) float32 arrays, channel multiplier 1.

One pass over the output: each output pixel's channels are summed in registers, tap by tap in the window's row
order and then the bias, with no fused multiply-add (numba compiles without fastmath), so the result has the
bits of the NumPy formulation in edgetorch/runtime/ops/conv.py; the clamp of the layer's activation is applied
in the same pass. From the policy's ``split_outputs`` outputs on, output rows are split over the runtime's
threads (numba's ``prange``; each output computed as on one thread).

Used through :func:`edgetorch.runtime.ops.conv.depthwise` by every runtime. Imports NumPy, the policy and
kernels/compiled.py (which imports numba on the first compile).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from edgetorch.runtime import policy
from edgetorch.runtime.kernels import compiled as compiled_kernels

prange: Any = range  # numba's, bound before the first compile (importing this module must not import numba)


def _depthwise_nhwc(x, taps, bias, y, kh, kw, sh, sw, dh, dw, top, left, lo, hi):  # pragma: no cover - compiled
    """y[n, i, j, c] = sum over taps (ki, kj) of x[n, i*sh - top + ki*dh, j*sw - left + kj*dw, c] * w[tap, c]
    (out-of-range input pixels read as zero), plus bias[c], clamped to [lo, hi]; channel multiplier 1."""
    _depthwise_rows(x, taps, bias, y, kh, kw, sh, sw, dh, dw, top, left, lo, hi, 0, y.shape[0] * y.shape[1])


def _depthwise_split(x, taps, bias, y, kh, kw, sh, sw, dh, dw, top, left, lo, hi, parts):  # pragma: no cover
    """``_depthwise_nhwc`` with its output rows cut into ``parts`` runs, run on numba's threads (each output
    computed as on one thread)."""
    rows = y.shape[0] * y.shape[1]
    step = -(-rows // parts)
    for p in prange(parts):
        first = min(rows, p * step)
        _depthwise_rows(x, taps, bias, y, kh, kw, sh, sw, dh, dw, top, left, lo, hi, first, min(rows, first + step))


def _depthwise_rows(x, taps, bias, y, kh, kw, sh, sw, dh, dw, top, left, lo, hi, first, last):  # pragma: no cover
    """Output rows ``first`` .. ``last`` (of all images' rows, n * OH + i) of ``_depthwise_nhwc``.

    A 3x3 window whose taps all fall inside the input (every pixel but the border ones) is summed in one
    expression per channel: nine loads, one store, the sum in a register (faster than accumulating tap by tap
    into the output). The taps are added in the same order either way."""
    nb, h, wd, c = x.shape
    _, oh, ow, _ = y.shape
    with_bias = bias.shape[0] > 0
    for r in range(first, last):
        n = r // oh
        i = r % oh
        r0 = i * sh - top
        inner_rows = kh == 3 and kw == 3 and r0 >= 0 and r0 + 2 * dh < h
        for j in range(ow):
            c0 = j * sw - left
            out = y[n, i, j]
            if inner_rows and c0 >= 0 and c0 + 2 * dw < wd:
                x0, x1, x2 = x[n, r0], x[n, r0 + dh], x[n, r0 + 2 * dh]
                a, b, d = c0, c0 + dw, c0 + 2 * dw
                for ch in range(c):
                    v = x0[a, ch] * taps[0, ch]
                    v += x0[b, ch] * taps[1, ch]
                    v += x0[d, ch] * taps[2, ch]
                    v += x1[a, ch] * taps[3, ch]
                    v += x1[b, ch] * taps[4, ch]
                    v += x1[d, ch] * taps[5, ch]
                    v += x2[a, ch] * taps[6, ch]
                    v += x2[b, ch] * taps[7, ch]
                    v += x2[d, ch] * taps[8, ch]
                    if with_bias:
                        v += bias[ch]
                    if v < lo:
                        v = lo
                    elif v > hi:
                        v = hi
                    out[ch] = v
                continue
            out[:] = 0.0
            for ki in range(kh):
                row = r0 + ki * dh
                if row < 0 or row >= h:
                    continue
                for kj in range(kw):
                    col = c0 + kj * dw
                    if col < 0 or col >= wd:
                        continue
                    src = x[n, row, col]
                    for ch in range(c):
                        out[ch] += src[ch] * taps[ki * kw + kj, ch]
            for ch in range(c):  # a NaN stays NaN, as with np.clip
                v = out[ch] + bias[ch] if with_bias else out[ch]
                if v < lo:
                    v = lo
                elif v > hi:
                    v = hi
                out[ch] = v


def nhwc_step(x: Any, taps: Any, bias: Any, y: Any, *window: Any) -> Any:
    """The step of ``_depthwise_nhwc(x, taps, bias, y, kh, kw, sh, sw, dh, dw, top, left, lo, hi)``
    (``window`` is kh .. hi; ``taps`` [KH*KW, C], ``bias`` [C] or empty), its rows split over the threads
    ``compiled_kernels.split`` gives it at each call when the output is large enough; the tier must be on."""
    HELPERS.require("depthwise nhwc_step")
    args = (x, taps, bias, y, *window)
    serial = partial(compiled_kernels.compiled("depthwise", _depthwise_nhwc), *args)
    parallel = compiled_kernels.compiled("depthwise_split", _depthwise_split, parallel=True)
    return compiled_kernels.split_step(
        serial, parallel, args, y.shape[0] * y.shape[1], y.size >= policy.current().split_outputs
    )


HELPERS = compiled_kernels.Helpers(globals(), compile=("_depthwise_rows",))
