"""Float planners for the XNNPACK layers: fully connected, convolution (direct GEMM, Winograd, im2col,
grouped, depthwise, transposed), pooling, batch matmul and attention, their weights packed at load.
``PLANNERS`` maps each node kind to its planner.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.runtime.epilogues import NO_CLAMP, bias_act_steps, bias_steps
from edgetorch.backends.xnnpack.runtime.float_elementwise import softmax_steps
from edgetorch.backends.xnnpack.runtime.geometry import Window, conv_window, nhwc, pool_window
from edgetorch.backends.xnnpack.runtime.memory import Env, Planner
from edgetorch.backends.xnnpack.runtime.values import Graph, Unsupported
from edgetorch.runtime import policy
from edgetorch.runtime.kernels import blas_threads, gemm, im2col_gemm, winograd
from edgetorch.runtime.ops import conv as conv_op
from edgetorch.runtime.ops import pool as pool_op


def packed_gemm(
    w: np.ndarray, g: Graph, bias_id: int, act: tuple[float, float], in_place: bool = False
) -> gemm.PackedGemm | None:
    """The fast tier's GEMM (edgetorch/runtime/kernels/gemm.py) for the float32 constant ``w`` [K, N] with its
    constant bias (if any) and the clamp ``act`` in the same pass, packed now (the tier must be on); None when the
    weights or bias are not float32 constants, or when ``w`` could be read in place (a [K, N] constant, no copy
    made for sgemm) and the delegate does not pack such weights (:func:`packs_in_place`)."""
    if w.dtype != np.float32:
        return None
    if in_place and not g.packs_in_place:
        return None
    bias = None
    if bias_id != xs.INVALID_VALUE_ID:
        bias = g.constants.get(bias_id)
        if bias is None or bias.dtype != np.float32 or bias.size != w.shape[1]:
            return None
    return gemm.PackedGemm(w, bias, *act)


def packs_in_place(g: Graph, xnodes: list) -> bool:
    """Whether the delegate packs the float32 weights its fully connected layers would read in place: all of
    them or none, by the policy's one rule (policy.Policy.packs, also the portable runtime's)."""
    in_place = 0
    for node in xnodes:
        n = node.xnode_union
        if isinstance(n, xs.XNNFullyConnected) and n.flags & xs.FLAG_TRANSPOSE_WEIGHTS:
            w = g.constants.get(n.filter_id)
            in_place += w.nbytes if w is not None and w.dtype == np.float32 else 0
    return policy.current().packs(in_place)


def _winograd_weights(n: Any, g: Graph, ocg: int, icg: int) -> np.ndarray | None:
    """A 3x3 convolution's weights in Winograd's form (runtime/kernels/winograd.py) when its filter and bias (if
    any) are float32 constants, else None; for the compiled tier's Winograd step."""
    filt = g.constants.get(n.filter_id)
    bias = g.constants.get(n.bias_id) if n.bias_id != xs.INVALID_VALUE_ID else np.empty(ocg, np.float32)
    if filt is None or bias is None or bias.size != ocg:
        return None
    if filt.dtype != np.float32 or bias.dtype != np.float32:
        return None
    return winograd.prepare(filt.reshape(ocg, 3, 3, icg))


def _fully_connected(n: Any, node: xs.XNode, g: Graph, act: tuple[float, float] = NO_CLAMP) -> Planner:
    transposed = bool(n.flags & xs.FLAG_TRANSPOSE_WEIGHTS)
    packed = fused = None
    if n.filter_id in g.constants:
        w = g.constants[n.filter_id]
        if g.compiled:
            fused = packed_gemm(w if transposed else w.T, g, n.bias_id, act, in_place=transposed)
        if fused is None:
            packed = np.ascontiguousarray(w if transposed else w.T)  # [in, out] for x @ w

    def plan(env: Env) -> list:
        x = env[n.input1_id]
        if fused is not None:
            ic, oc = fused.k, fused.n
        else:
            w = packed if packed is not None else (env[n.filter_id] if transposed else env[n.filter_id].T)
            ic, oc = w.shape
        if x.shape[-1] != ic:
            raise ValueError(f"fully connected expects {ic} input features, found input shape {x.shape}")
        y = env.empty(n.output_id, x.shape[:-1] + (oc,))
        y2 = y.reshape(-1, oc)
        if fused is not None:
            w = g.constants[n.filter_id] if transposed else g.constants[n.filter_id].T  # [in, out], no copy
            where = f"fully connected, node {node.debug_handle}"
            kernel = gemm.choose_linear(fused, w, y2.shape[0], where).kernel
            if kernel != "sgemm":
                return [gemm.linear_step(fused, x.reshape(-1, ic), y2, kernel)]
        product = blas_threads.widened(partial(np.matmul, x.reshape(-1, ic), w, out=y2), y2.size * ic)
        return [product, *bias_act_steps(y2, env, n.bias_id, act)]

    return plan


def _convolution(n: Any, node: xs.XNode, g: Graph, act: tuple[float, float] = NO_CLAMP) -> Planner:
    win, groups, icg, ocg = conv_window(n), n.groups, n.group_input_channels, n.group_output_channels
    k = win.kh * win.kw * icg
    # [OC, KH, KW, ICg] -> per group [K, OCg], so that columns @ w is the convolution.
    w = np.ascontiguousarray(g.constant(n.filter_id, "filter").reshape(groups, ocg, k).transpose(0, 2, 1))
    pointwise = win.kh == win.kw == win.sh == win.sw == 1 and not win.padded
    shape = (win.kh, win.kw, win.sh, win.sw, win.dh, win.dw, groups, icg, ocg)
    minimal = winograd.eligible(*shape) and n.filter_id not in g.exact
    # The packed weights: a 3x3 stride-1 layer makes the form its first schedule takes (Winograd's, or the
    # direct GEMM's for an output of few tiles), so that it does not hold both.
    forms: dict[str, Any] = {}

    def packed(form: str) -> Any:
        if form not in forms:
            forms[form] = (
                _winograd_weights(n, g, ocg, icg) if form == "winograd" else packed_gemm(w[0], g, n.bias_id, act)
            )
        return forms[form]

    if g.compiled and groups == 1 and not minimal:
        packed("direct")

    def plan(env: Env) -> list:
        x = env[n.input1_id]
        nb, h, wd, c = nhwc(x, "convolution")
        if c != groups * icg:
            raise ValueError(f"convolution expects {groups * icg} input channels, found input shape {x.shape}")
        oh, ow = win.out_hw(h, wd)
        y = env.empty(n.output_id, (nb, oh, ow, groups * ocg))
        m = nb * oh * ow
        y2 = y.reshape(m, groups * ocg)
        # Winograd's form: 2.25x fewer products
        if g.compiled and minimal and winograd.worth(nb, oh, ow) and packed("winograd") is not None:
            bias = g.constants.get(n.bias_id) if n.bias_id != xs.INVALID_VALUE_ID else None
            step = winograd.step(x, packed("winograd"), bias, y, win.top, win.left, *act)
            if step is not None:
                return [step]
        fused = packed("direct") if g.compiled and groups == 1 else None
        if fused is not None:
            kernel = gemm.choose_packed(fused, m, f"convolution, node {node.debug_handle}").kernel
        if fused is not None and pointwise:
            return [fused.step(x.reshape(m, c), y2, kernel)]
        if fused is not None and im2col_gemm.takes(fused):  # columns and GEMM a block at a time, in cache
            window = (oh, ow, win.kh, win.kw, win.sh, win.sw, win.dh, win.dw, win.top, win.left)
            step = im2col_gemm.step(fused, x, y2, window, kernel)
            if step is not None:
                return [step]
        if fused is not None:  # the windows' columns, then the packed GEMM with the bias and clamp
            cols = np.empty((m, k), x.dtype)
            return [*_im2col(x, cols.reshape(nb, oh, ow, win.kh, win.kw, c), win), fused.step(cols, y2, kernel)]
        if pointwise and groups == 1:
            steps = [partial(np.matmul, x.reshape(m, c), w[0], out=y2)]
        elif groups == 1:
            steps = _im2col_convolution(x, y2, w[0], win, (oh, ow), env, n.bias_id)
            return steps + bias_act_steps(y2, env, xs.INVALID_VALUE_ID, act)  # the matmul added the bias
        else:
            steps = _grouped_convolution(x, y2, w, win, groups, oh, ow)
        return steps + bias_act_steps(y2, env, n.bias_id, act)

    return plan


def _im2col_convolution(
    x: np.ndarray, y2: np.ndarray, w: np.ndarray, win: Window, out_hw: tuple[int, int], env: Env, bias_id: int
) -> list:
    """One matmul over a buffer of every window's columns. With a bias, a ones column at the end of each
    row and the bias as the last weight row make the matmul add it, saving a pass over the output."""
    (nb, _, _, c), (oh, ow), k = x.shape, out_hw, w.shape[0]
    has_bias = bias_id != xs.INVALID_VALUE_ID
    cols = np.empty((y2.shape[0], k + has_bias), x.dtype)
    if has_bias:
        cols[:, k] = 1
        w = np.concatenate([w, env[bias_id].reshape(1, -1)])
    fill = _im2col(x, cols[:, :k].reshape(nb, oh, ow, win.kh, win.kw, c), win)
    return [*fill, partial(np.matmul, cols, w, out=y2)]


def _im2col(x: np.ndarray, cols: np.ndarray, win: Window) -> list:
    """The op layer's NHWC im2col of ``x`` into ``cols`` [N, OH, OW, KH, KW, *channels] for the window ``win``."""
    padding = [(win.top, win.bottom), (win.left, win.right)]
    return conv_op.im2col(x, cols, (win.kh, win.kw), (win.sh, win.sw), padding, (win.dh, win.dw), "NHWC")


def _grouped_convolution(
    x: np.ndarray, y2: np.ndarray, w: np.ndarray, win: Window, groups: int, oh: int, ow: int
) -> list:
    nb, _, _, c = x.shape
    icg, m = c // groups, nb * oh * ow
    cols = np.empty((groups, nb, oh, ow, win.kh, win.kw, icg), x.dtype)
    out = np.empty((groups, m, w.shape[2]), x.dtype)
    return _im2col(x, cols.transpose(1, 2, 3, 4, 5, 0, 6), win) + [
        partial(np.matmul, cols.reshape(groups, m, -1), w, out=out),
        partial(np.copyto, y2.reshape(m, groups, -1), out.transpose(1, 0, 2)),
    ]


def _depthwise_convolution(n: Any, node: xs.XNode, g: Graph, act: tuple[float, float] = NO_CLAMP) -> Planner:
    """The op layer's NHWC depthwise convolution (edgetorch/runtime/ops/conv.py) with the bias and clamp."""
    win, channels, mult = conv_window(n), n.groups, n.group_output_channels
    if n.group_input_channels != 1:
        raise Unsupported(f"depthwise convolution with {n.group_input_channels} input channels per group")
    # [1, KH, KW, C*mult] -> torch's [C*mult, 1, KH, KW], the op's weight layout
    filt = g.constant(n.filter_id, "filter").reshape(win.kh, win.kw, channels * mult)
    w = np.ascontiguousarray(filt.transpose(2, 0, 1)[:, None])

    def plan(env: Env) -> list:
        x = env[n.input1_id]
        nb, h, wd, c = nhwc(x, "depthwise convolution")
        if c != channels:
            raise ValueError(f"depthwise convolution expects {channels} channels, found input shape {x.shape}")
        oh, ow = win.out_hw(h, wd)
        y = env.empty(n.output_id, (nb, oh, ow, c * mult))
        bias = env[n.bias_id].reshape(-1) if n.bias_id != xs.INVALID_VALUE_ID else None
        padding = [(win.top, win.bottom), (win.left, win.right)]
        where = f"depthwise convolution, node {node.debug_handle}"
        return conv_op.depthwise(x, w, bias, y, (win.sh, win.sw), padding, (win.dh, win.dw), "NHWC", act, where)

    return plan


def _deconvolution(n: Any, node: xs.XNode, g: Graph) -> Planner:
    win, groups, icg, ocg = conv_window(n), n.groups, n.group_input_channels, n.group_output_channels
    adj_h, adj_w = n.adjustment_height, n.adjustment_width
    # [OC, KH, KW, ICg] -> per group [ICg, KH*KW*OCg]: x @ w gives every tap's contribution at once.
    w = g.constant(n.filter_id, "filter").reshape(groups, ocg, win.kh, win.kw, icg)
    w = np.ascontiguousarray(w.transpose(0, 4, 2, 3, 1).reshape(groups, icg, win.kh * win.kw * ocg))

    def plan(env: Env) -> list:
        x = env[n.input1_id]
        nb, h, wd, c = nhwc(x, "transposed convolution")
        if c != groups * icg:
            raise ValueError(f"transposed convolution expects {groups * icg} channels, found input shape {x.shape}")
        full_h = win.sh * (h - 1) + win.dh * (win.kh - 1) + 1 + adj_h
        full_w = win.sw * (wd - 1) + win.dw * (win.kw - 1) + 1 + adj_w
        oh, ow = full_h - win.top - win.bottom, full_w - win.left - win.right
        y = env.empty(n.output_id, (nb, oh, ow, groups * ocg))
        m = nb * h * wd
        cols = np.empty((groups, m, w.shape[2]), x.dtype)
        full = np.zeros((nb, full_h, full_w, groups, ocg), x.dtype)
        contributions = cols.reshape(groups, nb, h, wd, win.kh, win.kw, ocg).transpose(1, 2, 3, 4, 5, 0, 6)
        steps = [partial(np.matmul, x.reshape(m, groups, icg).transpose(1, 0, 2), w, out=cols), partial(full.fill, 0)]
        for i, j in win.taps():
            r, s = i * win.dh, j * win.dw
            dst = full[:, r : r + win.sh * (h - 1) + 1 : win.sh, s : s + win.sw * (wd - 1) + 1 : win.sw]
            steps.append(partial(np.add, dst, contributions[:, :, :, i, j], out=dst))
        crop = full[:, win.top : win.top + oh, win.left : win.left + ow].reshape(nb, oh, ow, groups * ocg)
        steps.append(partial(np.copyto, y, crop))
        return steps + bias_steps(y.reshape(-1, groups * ocg), env, n.bias_id)

    return plan


def _pooling(n: Any, node: xs.XNode, g: Graph, average: bool) -> Planner:
    """The op layer's NHWC max or average pooling (edgetorch/runtime/ops/pool.py); XNNPACK's average counts
    only the taps inside the input."""
    win, what = pool_window(n), "average pooling" if average else "max pooling"

    def plan(env: Env) -> list:
        x = env[n.input_id]
        nb, h, wd, c = nhwc(x, what)
        y = env.empty(n.output_id, (nb, *win.out_hw(h, wd), c))
        kernel, stride, dilation = (win.kh, win.kw), (win.sh, win.sw), (win.dh, win.dw)
        padding = [(win.top, win.bottom), (win.left, win.right)]
        if average:
            return pool_op.avg_pool(x, y, kernel, stride, padding, "NHWC", dilation=dilation)
        return pool_op.max_pool(x, y, kernel, stride, padding, dilation, "NHWC")

    return plan


def _global_average_pooling(n: Any, node: xs.XNode, g: Graph) -> Planner:
    """The op layer's global average pooling over the spatial dims (edgetorch/runtime/ops/pool.py)."""
    keep = bool(n.flags & xs.FLAG_KEEP_DIMS)

    def plan(env: Env) -> list:
        x = env[n.input_id]
        if x.ndim < 3:
            raise ValueError(f"global average pooling expects an input with spatial dims, found shape {x.shape}")
        kept = (x.shape[0],) + (1,) * (x.ndim - 2) + (x.shape[-1],)
        y = env.empty(n.output_id, kept if keep else (x.shape[0], x.shape[-1]))
        return pool_op.global_avg_pool(x, y)

    return plan


def _batch_matmul(n: Any, node: xs.XNode, g: Graph) -> Planner:
    transpose_b = bool(n.flags & xs.FLAG_TRANSPOSE_B)

    def plan(env: Env) -> list:
        a, b = env[n.input1_id], env[n.input2_id]
        if transpose_b:
            b = b.swapaxes(-1, -2)
        if a.shape[-1] != b.shape[-2]:
            raise ValueError(f"batch matmul of shapes {a.shape} and {b.shape} does not line up")
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        y = env.empty(n.output_id, batch + (a.shape[-2], b.shape[-1]))
        packed = gemm.batch_matmul(a, b, y) if g.compiled else None
        return [partial(np.matmul, a, b, out=y) if packed is None else packed]

    return plan


def _attention(n: Any, node: xs.XNode, g: Graph) -> Planner:
    # XNNPACK's attention: softmax((query * scale) @ key^T + mask) @ value, scale per channel, mask [T, U].
    def plan(env: Env) -> list:
        q, k, v = env[n.query_id], env[n.key_id], env[n.value_id]
        scale, mask = env[n.scale_id], env[n.mask_id]
        if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
            raise ValueError(f"attention shapes do not line up: query {q.shape}, key {k.shape}, value {v.shape}")
        batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        qs = np.empty(q.shape, q.dtype)
        scores = np.empty(batch + (q.shape[-2], k.shape[-2]), q.dtype)
        y = env.empty(n.output_id, batch + (q.shape[-2], v.shape[-1]))
        return [
            partial(np.multiply, q, scale, out=qs),
            partial(np.matmul, qs, k.swapaxes(-1, -2), out=scores),
            partial(np.add, scores, mask, out=scores),
            *softmax_steps(scores, scores),
            partial(np.matmul, scores, v, out=y),
        ]

    return plan


PLANNERS: dict[type, Callable[..., Planner]] = {
    xs.XNNFullyConnected: _fully_connected,
    xs.XNNConv2d: _convolution,
    xs.XNNDepthwiseConv2d: _depthwise_convolution,
    xs.XNNConvTranspose2d: _deconvolution,
    xs.XNNMaxPooling2d: partial(_pooling, average=False),
    xs.XNNAvgPooling2d: partial(_pooling, average=True),
    xs.XNNGlobalAvgPooling2d: _global_average_pooling,
    xs.XNNBatchMatrixMultiply: _batch_matmul,
    xs.XNNScaledDotProductAttention: _attention,
}
