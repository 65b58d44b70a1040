"""XNNPACK's quantization arithmetic as steps: quantize (round half to even, clamp, zero point),
dequantize, XNNPACK's fp32 requantization of an integer accumulator (in NumPy, or as one compiled pass
with the same float32 operations in the same order), per-row dynamic int8 parameters, per-channel weight
scales and 4-bit weight unpacking.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from edgetorch.backends.xnnpack import qfast
from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.runtime.epilogues import min_max
from edgetorch.backends.xnnpack.runtime.memory import Env, Step
from edgetorch.backends.xnnpack.runtime.values import QParams, qrange


def quantize_steps(
    y: np.ndarray, q: np.ndarray, scale: Any, zero_point: int, lo: float, hi: float, dest: tuple | None = None
) -> list:
    """Steps writing round_half_even(y / scale) + zero_point into ``q``, clamped to q's range and [lo, hi].

    With ``dest`` = (env, value id) the float32 centred integers q - zero_point are also recorded as
    ``env.centred[value id]`` for the readers that take them (convolution, fully connected, clamp and
    the dequantizing fallback skip a conversion and a subtraction); when no reader needs the integers
    themselves (the graph's outputs and converts do), ``q`` is not written at all.
    """
    qmin, qmax = qbounds(q.dtype, scale, zero_point, lo, hi)
    if dest is not None and dest[1] in dest[0].graph.narrow:
        a, b = dest[0].graph.narrow[dest[1]]
        qmin, qmax = max(qmin, a), min(qmax, b)
        dest[0].narrowed.add(dest[1])
    t = np.empty(y.shape, np.float32) if dest is None else dest[0].centred_buffer(dest[1], y.shape)
    steps, src = [], y
    if scale != 1:
        steps.append(partial(np.multiply, y, np.float32(1.0) / np.float32(scale), out=t))
        src = t
    # Clamping before rounding equals clamping after: the bounds are integers.
    steps += [
        partial(np.clip, src, np.float32(qmin - zero_point), np.float32(qmax - zero_point), out=t),
        partial(np.rint, t, out=t),
    ]
    if dest is not None:
        env, vid = dest
        if vid not in env.graph.needs_int8:
            return steps
        t2 = np.empty(y.shape, np.float32)
        if zero_point:
            return steps + [
                partial(np.add, t, np.float32(zero_point), out=t2),
                partial(np.copyto, q, t2, casting="unsafe"),
            ]
        return steps + [partial(np.copyto, q, t, casting="unsafe")]
    if zero_point:
        steps.append(partial(np.add, t, np.float32(zero_point), out=t))
    return steps + [partial(np.copyto, q, t, casting="unsafe")]


def centred_input(env: Env, vid: int, qp: QParams, dst_id: int) -> tuple[np.ndarray, list]:
    """Value ``vid`` as float32 centred integers under id ``dst_id``: shared if its producer kept them."""
    c = env.centred.get(vid)
    if c is not None:
        env.arrays[dst_id] = c
        return c, []
    x = env[vid]
    xc = env.empty(dst_id, x.shape)
    return xc, [partial(np.subtract, x, np.float32(qp.zero_point), out=xc)]


def qbounds(dtype: np.dtype, scale: Any, zero_point: int, lo: float, hi: float) -> tuple[int, int]:
    """The integer range of a quantized output: its dtype's, narrowed by a float clamp [lo, hi]."""
    qmin, qmax = qrange(dtype)
    if lo != -math.inf:
        qmin = max(qmin, int(np.rint(np.float32(lo) / scale)) + zero_point)
    if hi != math.inf:
        qmax = min(qmax, int(np.rint(np.float32(hi) / scale)) + zero_point)
    return qmin, qmax


def dequantize_steps(q: np.ndarray, f: np.ndarray, qp: QParams) -> list:
    return [partial(np.subtract, q, np.float32(qp.zero_point), out=f), partial(np.multiply, f, qp.scale, out=f)]


def _dynamic_params(x2: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> None:
    """XNNPACK's per-row int8 parameters for ``x2`` [rows, K]: the range widened to hold 0, zero point nudged."""
    lo = np.minimum(x2.min(axis=1, keepdims=True), 0).astype(np.float32)
    hi = np.maximum(x2.max(axis=1, keepdims=True), 0).astype(np.float32)
    flat = lo == hi
    s = np.where(flat, np.float32(1), (hi - lo) / np.float32(255)).astype(np.float32)
    zp = np.where(lo / s + hi / s > -1, -128 - lo / s, 127 - hi / s)
    np.clip(np.rint(zp), -128, 127, out=zero_point)
    np.copyto(scale, s)


NO_ROWS = np.empty((0, 0), np.float32)


def dynamic_convert(
    x: np.ndarray,
    centred: np.ndarray,
    q: np.ndarray | None,
    scale: np.ndarray,
    zero_point: np.ndarray,
    compiled: bool,
    dequantized: np.ndarray = NO_ROWS,
) -> Step:
    """The step of per-row int8 quantization of ``x``: float32 q - zero_point into ``centred``, and q into ``q``
    if given. A ``dequantized`` [rows, K + 1] buffer (compiled tier only) also gets (q - zero_point) * scale, and
    ones in its last column.
    ``compiled``: the delegate's tier (``Graph.compiled``); the compiled pass gives the same bits."""
    x2 = x.reshape(scale.shape[0], -1)
    flat = np.shares_memory(x2, x) and x2.flags.c_contiguous and centred.flags.c_contiguous
    if compiled and flat:
        t = centred.reshape(x2.shape)
        return partial(_compiled_convert, qfast.dynamic_quantize(), x2, t, q, scale, zero_point, dequantized)
    return partial(_numpy_convert, x, centred, q, scale, zero_point)


def _compiled_convert(
    kernel: Any,
    x2: np.ndarray,
    t: np.ndarray,
    q: np.ndarray | None,
    scale: np.ndarray,
    zero_point: np.ndarray,
    dequantized: np.ndarray,
) -> None:
    kernel(x2, t, scale, zero_point, dequantized)
    if q is not None:
        np.copyto(q.reshape(x2.shape), t + zero_point, casting="unsafe")


def _numpy_convert(
    x: np.ndarray, centred: np.ndarray, q: np.ndarray | None, scale: np.ndarray, zero_point: np.ndarray
) -> None:
    x2 = x.reshape(scale.shape[0], -1)
    _dynamic_params(x2, scale, zero_point)
    t = centred.reshape(x2.shape)
    np.divide(x2, scale, out=t)
    np.rint(t, out=t)
    np.clip(t, -128 - zero_point, 127 - zero_point, out=t)
    if q is not None:
        np.copyto(q.reshape(x2.shape), t + zero_point, casting="unsafe")


def unpack_int4(packed: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """[rows, cols] signed 4-bit weights from XNNPACK's packing: two a byte along cols, low nibble first, +8."""
    b = packed.reshape(rows, (cols + 1) // 2)
    w = np.empty((rows, b.shape[1] * 2), np.int8)
    w[:, 0::2] = b & 0xF
    w[:, 1::2] = b >> 4
    return w[:, :cols] - 8


def requantize_steps(
    acc: np.ndarray,
    bias: np.ndarray | None,
    factor: np.ndarray,
    q: np.ndarray,
    qp: QParams,
    node: xs.XNode,
    compiled: bool,
    dest: tuple | None = None,
) -> list:
    """XNNPACK's fp32 requantization of the int32 accumulator ``acc`` (+ bias) into ``q``; ``compiled``: the
    delegate's tier (``Graph.compiled``)."""
    lo, hi = min_max(node)
    lo, hi = (lo / qp.scale if lo != -math.inf else lo), (hi / qp.scale if hi != math.inf else hi)
    if compiled and dest is not None and acc.flags.c_contiguous:
        return _fused_requantize_steps(acc, bias, factor, q, qp.zero_point, lo, hi, dest)
    steps = []
    if bias is not None:
        steps.append(partial(np.add, acc, bias, out=acc))
    steps.append(partial(np.multiply, acc, factor, out=acc))
    return steps + quantize_steps(acc, q, np.float32(1), qp.zero_point, lo, hi, dest)


def _fused_requantize_steps(
    acc: np.ndarray,
    bias: np.ndarray | None,
    factor: np.ndarray,
    q: np.ndarray,
    zp: int,
    lo: float,
    hi: float,
    dest: tuple,
) -> list:
    """``requantize_steps`` as one compiled pass (qfast.py) writing the centred integers: the same
    float32 operations in the same order (bias add, scale, clip to the integer bounds, round half to
    even), so the same bits; then the int8 copy when a reader needs it, as on the NumPy path."""
    c = factor.shape[-1]
    b = np.empty(0, np.float32) if bias is None else np.ascontiguousarray(bias, np.float32).reshape(-1)
    f = np.ascontiguousarray(factor, np.float32).reshape(-1)

    def step(t: np.ndarray, qlo: np.float32, qhi: np.float32) -> Step:
        return partial(qfast.requantize(), acc.reshape(-1, c), b, f, qlo, qhi, t.reshape(-1, c))

    return fused_quantize_out(dest, q, zp, np.float32(1), lo, hi, acc.shape, step)


def fused_quantize_out(
    dest: tuple, q: np.ndarray, zp: int, scale: Any, lo: float, hi: float, shape: tuple, step: Callable
) -> list:
    """The steps of a compiled pass ``step(t, qlo, qhi)`` that writes value ``dest[1]``'s centred integers
    into ``t``, clipped to [qlo, qhi] (its dtype's range, narrowed by [lo, hi] and by a following clamp as
    ``quantize_steps`` does), then the int8 copy when a reader needs the integers themselves."""
    env, vid = dest
    qmin, qmax = qbounds(q.dtype, scale, zp, lo, hi)
    if vid in env.graph.narrow:
        a, b = env.graph.narrow[vid]
        qmin, qmax = max(qmin, a), min(qmax, b)
        env.narrowed.add(vid)
    t = env.centred_buffer(vid, shape)
    steps = [step(t, np.float32(qmin - zp), np.float32(qmax - zp))]
    if vid not in env.graph.needs_int8:
        return steps
    t2 = np.empty(shape, np.float32)
    return steps + [partial(np.add, t, np.float32(zp), out=t2), partial(np.copyto, q, t2, casting="unsafe")]


def weight_scale(qp: QParams, channels: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(qp.scale, np.float32).reshape(-1), (channels,)).astype(np.float32)


def same_tensor_params(a: QParams, b: QParams) -> bool:
    return a.scale is not None and not np.ndim(a.scale) and a.scale == b.scale and a.zero_point == b.zero_point
