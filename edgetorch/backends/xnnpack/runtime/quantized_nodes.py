"""Planners for XNNPACK nodes on quantized values, which hold integers q standing for (q - zero_point) * scale.

Fully connected and convolution run XNNPACK's integer arithmetic as float32 BLAS on integer-valued float32
arrays (qgemm.py says why that is exact). A static fully connected multiplies the raw int8/uint8 input by
the centred weights, with the bias corrected for the input zero point (bias - zero_point * sum_k w[k, n])
as one more weight row: one sgemm gives XNNPACK's int32 accumulator exactly when every column's L1 bound
allows, else exact K-chunks are summed in float64. A static convolution runs the float planner on centred
integers (|x - zero_point| <= 255) and its bias, its single sgemm exact under the same bound; where the
bound fails, the float32 rounding of a sum above 2**24 (a relative 6e-8) can move the requantized output
only at a rounding tie. XNNPACK's fp32 requantization follows (quantization.py).

Dynamically quantized nodes (float output) multiply the dequantized input by weights that stay integers in
the fast tier (qgemv.py) or are dequantized once at load; the result differs from XNNPACK's only by float32
rounding. A clamp between equal quantization parameters clips the integers; any other node runs its float
planner on dequantized inputs and requantizes its output, which matches XNNPACK's fixed-point kernels
within one step.

Between quantized nodes a per-tensor (or dynamic) quantized value travels as float32 centred integers
q - zero_point (``Env.centred``): its producer stops after rounding and its readers skip the conversion.
int8 arrays are written only for the graph's outputs and for converts (``Graph.needs_int8``).
With the fast tier (qfast.py) a static node's requantization, a static add and a dynamic convert each run
as one compiled pass with the NumPy path's float32 operations in its order: the same bits.
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial
from typing import Any

import numpy as np

from edgetorch.backends.xnnpack import qfast, qgemm, qgemv
from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.runtime.epilogues import clamp_steps, min_max, with_activation
from edgetorch.backends.xnnpack.runtime.memory import Env, Planner, Step
from edgetorch.backends.xnnpack.runtime.planners import FLOAT_PLANNERS
from edgetorch.backends.xnnpack.runtime.quantization import (
    NO_ROWS,
    centred_input,
    dequantize_steps,
    dynamic_convert,
    fused_quantize_out,
    qbounds,
    quantize_steps,
    requantize_steps,
    same_tensor_params,
    unpack_int4,
    weight_scale,
)
from edgetorch.backends.xnnpack.runtime.values import READ_FIELDS, Graph, QParams, Unsupported, qrange, read_ids
from edgetorch.runtime import policy


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
            if g.compiled and n.output_id in g.fc_inputs:
                # The fully connected's input buffer, filled in the same pass, its column of ones too; not pooled.
                deq, _ = env.ones_column(rows, x.size // max(rows, 1))
                env.fc_input[n.output_id] = deq
            q = y if n.output_id in g.needs_int8 else None
            return [dynamic_convert(x, c, q, scale, zp, g.compiled, deq)]
        dest = (env, n.output_id)
        if qin is None:
            return quantize_steps(x, y, qout.scale, qout.zero_point, -math.inf, math.inf, dest)
        f = np.empty(x.shape, np.float32)
        quantize = quantize_steps(f, y, qout.scale, qout.zero_point, -math.inf, math.inf, dest)
        return dequantize_steps(x, f, qin) + quantize

    return plan


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
    centred: list = []  # (weights with the plain bias, splits), made when a schedule first has centred input

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
        return steps + requantize_steps(acc, None, factor, y.reshape(-1, oc), yq, node, g.compiled, (env, n.output_id))

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
    """The weights for the compiled integer GEMV (qgemv.py; the tier must be on), or None for a layout it does
    not take (the node then dequantizes them at load)."""
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
    such call: when the program's weights (its named data) are small (the policy's ``gemv_float_budget``)."""
    return g.named_bytes <= policy.current().gemv_float_budget


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
    first such call in a small model, redone per call in a large one (see the policy's ``gemv_float_budget``), or, for
    4-bit weights on a host with AVX512-VNNI or AVX2, the int8 GEMM of qgemv_vnni.py, as tuning measures. Without the tier
    they are dequantized once, at load, and every call runs sgemm."""
    ic, oc = shape
    integer = _integer_weights(g, n, wq, bias, shape, transposed, four_bit) if g.compiled else None
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
        if integer is not None and integer.uses_gemv(x2.shape[0], f"dynamic fully connected, node {node.debug_handle}"):
            if c is not None and c.flags.c_contiguous:
                return integer.steps(c.reshape(x2.shape), scale, y2, lo, hi)
            xc = np.empty(x2.shape, np.float32)
            return [partial(np.subtract, x2, zp, out=xc)] + integer.steps(xc, scale, y2, lo, hi)

        if integer is not None and integer.uses_vnni(x2.shape[0], f"dynamic fully connected, node {node.debug_handle}"):
            if c is not None and c.flags.c_contiguous:
                return integer.vnni_steps(c.reshape(x2.shape), zp, scale, y2, env.scratch) + clamp
            xc = np.empty(x2.shape, np.float32)
            return [partial(np.subtract, x2, zp, out=xc), *integer.vnni_steps(xc, zp, scale, y2, env.scratch)] + clamp

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
    fused_bias = bias is not None and not dynamic and g.compiled  # added in the compiled requantize
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
        fused = bias if fused_bias else None
        return steps + requantize_steps(acc, fused, factor, y, yq, node, g.compiled, (env, n.output_id))

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
        if fusable and g.compiled:
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
