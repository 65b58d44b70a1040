"""Quantized values in the XNNPACK graph: what the q/dq ops of a quantized Edge graph become.

XNNPACK has no quantize or dequantize node; it types values instead, as
ExecuTorch's XNNPACK lowering does:

* static int8 (PT2E): an op XNNPACK runs on QS8 (``STATIC_QUANTIZED_OPS``) between
  ``dequantize_per_tensor`` inputs and a ``quantize_per_tensor`` output makes that
  q/dq pair implicit: its input and output values are QS8 with the q/dq node's scale
  and zero point, and the dequantize reads the quantize's value. Any other q or dq
  (a delegate input or output, an op with no QS8 kernel such as average pooling) is
  explicit: an ``XNNConvert`` between float32 and QS8. Linear and convolution
  weights are the integers of their ``dequantize_per_channel`` with per-channel
  scales (QC8), or of a constant's ``dequantize_per_tensor`` with one scale (QS8,
  ``get_symmetric_quantization_config(is_per_channel=False)``); their bias becomes
  int32 with scale ``input_scale * weight_scale`` (QC32 per channel, QS32 per tensor).
* dynamic int8 (PT2E ``choose_qparams`` -> ``quantize`` -> ``dequantize``, or
  torchao's per-token affine ops of 8da4w/8da8w) before a linear or convolution:
  one ``XNNConvert`` into a QD8 value whose per-row parameters XNNPACK computes at
  run time; weights QC8, or QB4 (4-bit in groups, two a byte, bfloat16 scales).
* a ReLU or hardtanh right after a linear, convolution or element-wise add/sub/mul
  becomes that node's output clamp, as ExecuTorch fuses them.

Scales are named data under ``scale_`` and their SHA-256, like ExecuTorch's.
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
WEIGHT_QUANTIZE = qd.quantize_per_channel.default  # of float weights, when convert_pt2e(fold_quantize=False)
try:
    import torchao  # noqa: F401  (registers the torchao ops its quantize_ writes into graphs)

    AFFINE_CHOOSE = torch.ops.torchao.choose_qparams_affine.default
    AFFINE_QUANTIZE = torch.ops.torchao.quantize_affine.default
    AFFINE_DEQUANTIZE = torch.ops.torchao.dequantize_affine.default
except (ImportError, AttributeError):  # without torchao no graph holds them: names nothing matches
    AFFINE_CHOOSE = AFFINE_QUANTIZE = AFFINE_DEQUANTIZE = "torchao ops"
INT32_RANGE = (-(2**31), 2**31 - 1)


@dataclass
class QuantSpec:
    """The XNNPACK datatype and quantization parameters of one value."""

    datatype: xs.XNNDatatype
    params: Any


def op_of(node: Any) -> Any:
    return to_aten(node.target) if isinstance(node, Node) and node.op == "call_function" else None


def is_dequantize(node: Any) -> bool:
    return op_of(node) == DEQUANTIZE or is_dynamic_dequantize(node)


def is_activation_dequantize(node: Any) -> bool:
    """A static per-tensor dequantize of a value the graph computes (not of a constant weight)."""
    return op_of(node) == DEQUANTIZE and not is_quantized_weight(node)


def is_dynamic_dequantize(node: Any) -> bool:
    """A dequantize of a dynamically quantized activation (PT2E's per-tensor one, or torchao's per-token)."""
    op = op_of(node)
    return op == DYNAMIC_DEQUANTIZE or (op == AFFINE_DEQUANTIZE and op_of(node.args[0]) == AFFINE_QUANTIZE)


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
        int8_weight = is_quantized_weight(weight) and (weight_kind(weight) or (None, 1))[1] == 0
        if not is_activation_dequantize(x) or not int8_weight or not conv2d:
            return None
    elif not all(is_activation_dequantize(a) for a in node.all_input_nodes):
        return None
    (user,) = node.users
    if op_of(user) in STATIC_QUANTIZED_OPS[op] and len(user.users) == 1:
        (user,) = user.users
    return user if op_of(user) == QUANTIZE else None


def plan_quantization(b: XnnpackGraphBuilder) -> None:
    """Give every quantized Edge value its XNNPACK spec, and alias q/dq nodes to the node writing their value.

    A q/dq pair around a static quantized pattern is implicit: the pattern reads and writes QS8 values. Any
    other q or dq is explicit, a convert node between float and QS8. Fills ``b.qspec`` (node -> QuantSpec of
    its value) and ``b.aliases``.
    """
    implicit = set()
    for node in b.program.graph.nodes:
        q = quantized_output(node)
        if q is not None:
            implicit.update(a for a in node.all_input_nodes if is_activation_dequantize(a))
            implicit.add(q)
            b.qspec[node] = static_spec(q)
    for node in b.program.graph.nodes:
        op = op_of(node)
        if op == QUANTIZE:
            if node in implicit:
                b.alias(node, node.args[0])
            else:
                b.qspec[node] = static_spec(node)
        elif op in (DYNAMIC_QUANTIZE, AFFINE_QUANTIZE):
            dims = 3 if feeds_convolution(node) else 1
            b.qspec[node] = QuantSpec(xs.XNNDatatype.xnn_datatype_qdint8, xs.PerTokenDynamicQuant(dims))
        elif (op == DEQUANTIZE and node in implicit) or is_dynamic_dequantize(node):
            b.alias(node, node.args[0])


def is_quantized_gemm(b: XnnpackGraphBuilder, node: Node) -> bool:
    """Whether a linear/convolution runs on int8 (a static pattern, or a dynamically quantized input)."""
    return node in b.qspec or is_dynamic_dequantize(node.args[0])


# ------------------------------------------------------------------- visitors


@visits(QUANTIZE, DYNAMIC_QUANTIZE, AFFINE_QUANTIZE)
def _quantize(b: XnnpackGraphBuilder, node: Node) -> None:
    """An explicit quantize (an implicit one is an alias of the pattern writing its value): a convert node."""
    x = node.args[0]
    nhwc = b.in_nhwc(x) or (op_of(node) in (DYNAMIC_QUANTIZE, AFFINE_QUANTIZE) and _feeds_convolution(node))
    b.add(xs.XNNConvert(input_id=b.value(x, nhwc), output_id=b.output(node, nhwc), flags=0))


def _feeds_convolution(node: Node) -> bool:
    """Whether a dynamic quantize's value is read (through its dequantize) by a convolution. ExecuTorch then
    converts the float input already channels-last (its transpose comes before the convert): a transpose of
    the per-row quantized value, which XNNPACK's runtime does not carry its row parameters through, is
    never written."""
    x = node.args[0]
    if not (isinstance(x, Node) and isinstance(x.meta.get("val"), torch.Tensor) and x.meta["val"].dim() == 4):
        return False
    return any(op_of(v) == aten.convolution.default for u in node.users for v in (u, *u.users))


@visits(DEQUANTIZE)
def _dequantize(b: XnnpackGraphBuilder, node: Node) -> None:
    """An explicit dequantize (an implicit one is an alias of its quantized value): a convert to float."""
    q = node.args[0]
    nhwc = b.in_nhwc(q) and node not in b.outputs  # a delegate output is converted once in its own layout
    b.add(xs.XNNConvert(input_id=b.value(q, nhwc), output_id=b.output(node, nhwc), flags=0))


@visits(DYNAMIC_DEQUANTIZE, CHOOSE_QPARAMS, WEIGHT_QUANTIZE, WEIGHT_DEQUANTIZE, AFFINE_CHOOSE, AFFINE_DEQUANTIZE)
def _no_node(b: XnnpackGraphBuilder, node: Node) -> None:
    """Nothing to write: a dynamic dequantize is an alias of its QD8 value, choose_qparams is XNNPACK's own
    work at run time, and a weight's quantize and dequantize are constants (folded before any visitor runs)
    that the linear or convolution reading them takes apart."""


# -------------------------------------------------------------------- weights


def is_quantized_weight(node: Any) -> bool:
    """A weight's dequantize: PT2E's per-channel one, its per-tensor one of a tensor the graph does not compute
    (a placeholder; the partitioner also requires it constant), or torchao's affine one of constant integers."""
    op = op_of(node)
    if op == DEQUANTIZE:
        return isinstance(node.args[0], Node) and node.args[0].op != "call_function"
    return op == WEIGHT_DEQUANTIZE or (op == AFFINE_DEQUANTIZE and op_of(node.args[0]) != AFFINE_QUANTIZE)


INT8_WEIGHT_RANGES = ((-127, 127, torch.int8), (-128, 127, torch.int8))


def weight_kind(node: Node) -> tuple[xs.XNNDatatype, int] | None:
    """(XNNPACK datatype, group size) of a 2-d+ weight's dequantize XNNPACK takes, or None: int8 per output
    channel (QC8, group 0), int8 per tensor with zero point 0 (QS8, group 0), or 4-bit in groups of a
    multiple of 32 along the input channels (QB4)."""
    if op_of(node) == WEIGHT_DEQUANTIZE:
        per_channel = node.args[3] == 0 and tuple(node.args[4:7]) in INT8_WEIGHT_RANGES
        return (xs.XNNDatatype.xnn_datatype_qcint8, 0) if per_channel else None
    if op_of(node) == DEQUANTIZE:
        symmetric = node.args[2] == 0 and tuple(node.args[3:6]) in INT8_WEIGHT_RANGES
        return (xs.XNNDatatype.xnn_datatype_qint8, 0) if symmetric else None
    dims = list(node.meta["val"].shape)
    block, qmin, qmax = list(node.args[1]), node.args[5], node.args[6]
    if len(dims) != 2 or len(block) != 2 or block[0] != 1 or node.args[4] != torch.int8:
        return None
    if block[1] == dims[1] and (qmin, qmax) in ((-127, 127), (-128, 127)):
        return xs.XNNDatatype.xnn_datatype_qcint8, 0
    if (qmin, qmax) == (-8, 7) and block[1] % 32 == 0 and dims[1] % block[1] == 0:
        return xs.XNNDatatype.xnn_datatype_qbint4, block[1]
    return None


def weight_parts(b: XnnpackGraphBuilder, node: Node) -> tuple[torch.Tensor, torch.Tensor | float, int]:
    """The integer weight, its scales (float32; per channel, or [channels, groups]; one float per tensor) and
    the channel axis of a weight's dequantize."""
    if op_of(node) == DEQUANTIZE:
        return b.tensor(node.args[0]).to(torch.int8), float(node.args[1]), 0
    if op_of(node) == WEIGHT_DEQUANTIZE:
        data, scale, zero_point = (b.tensor(a) for a in node.args[:3])
        axis = int(node.args[3])
    else:
        data, scale, zero_point = (b.tensor(a) for a in (node.args[0], node.args[2], node.args[3]))
        axis = 0
        if weight_kind(node)[1] == 0:
            scale = scale.reshape(-1)
    if bool((zero_point != 0).any()):
        raise XnnpackLoweringError(f"{node.name}: XNNPACK's quantized weights are symmetric (zero point 0)")
    return data.to(torch.int8), scale.to(torch.float32), axis


def quantized_weight(b: XnnpackGraphBuilder, node: Node) -> tuple[int, torch.Tensor | float]:
    """The static value of a linear's quantized weight [out, in], and its scales (float32, or one float)."""
    kind = weight_kind(node)
    if kind is None:
        raise XnnpackLoweringError(f"{node.name}: XNNPACK takes int8 per-channel or 4-bit grouped weights")
    datatype, group_size = kind
    data, scale, axis = weight_parts(b, node)
    tag = b.external_tag(node)
    if datatype != xs.XNNDatatype.xnn_datatype_qbint4:
        return b.quantized_constant(data, datatype, scale, axis, tag), scale
    # Two 4-bit weights a byte along the input channels, offset by 8: the even one in the low nibble.
    nibbles = (data.to(torch.int16) + 8).to(torch.uint8)
    packed = nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)
    vid = b.quantized_constant(packed, datatype, scale, 0, tag, group_size=group_size, dims=list(data.shape))
    return vid, scale


def weight_datatype(node: Node) -> xs.XNNDatatype:
    kind = weight_kind(node)
    if kind is None or kind[1]:
        raise XnnpackLoweringError(f"{node.name}: a convolution's weights must be int8 per output channel")
    return kind[0]


def quantized_bias(b: XnnpackGraphBuilder, bias: Node | None, x: Node, w_scale: torch.Tensor | float) -> int:
    """The bias of a quantized linear/convolution: int32 with scale input_scale * weight_scale[c] (QC32), or
    input_scale * weight_scale for per-tensor weights (QS32), for a static input; float32 for a dynamic one."""
    if bias is None:
        return xs.INVALID_VALUE_ID
    if is_dynamic_dequantize(x):
        return b.value(bias)
    values = b.tensor(bias).to(torch.float32)
    tag = b.external_tag(bias)
    if isinstance(w_scale, float):
        product = w_scale * float(x.args[1])
        data = qd.quantize_per_tensor.default(values, product, 0, *INT32_RANGE, torch.int32)
        return b.quantized_constant(data, xs.XNNDatatype.xnn_datatype_qint32, product, 0, tag)
    scale = w_scale * float(x.args[1])
    data = qd.quantize_per_channel.default(
        values, scale, torch.zeros_like(scale).to(torch.int32), 0, *INT32_RANGE, torch.int32
    )
    return b.quantized_constant(data, xs.XNNDatatype.xnn_datatype_qcint32, scale, channel_dim=0, external_tag=tag)
