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


def plan_quantization(b: XnnpackGraphBuilder) -> None:
    """Give every quantized Edge value its XNNPACK spec, and alias q/dq nodes to the node writing their value.

    Fills ``b.qspec`` (node -> QuantSpec of its value), ``b.aliases`` and ``b.fused`` (producer -> clamp of the
    activation folded into it).
    """
    for node in b.program.graph.nodes:
        op = op_of(node)
        if op in ACTIVATIONS and _fusable(node) and node not in b.outputs:
            b.fused[node.args[0]] = clamp_of(node)
            b.alias(node, node.args[0])
        elif op == QUANTIZE:
            spec = static_spec(node)
            producer = b.aliases.get(node.args[0], node.args[0])
            if _writes_quantized(b, producer, node):
                b.qspec[producer] = spec
                b.alias(node, producer)
            else:
                b.qspec[node] = spec
        elif op == DYNAMIC_QUANTIZE:
            dims = 3 if feeds_convolution(node) else 1
            b.qspec[node] = QuantSpec(xs.XNNDatatype.xnn_datatype_qdint8, xs.PerTokenDynamicQuant(dims))
        elif op in (DEQUANTIZE, DYNAMIC_DEQUANTIZE):
            b.alias(node, node.args[0])


def _fusable(act: Node) -> bool:
    producer = act.args[0]
    if op_of(producer) == aten.convolution.default and producer.args[1].meta["val"].dim() != 4:
        return False  # a 1-d convolution's last node is the reshape back to 3-d
    return op_of(producer) in FUSES_ACTIVATION and len(producer.users) == 1


def _writes_quantized(b: XnnpackGraphBuilder, producer: Any, q: Node) -> bool:
    """Whether ``producer`` (a static quantized op whose only consumer is ``q``) writes ``q``'s value itself."""
    if not isinstance(producer, Node) or producer.op != "call_function" or producer in b.inputs:
        return False
    if not any(op_of(a) == DEQUANTIZE for a in producer.all_input_nodes):
        return False
    users = [v for u in producer.users for v in (u.users if b.aliases.get(u) is producer else [u])]
    if users != [q]:
        raise XnnpackLoweringError(
            f"{producer.name} reads int8 values, so XNNPACK must write its result as int8: expected it to be "
            f"quantized by one quantize_per_tensor, found users {[u.name for u in users]}; partition with "
            "XnnpackPartitioner, which keeps such nodes out"
        )
    return True


def clamp_of(node: Node) -> tuple[float, float]:
    from edgetorch.backends.xnnpack.operators.elementwise import clamp_bounds

    return clamp_bounds(node)


# ------------------------------------------------------------------- visitors


@visits(QUANTIZE, DYNAMIC_QUANTIZE)
def _quantize(b: XnnpackGraphBuilder, node: Node) -> None:
    """A float value entering a quantized region: a convert node (a static q whose producer writes int8
    directly never gets here: it is an alias of that producer)."""
    x = node.args[0]
    nhwc = b.in_nhwc(x)
    b.add(xs.XNNConvert(input_id=b.value(x, nhwc), output_id=b.output(node, nhwc), flags=0))


@visits(DEQUANTIZE, DYNAMIC_DEQUANTIZE, CHOOSE_QPARAMS, WEIGHT_DEQUANTIZE)
def _no_node(b: XnnpackGraphBuilder, node: Node) -> None:
    """Nothing to write: a dequantize is an alias of its quantized value, choose_qparams is XNNPACK's own work
    at run time, and a weight's dequantize is read by the linear or convolution that uses it."""


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
