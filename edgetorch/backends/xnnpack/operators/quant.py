"""Quantized values in the XNNPACK graph: what the q/dq ops of a PT2E-quantized Edge graph become.

XNNPACK has no quantize or dequantize node; it types values instead. A static
``quantize_per_tensor`` gives its value a QS8 datatype with the q node's scale and
zero point, and the node computing the quantized tensor (a linear, a convolution,
an add, a pooling, ...) writes that QS8 value directly; its ``dequantize`` users
read the same value. Where a float tensor enters a quantized region (a delegate
input), or a quantized one leaves it (a delegate output), an ``XNNConvert`` node
changes the datatype. Dynamic quantization (``choose_qparams`` -> ``quantize`` ->
``dequantize`` before a linear or convolution) becomes one ``XNNConvert`` into a
QD8 value whose per-row parameters XNNPACK computes at run time. A ReLU or
hardtanh right after a linear, convolution or element-wise add/sub/mul becomes
that node's output clamp, as ExecuTorch fuses them (for a quantized node, the
activation of its integer kernel). Weights stay as the
quantized integers of their ``dequantize_per_channel`` with per-channel scales
(QC8), biases of static ops become int32 with scale ``input_scale * weight_scale``.

May import torch and edgetorch.exir.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.operators.node_visitor import Node, XnnpackLoweringError, aten, visits
from edgetorch.exir.dialects import to_aten

if TYPE_CHECKING:
    from edgetorch.backends.xnnpack.serialize import XnnpackGraphBuilder

qd = torch.ops.quantized_decomposed
QUANTIZE = qd.quantize_per_tensor.default
DEQUANTIZE = qd.dequantize_per_tensor.default
DYNAMIC_QUANTIZE = qd.quantize_per_tensor.tensor
DYNAMIC_DEQUANTIZE = qd.dequantize_per_tensor.tensor
CHOOSE_QPARAMS = qd.choose_qparams.tensor
WEIGHT_DEQUANTIZE = qd.dequantize_per_channel.default
ACTIVATIONS = (aten.relu.default, aten.hardtanh.default)
FUSES_ACTIVATION = (aten.linear.default, aten.convolution.default, aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor)
INT32_RANGE = (-(2**31), 2**31 - 1)


@dataclass
class QuantSpec:
    """The XNNPACK datatype and quantization parameters of one value."""

    datatype: xs.XNNDatatype
    params: Any


def op_of(node: Any) -> Any:
    return to_aten(node.target) if isinstance(node, Node) and node.op == "call_function" else None


def is_dequantize(node: Any) -> bool:
    return op_of(node) in (DEQUANTIZE, DYNAMIC_DEQUANTIZE)


def quantized_inputs(node: Node) -> list[Node]:
    """The (static or dynamic) dequantize nodes among ``node``'s inputs."""
    return [a for a in node.all_input_nodes if is_dequantize(a)]


def static_spec(node: Node) -> QuantSpec:
    """QS8 with the scale and zero point of a ``quantize_per_tensor`` / ``dequantize_per_tensor`` node."""
    scale, zero_point = node.args[1], node.args[2]
    return QuantSpec(
        xs.XNNDatatype.xnn_datatype_qint8, xs.PerTensorQuant(scale=float(scale), zero_point=int(zero_point))
    )


def feeds_convolution(node: Node) -> bool:
    """Whether a dynamically quantized value is read by a convolution (XNNPACK then quantizes per batch entry)."""
    return any(op_of(u) == aten.convolution.default for d in node.users for u in d.users)


STATIC_QUANTIZED_OPS = {
    aten.linear.default: (aten.relu.default, aten.hardtanh.default),
    aten.convolution.default: (aten.relu.default, aten.hardtanh.default),
    aten.add.Tensor: (aten.relu.default,),
    aten.sub.Tensor: (),
    aten.mul.Tensor: (),
    aten.max_pool2d.default: (),
    aten.mean.dim: (),
    aten.relu.default: (),
    aten.hardtanh.default: (),
    aten.cat.default: (),
    aten.view_copy.default: (),
    aten.permute_copy.default: (),
    aten.slice_copy.Tensor: (),
}
"""ATen ops XNNPACK runs on QS8 values (as ExecuTorch's partitioner takes them), with the activations their
integer kernel can apply. Others (average pooling, ...) run in float between convert nodes."""


def quantized_output(node: Node) -> Node | None:
    """The ``quantize_per_tensor`` that makes ``node`` a static quantized pattern, or None.

    The pattern is: every input a ``dequantize_per_tensor`` (a linear's or convolution's weight a per-channel
    one, its bias float), one user, which is the quantize, or an activation the op fuses whose one user is.
    """
    op = op_of(node)
    if op not in STATIC_QUANTIZED_OPS or len(node.users) != 1:
        return None
    if op in (aten.linear.default, aten.convolution.default):
        x, weight = node.args[:2]
        conv2d = op == aten.linear.default or (weight.meta["val"].dim() == 4 and not node.args[6])
        if op_of(x) != DEQUANTIZE or not is_quantized_weight(weight) or not conv2d:
            return None
    elif not all(op_of(a) == DEQUANTIZE for a in node.all_input_nodes):
        return None
    (user,) = node.users
    if op_of(user) in STATIC_QUANTIZED_OPS[op] and len(user.users) == 1:
        (user,) = user.users
    return user if op_of(user) == QUANTIZE else None


def plan_quantization(b: XnnpackGraphBuilder) -> None:
    """Give every quantized Edge value its XNNPACK spec, and alias q/dq nodes to the node writing their value.

    A q/dq pair around a static quantized pattern is implicit: the pattern reads and writes QS8 values. Any
    other q or dq is explicit, a convert node between float and QS8. Fills ``b.qspec`` (node -> QuantSpec of
    its value), ``b.aliases`` and ``b.fused`` (producer -> clamp of the activation folded into it).
    """
    implicit = set()
    for node in b.program.graph.nodes:
        q = quantized_output(node)
        if q is not None:
            implicit.update(a for a in node.all_input_nodes if op_of(a) == DEQUANTIZE)
            implicit.add(q)
            b.qspec[node] = static_spec(q)
    for node in b.program.graph.nodes:
        op = op_of(node)
        if op in ACTIVATIONS and _fusable(node) and node not in b.outputs:
            b.fused[node.args[0]] = clamp_of(node)
            b.alias(node, node.args[0])
        elif op == QUANTIZE:
            if node in implicit:
                b.alias(node, node.args[0])
            else:
                b.qspec[node] = static_spec(node)
        elif op == DYNAMIC_QUANTIZE:
            dims = 3 if feeds_convolution(node) else 1
            b.qspec[node] = QuantSpec(xs.XNNDatatype.xnn_datatype_qdint8, xs.PerTokenDynamicQuant(dims))
        elif (op == DEQUANTIZE and node in implicit) or op == DYNAMIC_DEQUANTIZE:
            b.alias(node, node.args[0])


def _fusable(act: Node) -> bool:
    """ExecuTorch's activation fusion: a ReLU or hardtanh whose input is only read by it, from a linear, a 2-d
    convolution or an element-wise add/sub/mul, becomes that node's output clamp."""
    producer = act.args[0]
    if op_of(producer) == aten.convolution.default and producer.args[1].meta["val"].dim() != 4:
        return False  # a 1-d convolution's last node is the reshape back to 3-d
    return op_of(producer) in FUSES_ACTIVATION and len(producer.users) == 1


def is_quantized_gemm(b: XnnpackGraphBuilder, node: Node) -> bool:
    """Whether a linear/convolution runs on int8 (a static pattern, or a dynamically quantized input)."""
    return node in b.qspec or op_of(node.args[0]) == DYNAMIC_DEQUANTIZE


def clamp_of(node: Node) -> tuple[float, float]:
    from edgetorch.backends.xnnpack.operators.elementwise import clamp_bounds

    return clamp_bounds(node)


# ------------------------------------------------------------------- visitors


@visits(QUANTIZE, DYNAMIC_QUANTIZE)
def _quantize(b: XnnpackGraphBuilder, node: Node) -> None:
    """An explicit quantize (an implicit one is an alias of the pattern writing its value): a convert node."""
    x = node.args[0]
    nhwc = b.in_nhwc(x)
    b.add(xs.XNNConvert(input_id=b.value(x, nhwc), output_id=b.output(node, nhwc), flags=0))


@visits(DEQUANTIZE)
def _dequantize(b: XnnpackGraphBuilder, node: Node) -> None:
    """An explicit dequantize (an implicit one is an alias of its quantized value): a convert to float."""
    q = node.args[0]
    nhwc = b.in_nhwc(q) and node not in b.outputs  # a delegate output is converted once in its own layout
    b.add(xs.XNNConvert(input_id=b.value(q, nhwc), output_id=b.output(node, nhwc), flags=0))


@visits(DYNAMIC_DEQUANTIZE, CHOOSE_QPARAMS, WEIGHT_DEQUANTIZE)
def _no_node(b: XnnpackGraphBuilder, node: Node) -> None:
    """Nothing to write: a dynamic dequantize is an alias of its QD8 value, choose_qparams is XNNPACK's own
    work at run time, and a weight's dequantize is read by the linear or convolution that uses it (or folded
    into a float weight when that one runs in float)."""


# -------------------------------------------------------------------- weights


def is_quantized_weight(node: Any) -> bool:
    return op_of(node) == WEIGHT_DEQUANTIZE


def weight_parts(b: XnnpackGraphBuilder, node: Node) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The integer weight, its per-channel scales (float32) and the channel axis of a weight's dequantize."""
    data, scale, zero_point = (b.tensor(a) for a in node.args[:3])
    if bool((zero_point != 0).any()):
        raise XnnpackLoweringError(f"{node.name}: XNNPACK's per-channel int8 weights are symmetric (zero point 0)")
    return data.to(torch.int8), scale.to(torch.float32), int(node.args[3])


def weight_datatype(node: Node) -> xs.XNNDatatype:
    qmin, qmax = node.args[4], node.args[5]
    if (qmin, qmax) == (-8, 7):
        raise XnnpackLoweringError(f"{node.name}: 4-bit per-channel weights are not lowered yet")
    return xs.XNNDatatype.xnn_datatype_qcint8


def quantized_bias(b: XnnpackGraphBuilder, bias: Node | None, x: Node, w_scale: torch.Tensor) -> int:
    """The bias of a quantized linear/convolution: int32 with scale input_scale * weight_scale[c] for a static
    input, float32 for a dynamic one."""
    if bias is None:
        return xs.INVALID_VALUE_ID
    if op_of(x) == DYNAMIC_DEQUANTIZE:
        return b.value(bias)
    scale = w_scale * float(x.args[1])
    values = b.tensor(bias).to(torch.float32)
    data = qd.quantize_per_channel.default(
        values, scale, torch.zeros_like(scale).to(torch.int32), 0, *INT32_RANGE, torch.int32
    )
    return b.quantized_constant(
        data, xs.XNNDatatype.xnn_datatype_qcint32, scale, channel_dim=0, external_tag=b.external_tag(bias)
    )
