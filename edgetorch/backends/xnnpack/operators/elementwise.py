"""Visitors of element-wise Edge ops: unary, clamp, binary (with broadcasting), softmax, PReLU, copies. May import torch."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.operators.node_visitor import (
    Node,
    aten,
    dims_of,
    visits,
)
from edgetorch.exir.dialects import to_aten

if TYPE_CHECKING:
    from edgetorch.backends.xnnpack.serialize import XnnpackGraphBuilder


_UNARY = {
    aten.sigmoid.default: xs.XNNSigmoid,
    aten.tanh.default: xs.XNNTanh,
    aten.exp.default: xs.XNNExp,
    aten.log.default: xs.XNNLog,
    aten.sqrt.default: xs.XNNSquareRoot,
    aten.rsqrt.default: xs.XNNReciprocalSquareRoot,
    aten.abs.default: xs.XNNAbs,
    aten.neg.default: xs.XNNNegate,
    aten.floor.default: xs.XNNFloor,
    aten.ceil.default: xs.XNNCeiling,
    aten.hardswish.default: xs.XNNHardswish,
    aten.gelu.default: xs.XNNGelu,
    aten.sin.default: xs.XNNSin,
    aten.cos.default: xs.XNNCos,
    aten.pow.Tensor_Scalar: xs.XNNSquare,
}


@visits(*_UNARY)
def _unary(b: XnnpackGraphBuilder, node: Node) -> None:
    kind = _UNARY[to_aten(node.target)]
    elementwise(b, node, lambda x, y: kind(input_id=x, output_id=y, flags=0))


def elementwise(b: XnnpackGraphBuilder, node: Node, make: Callable[[int, int], Any], clamp: Any = None) -> None:
    """A one-input element-wise node (built by ``make(input_id, output_id)``) in its input's layout."""
    nhwc = b.in_nhwc(node.args[0])
    x = b.value(node.args[0], nhwc)
    b.add(make(x, b.output(node, nhwc)), clamp=clamp)


def clamp_bounds(node: Node) -> tuple[float, float]:
    """The (min, max) a clamp-like node limits its output to."""
    op = to_aten(node.target)
    if op == aten.relu.default:
        return 0.0, math.inf
    if op == aten.hardtanh.default:
        lo = node.args[1] if len(node.args) > 1 else -1.0
        hi = node.args[2] if len(node.args) > 2 else 1.0
        return float(lo), float(hi)
    lo = node.args[1] if len(node.args) > 1 else node.kwargs.get("min")
    hi = node.args[2] if len(node.args) > 2 else node.kwargs.get("max")
    return (-math.inf if lo is None else float(lo)), (math.inf if hi is None else float(hi))


@visits(aten.relu.default, aten.clamp.default, aten.hardtanh.default)
def _clamp(b: XnnpackGraphBuilder, node: Node) -> None:
    elementwise(b, node, lambda x, y: xs.XNNClamp(input_id=x, output_id=y, flags=0), clamp=clamp_bounds(node))


@visits(aten.leaky_relu.default)
def _leaky_relu(b: XnnpackGraphBuilder, node: Node) -> None:
    slope = float(node.args[1]) if len(node.args) > 1 else 0.01
    elementwise(b, node, lambda x, y: xs.XNNLeakyReLU(negative_slope=slope, input_id=x, output_id=y, flags=0))


@visits(aten.elu.default)
def _elu(b: XnnpackGraphBuilder, node: Node) -> None:
    alpha = float(node.args[1]) if len(node.args) > 1 else 1.0
    elementwise(b, node, lambda x, y: xs.XNNELU(alpha=alpha, input_id=x, output_id=y, flags=0))


_BINARY = {
    aten.add.Tensor: xs.XNNAdd,
    aten.add.Scalar: xs.XNNAdd,
    aten.sub.Tensor: xs.XNNSubtract,
    aten.sub.Scalar: xs.XNNSubtract,
    aten.mul.Tensor: xs.XNNMultiply,
    aten.mul.Scalar: xs.XNNMultiply,
    aten.div.Tensor: xs.XNNDiv,
    aten.div.Scalar: xs.XNNDiv,
    aten.minimum.default: xs.XNNMinimum,
    aten.maximum.default: xs.XNNMaximum,
}


def binary_in_nhwc(b: XnnpackGraphBuilder, node: Node, operands: Sequence[Any]) -> bool:
    """Run a broadcasting op channels-last when an input already is and every operand is 4-d or one element."""
    if len(node.meta["val"].shape) != 4 or not any(b.in_nhwc(a) for a in operands):
        return False
    return all(not isinstance(a, Node) or a.meta["val"].dim() == 4 or a.meta["val"].numel() == 1 for a in operands)


@visits(*_BINARY)
def _binary(b: XnnpackGraphBuilder, node: Node) -> None:
    lhs, rhs = node.args[:2]
    alpha = node.kwargs.get("alpha", 1)
    nhwc = binary_in_nhwc(b, node, (lhs, rhs))
    x = b.value(lhs, nhwc)
    if alpha != 1:
        y = b.internal(dims_of(rhs) if isinstance(rhs, Node) else [1])
        b.add(xs.XNNMultiply(input1_id=b.value(rhs, nhwc), input2_id=b.scalar(alpha), output_id=y, flags=0))
    else:
        y = b.value(rhs, nhwc)
    kind = _BINARY[to_aten(node.target)]
    b.add(kind(input1_id=x, input2_id=y, output_id=b.output(node, nhwc), flags=0))


@visits(aten._softmax.default, aten._log_softmax.default)
def _softmax(b: XnnpackGraphBuilder, node: Node) -> None:
    x = b.value(node.args[0])
    out = b.output(node)
    if to_aten(node.target) == aten._softmax.default:
        b.add(xs.XNNSoftmax(input_id=x, output_id=out, flags=0))
        return
    probabilities = b.internal(dims_of(node))
    b.add(xs.XNNSoftmax(input_id=x, output_id=probabilities, flags=0))
    b.add(xs.XNNLog(input_id=probabilities, output_id=out, flags=0))


@visits(aten.prelu.default)
def _prelu(b: XnnpackGraphBuilder, node: Node) -> None:
    x, weight = node.args
    rank = x.meta["val"].dim()
    channels = dims_of(x)[1] if rank > 1 else 1
    slope = b.constant(b.tensor(weight).reshape(-1).expand(channels), b.external_tag(weight))
    out = b.output(node, nhwc=rank == 4)
    if rank == 4:
        b.add(xs.XNNPReLU(input1_id=b.value(x, True), input2_id=slope, output_id=out, flags=0))
        return
    # PReLU's slope runs along XNNPACK's last dimension, which is channels only for 2-d inputs.
    b.add(xs.XNNPReLU(input1_id=b.value(x), input2_id=slope, output_id=out, flags=0))


# ------------------------------------------------------------- copies, shapes


@visits(
    aten.clone.default,
    aten.alias_copy.default,
    aten.expand_copy.default,
    aten._to_copy.default,
    torch.ops.dim_order_ops._clone_dim_order.default,
    torch.ops.dim_order_ops._to_dim_order_copy.default,
)
def _copy(b: XnnpackGraphBuilder, node: Node) -> None:
    source = node.args[0]
    if node in b.outputs:
        nhwc = b.in_nhwc(source)
        b.add(xs.XNNCopy(input_id=b.value(source, nhwc), output_id=b.output(node, nhwc), flags=0))
    else:
        b.alias(node, source)
