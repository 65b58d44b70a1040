"""The XNNPACK backend's runtime half: runs ExecuTorch XNNPACK delegate blobs with NumPy.

``init`` parses the blob, resolves constants as zero-copy views (of the blob or
of the program's named data), prepacks weights, and compiles the node list into
planners. A planner, given the arrays of its inputs at concrete shapes,
allocates its outputs and returns bound steps (BLAS calls and ufuncs writing
into preallocated memory). A plan (the steps for one set of input shapes) is
built once and reused; a call with new input shapes builds a new one, which is
how XNNPACK graphs reshape at run time. Inside the graph, convolutions and
pooling work on NHWC tensors; ExecuTorch's lowering inserts the transposes from
and to the NCHW tensors the delegate exchanges with the program.

Imports only the standard library, NumPy and the format code; registers itself
as ``XnnpackBackend`` at import.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from edgetorch.backends.xnnpack import qfast, qgemm, qgemv
from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.blob import BlobError, XnnpackBlob, parse_blob
from edgetorch.backends.xnnpack.runtime.epilogues import clamp_steps, min_max, with_activation
from edgetorch.backends.xnnpack.runtime.memory import RUN, Env, Planner, Step
from edgetorch.backends.xnnpack.runtime.planners import APPLY_ACTIVATION, FLOAT_PLANNERS
from edgetorch.backends.xnnpack.runtime.values import READ_FIELDS, Graph, QParams, Unsupported, qrange, read_ids
from edgetorch.errors import DelegateLoadError, InvalidInputError
from edgetorch.runtime import etdump
from edgetorch.runtime.backends import BackendInterface, register_backend
from edgetorch.runtime.kernels import blas_threads
from edgetorch.runtime.kernels import compiled as compiled_kernels
from edgetorch.runtime.memory import resize

_MAX_PLANS = 8


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
    dequantized: np.ndarray = NO_ROWS,
) -> None:
    """Per-row int8 quantization of ``x``: float32 q - zero_point into ``centred``, and q into ``q`` if given.
    A ``dequantized`` [rows, K + 1] buffer (compiled tier only) also gets (q - zero_point) * scale."""
    x2 = x.reshape(scale.shape[0], -1)
    if qfast.available() and x2.flags.c_contiguous and centred.flags.c_contiguous:
        qfast.dynamic_quantize()(x2, centred.reshape(x2.shape), scale, zero_point, dequantized)  # same bits
        if q is not None:
            np.copyto(q.reshape(x2.shape), centred.reshape(x2.shape) + zero_point, casting="unsafe")
        return
    _dynamic_params(x2, scale, zero_point)
    t = centred.reshape(x2.shape)
    np.divide(x2, scale, out=t)
    np.rint(t, out=t)
    np.clip(t, -128 - zero_point, 127 - zero_point, out=t)
    if q is not None:
        np.copyto(q.reshape(x2.shape), t + zero_point, casting="unsafe")


def _quantized_convert(n: Any, node: xs.XNode, g: Graph) -> Planner:
    qin, qout = g.quant.get(n.input_id), g.quant.get(n.output_id)

    def plan(env: Env) -> list:
        x = env[n.input_id]
        y = env.empty(n.output_id, x.shape)
        if qin is not None and qout is None:
            return dequantize_steps(x, y, qin)
        if qin is None and qout is not None and qout.scale is None:
            rows = math.prod(x.shape[: x.ndim - qout.nonbatch_dims])
            scale, zp = np.empty((rows, 1), np.float32), np.empty((rows, 1), np.float32)
            env.dynamic[n.output_id] = (scale, zp)
            c = env.centred_buffer(n.output_id, x.shape)
            deq = NO_ROWS
            if qfast.available() and n.output_id in g.fc_inputs:
                # The fully connected's input buffer, filled in the same pass; not pooled.
                deq, ones = env.ones_column(rows, x.size // max(rows, 1))
                env.fc_input[n.output_id] = deq
            q = y if n.output_id in g.needs_int8 else None
            return [partial(dynamic_convert, x, c, q, scale, zp, deq)] + ([ones] if deq.size else [])
        dest = (env, n.output_id)
        if qin is None:
            return quantize_steps(x, y, qout.scale, qout.zero_point, -math.inf, math.inf, dest)
        f = np.empty(x.shape, np.float32)
        quantize = quantize_steps(f, y, qout.scale, qout.zero_point, -math.inf, math.inf, dest)
        return dequantize_steps(x, f, qin) + quantize

    return plan


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
    dest: tuple | None = None,
) -> list:
    """XNNPACK's fp32 requantization of the int32 accumulator ``acc`` (+ bias) into ``q``."""
    lo, hi = min_max(node)
    lo, hi = (lo / qp.scale if lo != -math.inf else lo), (hi / qp.scale if hi != math.inf else hi)
    if qfast.available() and dest is not None and acc.flags.c_contiguous:
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


def _fused_add(n: Any, node: xs.XNode, g: Graph, env: Env) -> list | None:
    """A static int8 add as one compiled pass (qfast.py), when both inputs are centred integers of one
    shape and the output is quantized per tensor: the dequantizing fallback's float32 operations in its
    order (each input times its scale, the sum, the node's float clamp, times 1 / output scale, clip,
    round half to even), so the same bits. None when the case does not apply."""
    qa, qb, qy = g.quant.get(n.input1_id), g.quant.get(n.input2_id), g.quant.get(n.output_id)
    if qy is None or qy.scale is None or np.ndim(qy.scale) or qa is None or qb is None:
        return None
    a, b = env.centred.get(n.input1_id), env.centred.get(n.input2_id)
    if a is None or b is None or a.shape != b.shape or not (a.flags.c_contiguous and b.flags.c_contiguous):
        return None
    flo, fhi = (np.float32(v) for v in min_max(node))
    inv = np.float32(1.0) / np.float32(qy.scale)
    sa, sb = np.float32(qa.scale), np.float32(qb.scale)
    q = env.empty(n.output_id, a.shape)

    def step(t: np.ndarray, qlo: np.float32, qhi: np.float32) -> Step:
        flat = t.reshape(-1)
        return partial(qfast.quantized_add(), a.reshape(-1), sa, b.reshape(-1), sb, flo, fhi, inv, qlo, qhi, flat)

    return fused_quantize_out((env, n.output_id), q, qy.zero_point, qy.scale, -math.inf, math.inf, a.shape, step)


def weight_scale(qp: QParams, channels: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(qp.scale, np.float32).reshape(-1), (channels,)).astype(np.float32)


def _quantized_fully_connected(n: Any, node: xs.XNode, g: Graph) -> Planner:
    wq = g.quant.get(n.filter_id)
    if wq is None or n.filter_id not in g.constants:
        raise Unsupported("a quantized fully connected needs constant quantized weights")
    dims = list(g.value(n.filter_id).dims)
    transposed = bool(n.flags & xs.FLAG_TRANSPOSE_WEIGHTS)
    oc, ic = (dims[1], dims[0]) if transposed else (dims[0], dims[1])
    xq, yq = g.quant.get(n.input1_id), g.quant.get(n.output_id)
    if xq is None:
        raise Unsupported("a fully connected with quantized weights needs a quantized input")
    bias = None
    if n.bias_id != xs.INVALID_VALUE_ID:
        bias = g.constant(n.bias_id, "bias").reshape(-1)
        bias = bias.astype(np.float32) if n.bias_id in g.quant else bias
    four_bit = g.value(n.filter_id).datatype == xs.XNNDatatype.xnn_datatype_qbint4
    if xq.scale is None:  # dynamic int8 input, float output
        return _dynamic_fully_connected(n, node, g, wq, bias, (ic, oc), transposed, four_bit)
    if four_bit or yq is None:
        raise Unsupported("static int8 fully connected needs int8 weights and a quantized output")
    w = g.constants[n.filter_id].astype(np.float32) - np.float32(wq.zero_point)
    w, wscale = (w if transposed else w.T), weight_scale(wq, oc)  # centred integers [in, out]
    # The raw input q times w, with the zero point's share sum_k zp * w[k, n] taken off the bias.
    w0 = w
    correction = np.float64(xq.zero_point) * w.astype(np.float64).sum(axis=0)
    waug = qgemm.with_bias_row(w, (0 if bias is None else bias.astype(np.float64)) - correction)
    xmax = float(max(-qrange(g.dtype(n.input1_id))[0], qrange(g.dtype(n.input1_id))[1]))
    bound = waug.copy()
    bound[ic] /= xmax  # the bias row multiplies a column of ones, not an input
    splits = qgemm.exact_splits(bound, xmax)
    factor = (np.float32(xq.scale) * wscale / np.float32(yq.scale)).astype(np.float32)
    centred: list = []  # (weights with the plain bias, splits), made when a plan first has centred input

    def plan(env: Env) -> list:
        x = env.centred.get(n.input1_id)
        w, cuts = waug, splits
        if x is not None:
            if not centred:
                plain = qgemm.with_bias_row(w0, bias)
                bound = plain.copy()
                bound[ic] /= 256
                centred.append((plain, qgemm.exact_splits(bound, 256.0)))
            w, cuts = centred[0]
        else:
            x = env[n.input1_id]
        x2 = x.reshape(-1, ic)
        xa, ones = env.ones_column(x2.shape[0], ic)
        y = env.empty(n.output_id, x.shape[:-1] + (oc,))
        acc = env.cursor.take((x2.shape[0], oc), np.dtype(np.float32))
        steps = [ones, partial(np.copyto, xa[:, :ic], x2)] + qgemm.matmul_steps(xa, w, acc, cuts)
        return steps + requantize_steps(acc, None, factor, y.reshape(-1, oc), yq, node, (env, n.output_id))

    return plan


def _float_weights(g: Graph, n: Any, wq: QParams, shape: tuple[int, int], transposed: bool, four_bit: bool):
    """A dynamically quantized fully connected's weights dequantized to float32 [in, out]."""
    ic, oc = shape
    if four_bit:
        w = unpack_int4(g.constants[n.filter_id], oc, ic).astype(np.float32)
        return (w.reshape(oc, ic // wq.group_size, wq.group_size) * wq.scale[:, :, None]).reshape(oc, ic).T
    w = g.constants[n.filter_id].astype(np.float32) - np.float32(wq.zero_point)
    return (w if transposed else w.T) * weight_scale(wq, oc)


def _integer_weights(
    g: Graph, n: Any, wq: QParams, bias: np.ndarray | None, shape: tuple[int, int], transposed: bool, four_bit: bool
) -> qgemv.IntegerLinear | None:
    """The weights for the compiled integer GEMV (qgemv.py), or None when the tier is off or the layout is one
    it does not take (the node then dequantizes them at load)."""
    ic, oc = shape
    if four_bit:
        block = wq.group_size
        if transposed or ic % 2 or block % 2 or ic % block or wq.scale.shape != (oc, ic // block):
            return None
        packed = np.asarray(g.constants[n.filter_id]).reshape(oc, ic // 2)
        return qgemv.IntegerLinear.qb4w(packed, wq.scale, block, oc, ic, bias, _keeps_floats(g))
    if wq.zero_point != 0:
        return None
    w = np.asarray(g.constants[n.filter_id]).reshape((ic, oc) if transposed else (oc, ic))
    return qgemv.IntegerLinear.qc8w(w.T if transposed else w, weight_scale(wq, oc), bias, _keeps_floats(g))


def _keeps_floats(g: Graph) -> bool:
    """Whether a layer called with more rows than its GEMV takes keeps its float32 weights after the first
    such call: when the program's weights (its named data) are small (qgemv.FLOAT_BUDGET)."""
    return g.named_bytes <= qgemv.FLOAT_BUDGET


def _dynamic_fully_connected(
    n: Any,
    node: xs.XNode,
    g: Graph,
    wq: QParams,
    bias: np.ndarray | None,
    shape: tuple[int, int],
    transposed: bool,
    four_bit: bool,
) -> Planner:
    """Dynamically quantized input [rows, ic] (per-row scale and zero point) times quantized weights.

    With the [fast] tier the weights stay integers: up to ``max_rows`` input rows (a decode step) run the
    integer GEMV of qgemv.py; a larger input (a prefill) runs sgemm on the weights dequantized, kept after the
    first such call in a small model, redone per call in a large one (see qgemv.FLOAT_BUDGET). Without the tier
    they are dequantized once, at load, and every call runs sgemm."""
    ic, oc = shape
    integer = _integer_weights(g, n, wq, bias, shape, transposed, four_bit)
    waug = (
        None
        if integer is not None
        else qgemm.with_bias_row(_float_weights(g, n, wq, shape, transposed, four_bit), bias)
    )

    def plan(env: Env) -> list:
        x = env[n.input1_id]
        x2 = x.reshape(-1, ic)
        scale, zp = env.dynamic[n.input1_id]
        y = env.empty(n.output_id, x.shape[:-1] + (oc,))
        y2 = y.reshape(-1, oc)
        c = env.centred.get(n.input1_id)
        lo, hi = min_max(node)
        clamp = clamp_steps(y2, y2, lo, hi)  # no steps without a clamp
        if integer is not None and x2.shape[0] <= integer.max_rows:
            if c is not None and c.flags.c_contiguous:
                return integer.steps(c.reshape(x2.shape), scale, y2, lo, hi)
            xc = np.empty(x2.shape, np.float32)
            return [partial(np.subtract, x2, zp, out=xc)] + integer.steps(xc, scale, y2, lo, hi)

        def gemm(xin: np.ndarray) -> Step:
            if integer is None:
                return partial(np.matmul, xin, waug, out=y2)
            return partial(integer.matmul, xin, y2)

        ready = env.fc_input.get(n.input1_id)
        if ready is not None and ready.shape == (x2.shape[0], ic + 1):  # the convert wrote the scaled input
            return [gemm(ready)] + clamp
        xa, ones = env.ones_column(x2.shape[0], ic)
        xd = xa[:, :ic]
        if c is None:
            steps = [ones, partial(np.copyto, xd, x2), partial(np.subtract, xd, zp, out=xd)]
            steps.append(partial(np.multiply, xd, scale, out=xd))
        else:
            steps = [ones, partial(np.multiply, c.reshape(x2.shape), scale, out=xd)]
        return steps + [gemm(xa)] + clamp

    return plan


def _quantized_convolution(n: Any, node: xs.XNode, g: Graph) -> Planner:
    """Static int8 convolution: the float planner on centred integers, then XNNPACK's requantization."""
    xq, wq, yq = g.quant.get(n.input1_id), g.quant.get(n.filter_id), g.quant.get(n.output_id)
    if xq is None or wq is None or (yq is None and xq.scale is not None):
        raise Unsupported(
            "a quantized convolution needs a quantized input and weights, and a quantized output if static"
        )
    wid, xid, yid = g.shadow(n.filter_id), g.shadow(n.input1_id), g.shadow(n.output_id)
    channels = list(g.value(n.output_id).dims)[-1]
    wscale = weight_scale(wq, channels)
    w = g.constant(n.filter_id, "filter").astype(np.float32) - np.float32(wq.zero_point)
    bias = g.constant(n.bias_id, "bias").reshape(-1).astype(np.float32) if n.bias_id != xs.INVALID_VALUE_ID else None
    dynamic = xq.scale is None
    # Static: centred integers and the int32 bias, inside the float planner (an im2col convolution adds
    # the bias in its sgemm). Dynamic: weights dequantized once; the bias comes after the input scale.
    # Output channels: dim 0 of a convolution's [OC, KH, KW, IC] filter, the last of a depthwise [1, KH, KW, OC].
    per_out = wscale.reshape(-1, 1, 1, 1) if isinstance(n, xs.XNNConv2d) else wscale
    g.constants[wid] = w * per_out if dynamic else w
    bid = xs.INVALID_VALUE_ID
    fused_bias = bias is not None and not dynamic and qfast.available()  # added in the compiled requantize
    if bias is not None and not dynamic and not fused_bias:
        bid = g.shadow(n.bias_id)
        g.constants[bid] = bias
    if not dynamic:
        g.exact.add(wid)
    inner = FLOAT_PLANNERS[type(n)](
        dataclasses.replace(n, input1_id=xid, filter_id=wid, output_id=yid, bias_id=bid), node, g
    )
    del g.constants[wid]  # the float planner keeps its own packed copy
    if dynamic:  # dynamic int8 input, float output: one input scale per batch entry

        def plan(env: Env) -> list:
            x = env[n.input1_id]
            scale, zp = env.dynamic[n.input1_id]
            rows = (scale.shape[0],) + (1,) * (x.ndim - 1)
            c = env.centred.get(n.input1_id)
            if c is None:
                xc = env.empty(xid, x.shape)
                steps = [partial(np.subtract, x, zp.reshape(rows), out=xc)]
            else:
                env.arrays[xid], steps = c, []
            steps += inner(env)
            acc = env[yid]
            env.alias(n.output_id, yid, acc)
            steps.append(partial(np.multiply, acc, scale.reshape(rows), out=acc))
            if bias is not None:
                steps.append(partial(np.add, acc, bias, out=acc))
            lo, hi = min_max(node)
            return steps + ([] if (lo, hi) == (-math.inf, math.inf) else clamp_steps(acc, acc, lo, hi))

        return plan
    factor = (np.float32(xq.scale) * wscale / np.float32(yq.scale)).astype(np.float32)

    def plan(env: Env) -> list:
        _, steps = centred_input(env, n.input1_id, xq, xid)
        steps += inner(env)
        acc = env[yid]
        y = env.empty(n.output_id, acc.shape)
        return steps + requantize_steps(acc, bias if fused_bias else None, factor, y, yq, node, (env, n.output_id))

    return plan


def _dequantized(n: Any, node: xs.XNode, g: Graph) -> Planner:
    """Any other node: its float kernel on dequantized inputs, its output requantized."""
    compiler = FLOAT_PLANNERS.get(type(n))
    if compiler is None:
        raise Unsupported("it has no kernel here")
    reads = [v for v in read_ids(n) if v in g.quant]
    if any(g.quant[v].scale is None or np.ndim(g.quant[v].scale) for v in reads):
        raise Unsupported("it reads a per-channel or dynamically quantized value, which only linear and conv take")
    swap = {v: g.shadow(v) for v in reads}
    out_q = g.quant.get(n.output_id)
    if out_q is not None:
        swap[n.output_id] = g.shadow(n.output_id)
    fields = {f: swap[getattr(n, f)] for f in ("output_id",) + READ_FIELDS if getattr(n, f, None) in swap}
    for v in reads:
        if v in g.constants:
            g.constants[swap[v]] = (g.constants[v].astype(np.float32) - g.quant[v].zero_point) * g.quant[v].scale
    shadowed = dataclasses.replace(n, **fields)
    inner = with_activation(shadowed, node, compiler(shadowed, node, g))  # the clamp acts on the float result

    fusable = type(n) is xs.XNNAdd and len(reads) == 2 and n.input1_id not in g.constants
    fusable = fusable and n.input2_id not in g.constants

    def plan(env: Env) -> list:
        if fusable and qfast.available():
            fused = _fused_add(n, node, g, env)
            if fused is not None:
                return fused
        steps = []
        for v in dict.fromkeys(reads):
            if v not in g.constants:
                c = env.centred.get(v)
                f = env.empty(swap[v], env[v].shape if c is None else c.shape)
                if c is None:
                    steps += dequantize_steps(env[v], f, g.quant[v])
                else:
                    steps.append(partial(np.multiply, c, g.quant[v].scale, out=f))
        steps += inner(env)
        if out_q is not None:
            f = env[swap[n.output_id]]
            q = env.empty(n.output_id, f.shape)
            steps += quantize_steps(f, q, out_q.scale, out_q.zero_point, -math.inf, math.inf, (env, n.output_id))
        return steps

    return plan


def quantized_node(n: Any, node: xs.XNode, g: Graph) -> Planner:
    if isinstance(n, xs.XNNConvert):
        return _quantized_convert(n, node, g)
    if isinstance(n, xs.XNNFullyConnected):
        return _quantized_fully_connected(n, node, g)
    if isinstance(n, (xs.XNNConv2d, xs.XNNDepthwiseConv2d)) and n.filter_id in g.quant:
        return _quantized_convolution(n, node, g)
    if isinstance(n, xs.XNNClamp):
        qin, qout = g.quant.get(n.input_id), g.quant.get(n.output_id)
        if qin is not None and qout is not None and same_tensor_params(qin, qout):
            return _integer_clamp(n, node, g, qout)
    return _dequantized(n, node, g)


def same_tensor_params(a: QParams, b: QParams) -> bool:
    return a.scale is not None and not np.ndim(a.scale) and a.scale == b.scale and a.zero_point == b.zero_point


def _reader_counts(reads: list) -> Counter:
    """Value id -> how many nodes read it (``reads``: each node's read value ids)."""
    return Counter(vid for r in reads for vid in set(r))


def fuse_clamps(g: Graph, xnodes: list, reads: list) -> None:
    """Record in ``g.narrow`` each quantized clamp that is the only reader of its input, between equal
    per-tensor parameters: the input's producer clips to the clamp's bounds when it rounds, and the
    clamp passes its input on (ExecuTorch's static int8 lowering keeps ReLU6 as a node of its own)."""
    readers = _reader_counts(reads)
    for node in xnodes:
        n = node.xnode_union
        if not isinstance(n, xs.XNNClamp) or readers.get(n.input_id) != 1 or n.input_id in g.needs_int8:
            continue
        qin, qout = g.quant.get(n.input_id), g.quant.get(n.output_id)
        if qin is not None and qout is not None and same_tensor_params(qin, qout):
            lo, hi = min_max(node)
            g.narrow[n.input_id] = qbounds(g.dtype(n.output_id), qout.scale, qout.zero_point, lo, hi)


def _integer_clamp(n: Any, node: xs.XNode, g: Graph, qp: QParams) -> Planner:
    """A clamp (ReLU, ReLU6, hardtanh) between equal per-tensor parameters: a clip of the integers."""
    lo, hi = min_max(node)

    def plan(env: Env) -> list:
        c = env.centred.get(n.input_id)
        y = env.empty(n.output_id, (env[n.input_id] if c is None else c).shape)
        qmin, qmax = qbounds(y.dtype, qp.scale, qp.zero_point, lo, hi)
        if c is None:
            return [partial(np.clip, env[n.input_id], y.dtype.type(qmin), y.dtype.type(qmax), out=y)]
        zp = qp.zero_point
        if n.input_id in env.narrowed:  # its producer already clipped to these bounds
            env.hand_over(n.input_id, n.output_id)
            return quantize_steps(c, y, np.float32(1), zp, -math.inf, math.inf) if n.output_id in g.needs_int8 else []
        t = env.centred_buffer(n.output_id, c.shape)  # centred integers clipped stay integers: no rounding
        steps = [partial(np.clip, c, np.float32(qmin - zp), np.float32(qmax - zp), out=t)]
        if n.output_id in g.needs_int8:
            steps += quantize_steps(t, y, np.float32(1), zp, -math.inf, math.inf)
        return steps

    return plan


def _compile_node(index: int, node: xs.XNode, g: Graph) -> Planner:
    n = node.xnode_union
    kind = type(n).__name__ if n is not None else "an empty node"
    if n is not None and any(v in g.quant for v in read_ids(n) + [getattr(n, "output_id", xs.INVALID_VALUE_ID)]):
        try:
            return _named_planner(index, kind, quantized_node(n, node, g))
        except Unsupported as e:
            raise DelegateLoadError(f"XNNPACK node {index} ({kind}) cannot run here: {e}") from None
    compiler = FLOAT_PLANNERS.get(type(n))
    if compiler is None:
        raise DelegateLoadError(
            f"XNNPACK node {index} ({kind}) is not supported by edgetorch's XNNPACK runtime; "
            "run this program with ExecuTorch or lower the model without this operator in the partition"
        )
    lo, hi = min_max(node)
    try:
        if type(n) in APPLY_ACTIVATION:  # the layer clamps its own output, with its bias where it can
            return _named_planner(index, kind, compiler(n, node, g, (lo, hi)))  # type: ignore[call-arg]
        planner = compiler(n, node, g)
    except Unsupported as e:
        raise DelegateLoadError(f"XNNPACK node {index} ({kind}) cannot run here: {e}") from None
    if isinstance(n, xs.XNNClamp) or (lo == -math.inf and hi == math.inf):
        return _named_planner(index, kind, planner)

    def with_activation(env: Env) -> list:
        steps = planner(env)
        y = env[n.output_id]
        return steps + clamp_steps(y, y, lo, hi)

    return _named_planner(index, kind, with_activation)


# Float nodes that write a fresh output buffer, so that a clamp reading only them can clamp it in place.
_CLAMP_FUSABLE = (*APPLY_ACTIVATION, xs.XNNConvTranspose2d, xs.XNNBatchMatrixMultiply)


def fuse_float_clamps(g: Graph, xnodes: list, reads: list) -> list:
    """The nodes to compile: ``xnodes`` with each float clamp that is the only reader of a fresh-output
    node's (with no activation of its own) moved into that node's output bounds, and the clamp itself made a
    copy (which shares its input's memory). ExecuTorch fuses ReLU/ReLU6 into the layer when it lowers;
    edgetorch's lowering keeps a clamp node, which costs a pass over the layer's output and, in the fast
    tier, is free inside the layer's own last pass."""
    readers = _reader_counts(reads)
    producer = {getattr(node.xnode_union, "output_id", None): i for i, node in enumerate(xnodes)}
    external = {vid for _, vid in g.inputs + g.outputs}
    nodes = list(xnodes)
    for i, node in enumerate(xnodes):
        n: Any = node.xnode_union
        if not isinstance(n, xs.XNNClamp) or readers.get(n.input_id) != 1 or n.input_id in external:
            continue
        p = producer.get(n.input_id)
        if p is None or p > i or not isinstance(nodes[p].xnode_union, _CLAMP_FUSABLE):
            continue
        if nodes[p].output_min_max is not None or n.input_id in g.quant or n.output_id in g.quant:
            continue
        if g.dtype(n.input_id).kind != "f":
            continue
        nodes[p] = dataclasses.replace(nodes[p], output_min_max=node.output_min_max)
        copy = xs.XNNCopy(n.input_id, n.output_id, n.flags)
        nodes[i] = dataclasses.replace(node, xnode_union=copy, output_min_max=None)
    return nodes


def _named_planner(index: int, kind: str, planner: Planner) -> Planner:
    """Make plan-time failures name the node they come from."""

    def plan(env: Env) -> list:
        try:
            return planner(env)
        except (ValueError, Unsupported) as e:
            raise _PlanError(f"XNNPACK node {index} ({kind}): {e}") from None

    return plan


class _PlanError(Exception):
    """Building a plan failed; the message names the node. Raised as a load or an input error by the caller."""


@dataclass
class _Plan:
    """The bound steps for one set of input shapes."""

    inputs: list  # arrays the external inputs are copied into
    steps: list
    outputs: list  # arrays holding the external outputs after the steps run
    ends: list = field(default_factory=list)  # per node: the index after its last step (for traced runs)


class XnnpackDelegate:
    """One initialised delegate: its graph, its compiled nodes and a plan per input-shape set."""

    def __init__(self, blob: XnnpackBlob, named_data: Mapping[str, memoryview]):
        self.graph = Graph(blob, named_data)
        self.xnodes = list(blob.graph.xnodes)
        self.graph.needs_int8 = {vid for _, vid in self.graph.outputs} | {
            vid
            for node in blob.graph.xnodes
            if isinstance(node.xnode_union, xs.XNNConvert)
            for vid in read_ids(node.xnode_union)
        }
        self.graph.fc_inputs = {
            node.xnode_union.input1_id
            for node in blob.graph.xnodes
            if isinstance(node.xnode_union, xs.XNNFullyConnected)
        }
        self.reads = [read_ids(node.xnode_union) for node in blob.graph.xnodes]
        fuse_clamps(self.graph, self.xnodes, self.reads)
        compiled = fuse_float_clamps(self.graph, self.xnodes, self.reads)
        self.planners = [_compile_node(i, node, self.graph) for i, node in enumerate(compiled)]
        self.last_use = {vid: i for i, reads in enumerate(self.reads) for vid in reads}
        self.external = {vid for _, vid in self.graph.inputs + self.graph.outputs}
        self.plans: OrderedDict[tuple, _Plan] = OrderedDict()
        declared = tuple(tuple(self.graph.value(vid).dims) for _, vid in self.graph.inputs)
        try:
            with RUN:
                self.plan(declared)
        except _PlanError as e:
            raise DelegateLoadError(str(e)) from None

    def plan(self, shapes: tuple) -> _Plan:
        """The steps for external inputs of ``shapes``, built on first use and cached."""
        plan = self.plans.get(shapes)
        if plan is not None:
            return plan
        env = Env(self.graph, self.last_use, self.external)
        inputs = [env.empty(vid, shape) for (_, vid), shape in zip(self.graph.inputs, shapes)]
        steps, ends = [], []
        for index, (planner, reads) in enumerate(zip(self.planners, self.reads)):
            steps += planner(env)
            ends.append(len(steps))
            env.release(index, reads)
        plan = _Plan(inputs, steps, [env[vid] for _, vid in self.graph.outputs], ends)
        if any(compiled_kernels.splits(step) for step in steps):  # numba's threads run: BLAS's pool waits
            self.graph.own_threads = True
        self.plans[shapes] = plan
        if len(self.plans) > _MAX_PLANS:
            self.plans.popitem(last=False)
        return plan

    def execute(self, args: Sequence[Any]) -> list | None:
        """Run on ``args`` (inputs then outputs); returns the outputs only when their shapes changed."""
        if len(args) < self.graph.arg_count:
            raise InvalidInputError(
                f"the XNNPACK delegate takes {self.graph.arg_count} arguments (inputs then outputs), got {len(args)}"
            )
        ins = [args[ext] for ext, _ in self.graph.inputs]
        shapes = tuple(np.shape(a) for a in ins)
        with RUN:
            try:
                plan = self.plan(shapes)
            except _PlanError as e:
                raise InvalidInputError(
                    f"the XNNPACK delegate cannot run inputs of shapes {list(shapes)}: {e}"
                ) from None
            for dst, src in zip(plan.inputs, ins):
                np.copyto(dst, src)
            with blas_threads.held(self.graph.own_threads):
                if etdump.tracing():
                    self._traced(plan)
                else:
                    for step in plan.steps:
                        step()
            return self._write_outputs(plan, args)

    def _traced(self, plan: _Plan) -> None:
        """Run the steps node by node, logging each node as a delegate event keyed by its debug handle
        (the identifier the delegate map of the ETRecord resolves), named after its node kind."""
        start = 0
        for node, end in zip(self.xnodes, plan.ends):
            t0 = etdump.clock_ns()
            for step in plan.steps[start:end]:
                step()
            kind = type(node.xnode_union).__name__
            etdump.event_tracer_log_profiling_delegate(kind, node.debug_handle, t0, etdump.clock_ns())
            start = end

    def _write_outputs(self, plan: _Plan, args: Sequence[Any]) -> list | None:
        results, resized = [], False
        for (ext, _), value in zip(self.graph.outputs, plan.outputs):
            dst = args[ext]
            if dst.shape != value.shape:
                resized = True
                dst = resize(dst, value.shape)
            np.copyto(dst, value)
            results.append(dst)
        return results if resized else None


class XnnpackBackend(BackendInterface):
    """ExecuTorch's XnnpackBackend, run with NumPy."""

    def init(
        self, processed: memoryview, compile_specs: Mapping[str, bytes], named_data: Mapping[str, memoryview]
    ) -> XnnpackDelegate:
        try:
            blob = parse_blob(processed)
        except BlobError as e:
            raise DelegateLoadError(f"cannot load the XNNPACK delegate: {e}") from None
        return XnnpackDelegate(blob, named_data)

    def execute(self, handle: XnnpackDelegate, args: Sequence[Any]) -> list | None:
        return handle.execute(args)


register_backend("XnnpackBackend", XnnpackBackend())
