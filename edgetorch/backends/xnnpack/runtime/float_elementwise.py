"""Float planners for the XNNPACK nodes that are not layers: binary and unary ops and activations,
softmax, and the data movement nodes (convert, copy, transpose, reshape, pad, concatenate, slice,
bilinear resize). ``PLANNERS`` maps each node kind to its planner.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from edgetorch.backends.xnnpack import fast
from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.runtime.epilogues import NO_CLAMP, clamp_steps, min_max
from edgetorch.backends.xnnpack.runtime.geometry import nhwc
from edgetorch.backends.xnnpack.runtime.memory import Env, Planner
from edgetorch.backends.xnnpack.runtime.values import Graph, Unsupported
from edgetorch.runtime.ops import activation

BINARY = {
    xs.XNNAdd: np.add,
    xs.XNNSubtract: np.subtract,
    xs.XNNMultiply: np.multiply,
    xs.XNNDiv: np.divide,
    xs.XNNMinimum: np.minimum,
    xs.XNNMaximum: np.maximum,
}


def _binary(n: Any, node: xs.XNode, g: Graph, act: tuple[float, float] = NO_CLAMP) -> Planner:
    ufunc = BINARY[type(n)]

    def plan(env: Env) -> list:
        a, b = env[n.input1_id], env[n.input2_id]
        y = env.empty(n.output_id, np.broadcast_shapes(a.shape, b.shape))
        if ufunc is np.add and act != NO_CLAMP and g.compiled:  # a residual add and its ReLU: one pass
            fused = fast.add_clamp(a, b, y, *act)
            if fused is not None:
                return [fused]
        return [partial(ufunc, a, b, out=y), *clamp_steps(y, y, *act)]

    return plan


def _prelu(n: Any, node: xs.XNode, g: Graph) -> Planner:
    def plan(env: Env) -> list:
        x, slope = env[n.input1_id], env[n.input2_id]
        y = env.empty(n.output_id, x.shape)
        neg = np.empty_like(y)
        return [
            *clamp_steps(x, neg, -math.inf, 0.0),
            partial(np.multiply, neg, slope, out=neg),
            *clamp_steps(x, y, 0.0, math.inf),
            partial(np.add, y, neg, out=y),
        ]

    return plan


def _gelu(x: np.ndarray, y: np.ndarray) -> list:
    """Exact (erf) GELU: the op layer's (runtime/ops/activation.py), as in the portable runtime."""
    return [activation.gelu(x, y, split=True)]


def _sigmoid(x: np.ndarray, y: np.ndarray) -> list:
    return [
        partial(np.negative, x, out=y),
        partial(np.exp, y, out=y),
        partial(np.add, y, y.dtype.type(1), out=y),
        partial(np.reciprocal, y, out=y),
    ]


def _hardswish(x: np.ndarray, y: np.ndarray) -> list:
    f = y.dtype.type
    return [
        partial(np.add, x, f(3), out=y),
        partial(np.clip, y, f(0), f(6), out=y),
        partial(np.multiply, y, x, out=y),
        partial(np.multiply, y, f(1 / 6), out=y),
    ]


def _rsqrt(x: np.ndarray, y: np.ndarray) -> list:
    return [partial(np.sqrt, x, out=y), partial(np.reciprocal, y, out=y)]


def _ufunc(f: np.ufunc) -> Callable[[np.ndarray, np.ndarray], list]:
    return lambda x, y: [partial(f, x, out=y)]


_UNARY: dict[type, Callable[[np.ndarray, np.ndarray], list]] = {
    xs.XNNAbs: _ufunc(np.abs),
    xs.XNNNegate: _ufunc(np.negative),
    xs.XNNFloor: _ufunc(np.floor),
    xs.XNNCeiling: _ufunc(np.ceil),
    xs.XNNSquare: _ufunc(np.square),
    xs.XNNSquareRoot: _ufunc(np.sqrt),
    xs.XNNExp: _ufunc(np.exp),
    xs.XNNLog: _ufunc(np.log),
    xs.XNNTanh: _ufunc(np.tanh),
    xs.XNNSin: _ufunc(np.sin),
    xs.XNNCos: _ufunc(np.cos),
    xs.XNNSigmoid: _sigmoid,
    xs.XNNHardswish: _hardswish,
    xs.XNNReciprocalSquareRoot: _rsqrt,
    xs.XNNGelu: _gelu,
}


def _elementwise(kernel: Callable[[np.ndarray, np.ndarray], list]) -> Callable:
    def compile_node(n: Any, node: xs.XNode, g: Graph) -> Planner:
        def plan(env: Env) -> list:
            x = env[n.input_id]
            return kernel(x, env.empty(n.output_id, x.shape))

        return plan

    return compile_node


def _clamp_node(n: Any, node: xs.XNode, g: Graph) -> Planner:
    lo, hi = min_max(node)
    return _elementwise(lambda x, y: clamp_steps(x, y, lo, hi))(n, node, g)


def _leaky_relu(n: Any, node: xs.XNode, g: Graph) -> Planner:
    def kernel(x: np.ndarray, y: np.ndarray) -> list:
        slope = y.dtype.type(n.negative_slope)
        pick = np.maximum if n.negative_slope <= 1 else np.minimum  # slope*x is the smaller branch when x > 0
        return [partial(np.multiply, x, slope, out=y), partial(pick, x, y, out=y)]

    return _elementwise(kernel)(n, node, g)


def _elu(n: Any, node: xs.XNode, g: Graph) -> Planner:
    def kernel(x: np.ndarray, y: np.ndarray) -> list:
        neg = np.empty_like(y)
        return [
            *clamp_steps(x, neg, -math.inf, 0.0),
            partial(np.expm1, neg, out=neg),
            partial(np.multiply, neg, y.dtype.type(n.alpha), out=neg),
            *clamp_steps(x, y, 0.0, math.inf),
            partial(np.add, y, neg, out=y),
        ]

    return _elementwise(kernel)(n, node, g)


def _convert(n: Any, node: xs.XNode, g: Graph) -> Planner:
    return _elementwise(lambda x, y: [partial(np.copyto, y, x, casting="unsafe")])(n, node, g)


def _copy(n: Any, node: xs.XNode, g: Graph) -> Planner:
    # Values are never written after they are produced, so a copy can share its input's memory.
    def plan(env: Env) -> list:
        env.alias(n.output_id, n.input_id, env[n.input_id])
        return []

    return plan


def _softmax(n: Any, node: xs.XNode, g: Graph) -> Planner:
    def plan(env: Env) -> list:
        x = env[n.input_id]
        y = env.empty(n.output_id, x.shape)
        return softmax_steps(x, y)

    return plan


def softmax_steps(x: np.ndarray, y: np.ndarray) -> list:
    """Softmax over the last axis of x into y (x may be y): the op layer's (runtime/ops/activation.py)."""
    return [activation.softmax(x, y, split=True)]


def _transpose(n: Any, node: xs.XNode, g: Graph) -> Planner:
    perm = tuple(n.perm)

    def plan(env: Env) -> list:
        x = env[n.input_id]
        view = x.transpose(perm)
        y = env.empty(n.output_id, view.shape)
        long_runs = view.ndim and view.shape[-1] >= 8  # runs of 8 or more
        runs = fast.permute(x, view, y) if long_runs and g.compiled else None
        if runs is not None:  # the fast tier: runs of the last axis, over the threads
            return [runs]
        short = 1 < view.shape[-1] <= _SHORT_LAST_AXIS and view.ndim > 1 and view.strides[-1] != view.itemsize
        gathered = fast.gather(x, view, y) if short and g.compiled else None
        if gathered is not None:  # the fast tier: the short axis gathered value by value, over the threads
            return [gathered]
        if short:
            # NCHW -> NHWC of an image (C = 3): one copy per channel, each reading a plane in order, instead of
            # NumPy's loop over C-long rows gathered from three planes
            return [partial(np.copyto, y[..., i], view[..., i]) for i in range(view.shape[-1])]
        return [partial(np.copyto, y, view)]

    return plan


_SHORT_LAST_AXIS = 8


def _reshape(n: Any, node: xs.XNode, g: Graph) -> Planner:
    shape = tuple(-1 if d == 0 else d for d in n.new_shape)  # 0 marks the dimension to infer
    if shape.count(-1) > 1:
        raise Unsupported(f"reshape to {list(n.new_shape)} infers more than one dimension")

    def plan(env: Env) -> list:
        # Every array a schedule holds is C-contiguous, so the reshape is a view and costs no step.
        env.alias(n.output_id, n.input_id, env[n.input_id].reshape(shape))
        return []

    return plan


def _constant_pad(n: Any, node: xs.XNode, g: Graph) -> Planner:
    pre, post = list(n.pre_paddings), list(n.post_paddings)

    def plan(env: Env) -> list:
        x = env[n.input_id]
        if len(pre) != x.ndim or len(post) != x.ndim:
            raise ValueError(f"constant pad has {len(pre)}-d paddings for an input of shape {x.shape}")
        y = env.empty(n.output_id, [d + a + b for d, a, b in zip(x.shape, pre, post)], persistent=True)
        y.fill(n.padding_value)  # the border is written once; each run refills only the interior
        inner = y[tuple(slice(a, a + d) for a, d in zip(pre, x.shape))]
        return [partial(np.copyto, inner, x)]

    return plan


def _concatenate(n: Any, node: xs.XNode, g: Graph) -> Planner:
    count = {xs.XNNConcatenate2: 2, xs.XNNConcatenate3: 3, xs.XNNConcatenate4: 4, xs.XNNConcatenate5: 5}[type(n)]
    ids = [n.input1_id, n.input2_id, n.input3_id, n.input4_id, n.input5_id][:count]

    def plan(env: Env) -> list:
        xs_ = [env[i] for i in ids]
        axis = n.axis
        shape = list(xs_[0].shape)
        shape[axis] = sum(x.shape[axis] for x in xs_)
        y = env.empty(n.output_id, shape)
        steps, start = [], 0
        for x in xs_:
            index = (slice(None),) * axis + (slice(start, start + x.shape[axis]),)
            steps.append(partial(np.copyto, y[index], x))
            start += x.shape[axis]
        return steps

    return plan


def _slice(n: Any, node: xs.XNode, g: Graph) -> Planner:
    offsets, sizes = list(n.offsets), list(n.sizes)

    def plan(env: Env) -> list:
        x = env[n.input_id]
        if len(offsets) != x.ndim:
            raise ValueError(f"slice has {len(offsets)} offsets for an input of shape {x.shape}")
        index = tuple(slice(o, d if s == 0 else o + s) for o, s, d in zip(offsets, sizes, x.shape))
        view = x[index]
        return [partial(np.copyto, env.empty(n.output_id, view.shape), view)]

    return plan


def _resize_bilinear(n: Any, node: xs.XNode, g: Graph) -> Planner:
    def plan(env: Env) -> list:
        x = env[n.input_id]
        nb, h, w, c = nhwc(x, "bilinear resize")
        oh, ow = n.new_height, n.new_width
        y = env.empty(n.output_id, (nb, oh, ow, c))
        h0, h1, fh = _resize_taps(h, oh, n.flags, x.dtype)
        w0, w1, fw = _resize_taps(w, ow, n.flags, x.dtype)
        rows, other = np.empty((nb, oh, w, c), x.dtype), np.empty((nb, oh, w, c), x.dtype)
        tmp = np.empty_like(y)
        take = partial(np.take, mode="clip")
        return [
            partial(take, x, h0, axis=1, out=rows),
            partial(take, x, h1, axis=1, out=other),
            partial(np.subtract, other, rows, out=other),
            partial(np.multiply, other, fh[:, None, None], out=other),
            partial(np.add, rows, other, out=rows),
            partial(take, rows, w0, axis=2, out=y),
            partial(take, rows, w1, axis=2, out=tmp),
            partial(np.subtract, tmp, y, out=tmp),
            partial(np.multiply, tmp, fw[:, None], out=tmp),
            partial(np.add, y, tmp, out=y),
        ]

    return plan


def _resize_taps(size: int, out: int, flags: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each output index: the two source indices and the weight of the second."""
    dst = np.arange(out, dtype=np.float64)
    if flags & xs.FLAG_ALIGN_CORNERS:
        src = dst * ((size - 1) / (out - 1) if out > 1 else 0.0)
    elif flags & xs.FLAG_TENSORFLOW_LEGACY_MODE:
        src = dst * (size / out)
    else:
        src = np.maximum((dst + 0.5) * (size / out) - 0.5, 0.0)
    lo = np.minimum(np.floor(src).astype(np.intp), size - 1)
    hi = np.minimum(lo + 1, size - 1)
    return lo, hi, (src - lo).astype(dtype)


PLANNERS: dict[type, Callable[..., Planner]] = {
    **dict.fromkeys(BINARY, _binary),
    **{kind: _elementwise(kernel) for kind, kernel in _UNARY.items()},
    xs.XNNPReLU: _prelu,
    xs.XNNClamp: _clamp_node,
    xs.XNNLeakyReLU: _leaky_relu,
    xs.XNNELU: _elu,
    xs.XNNConvert: _convert,
    xs.XNNCopy: _copy,
    xs.XNNSoftmax: _softmax,
    xs.XNNStaticTranspose: _transpose,
    xs.XNNStaticReshape: _reshape,
    xs.XNNStaticConstantPad: _constant_pad,
    **dict.fromkeys((xs.XNNConcatenate2, xs.XNNConcatenate3, xs.XNNConcatenate4, xs.XNNConcatenate5), _concatenate),
    xs.XNNStaticSlice: _slice,
    xs.XNNStaticResizeBilinear2D: _resize_bilinear,
}
