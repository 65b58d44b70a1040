"""``XnnpackPartitioner``: which Edge nodes the XNNPACK delegate takes, op by op, with each op's constraints.

A node is delegated when its operator has a visitor in ``serialize.VISITORS``,
its tensors are float32 (constants may be any dtype: they are folded to float32
at lowering), and the operator's constraint below accepts its arguments.
Quantize/dequantize ops join as the value types they become in the blob
(``operators/quant.py``): static per-tensor int8 q/dq pairs, per-channel and
4-bit grouped weights of linears and convolutions that run on integers, and
dynamic (per-token) quantization chains whose only readers are such linears and
convolutions (``QUANT_CONSTRAINTS``). Connected runs of such nodes become one
delegate each; everything else stays with the portable runtime. May import torch.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from torch.export import ExportedProgram

from edgetorch.backends.xnnpack.operators import VISITORS, result_node
from edgetorch.backends.xnnpack.operators import quant as q
from edgetorch.backends.xnnpack.preprocess import XnnpackBackend
from edgetorch.backends.xnnpack.serialize import constant_placeholders
from edgetorch.exir.backend.partition_utils import group_supported_nodes, tag_constant_data, tag_partitions
from edgetorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from edgetorch.exir.dialects import to_aten
from edgetorch.exir.program import EdgeCompileConfig

__all__ = ["KEPT_WHOLE", "XnnpackPartitioner", "get_xnnpack_edge_compile_config"]

aten = torch.ops.aten
Node = torch.fx.Node

KEPT_WHOLE = [
    aten.linear.default,
    aten.hardswish.default,
    aten.prelu.default,
    aten.max_pool2d.default,
    aten.upsample_bilinear2d.vec,
    aten.scaled_dot_product_attention.default,
]
"""ATen ops kept out of decomposition when the XNNPACK delegate can take the node whole."""


def get_xnnpack_edge_compile_config(skip_dim_order: bool = False) -> EdgeCompileConfig:
    """The Edge compile config ExecuTorch recommends for XNNPACK lowering (no IR validity check)."""
    return EdgeCompileConfig(_check_ir_validity=False, _skip_dim_order=skip_dim_order)


class XnnpackPartitioner(Partitioner):
    """Delegates every connected run of float32 operators XNNPACK supports to ``XnnpackBackend``."""

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        support = Support(exported_program)
        groups = group_supported_nodes(exported_program.graph_module, support.supported)
        groups = [g for g in groups if not all(support.is_constant(n) for n in g)]
        tags = tag_partitions(groups, prefix="xnnpack_")
        # A weight shared with the program (a tied token table) becomes the delegate's own constant: as an input
        # it would be copied into the delegate at every call (113 MB a token for SmolLM2's output projection).
        tag_constant_data(exported_program, copy_shared=True)
        return PartitionResult(exported_program, dict.fromkeys(tags, DelegationSpec(XnnpackBackend.__name__, [])))

    def ops_to_not_decompose(
        self, ep: ExportedProgram
    ) -> tuple[list[torch._ops.OpOverload], Callable[[torch.fx.Node], bool] | None]:
        support = Support(ep)
        affine = [op for op in (q.AFFINE_CHOOSE, q.AFFINE_QUANTIZE, q.AFFINE_DEQUANTIZE) if not isinstance(op, str)]
        return [*KEPT_WHOLE, *affine], support.supported


class Support:
    """Answers "can XNNPACK run this node?" for the nodes of one program (ATen or Edge dialect)."""

    def __init__(self, program: ExportedProgram) -> None:
        self.constants = constant_placeholders(program)
        self._constant: dict[Node, bool] = {}

    def is_constant(self, arg: Any) -> bool:
        """Whether ``arg`` is a constant tensor, or a node computed from constants only (folded at lowering)."""
        if not isinstance(arg, Node):
            return False
        if arg in self.constants:
            return True
        if arg.op != "call_function" or not arg.all_input_nodes:
            return False
        if arg not in self._constant:
            self._constant[arg] = all(self.is_constant(a) for a in arg.all_input_nodes)
        return self._constant[arg]

    def supported(self, node: Node) -> bool:
        if node.op != "call_function":
            return False
        op = to_aten(node.target)
        if op in QUANT_CONSTRAINTS or (op is operator.getitem and q.op_of(node.args[0]) in CHOOSERS):
            return QUANT_CONSTRAINTS.get(op, _choose_qparams_item)(self, node)
        if op not in VISITORS or not self._float32(node):
            return False
        if any(q.is_quantized_weight(a) and not _private_weight(self, a) for a in node.all_input_nodes):
            return False
        check = CONSTRAINTS.get(op)
        if check is not None and not check(self, node):
            return False
        return not q.quantized_inputs(node) or _quantized_op(self, node, op)

    def _float32(self, node: Node) -> bool:
        # A constant placeholder may be any dtype (the lowering converts it); a value computed from constants
        # outside this node is an input of the delegate like any other, so it must be float32 too (torchao's
        # weight-only int8 dequantizes with a view of the int8 weight, then a copy to float32, sub and mul).
        inputs = [a for a in node.all_input_nodes if a not in self.constants]
        return all(first_tensor_dtype(n) == torch.float32 for n in [node, *inputs])


def first_tensor_dtype(node: Node) -> torch.dtype | None:
    """The dtype of ``node``'s tensor (of its first output, for a multi-output op), or None."""
    val = node.meta.get("val")
    if isinstance(val, list | tuple):
        val = val[0] if val else None
    return val.dtype if isinstance(val, torch.Tensor) else None


# ---------------------------------------------------------------- constraints


def arg(node: Node, index: int, name: str, default: Any = None) -> Any:
    """Argument ``index`` (positional) or ``name`` (keyword) of ``node``."""
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def rank(value: Any) -> int:
    return value.meta["val"].dim() if isinstance(value, Node) else 0


def static(node: Node, dims: slice = slice(None)) -> bool:
    return all(isinstance(d, int) for d in list(node.meta["val"].shape)[dims])


def pair(value: Any) -> list[int]:
    values = list(value) if isinstance(value, list | tuple) else [value]
    return values * 2 if len(values) == 1 else values


def _linear(s: Support, node: Node) -> bool:
    bias = arg(node, 2, "bias")
    return s.is_constant(node.args[1]) and rank(node.args[1]) == 2 and (bias is None or s.is_constant(bias))


def _addmm(s: Support, node: Node) -> bool:
    ones = arg(node, 3, "beta", 1) == 1 and arg(node, 4, "alpha", 1) == 1
    return ones and s.is_constant(node.args[0]) and s.is_constant(node.args[2])


def _mm(s: Support, node: Node) -> bool:
    return s.is_constant(node.args[1])


def _convolution(s: Support, node: Node) -> bool:
    weight, bias = node.args[1], node.args[2]
    constant = s.is_constant(weight) and (bias is None or s.is_constant(bias))
    return constant and rank(weight) in (3, 4) and rank(node.args[0]) == rank(weight)


def _max_pool(s: Support, node: Node) -> bool:
    kernel = pair(node.args[1])
    stride = pair(arg(node, 2, "stride") or kernel)
    ceil = bool(arg(node, 5, "ceil_mode", False))
    ok = rank(node.args[0]) == 4 and all(st <= k for st, k in zip(stride, kernel))
    if to_aten(node.target) == aten.max_pool2d_with_indices.default:
        ok = ok and all(u.target is operator.getitem and u.args[1] == 0 for u in node.users)
    return ok and (not ceil or static(node.args[0], slice(2, None)))


def _avg_pool(s: Support, node: Node) -> bool:
    padding = pair(arg(node, 3, "padding", 0))
    ceil = bool(arg(node, 4, "ceil_mode", False))
    include_pad = bool(arg(node, 5, "count_include_pad", True))
    override = arg(node, 6, "divisor_override")
    zero_pad = all(p == 0 for p in padding)
    return rank(node.args[0]) == 4 and not ceil and override is None and (zero_pad or not include_pad)


def _adaptive_avg_pool(s: Support, node: Node) -> bool:
    x = node.args[0]
    if rank(x) != 4 or not static(x, slice(2, None)):
        return False
    h, w = x.meta["val"].shape[2:]
    oh, ow = pair(node.args[1])
    return (oh, ow) == (1, 1) or (h % oh == 0 and w % ow == 0)


def _mean(s: Support, node: Node) -> bool:
    x = node.args[0]
    dims = arg(node, 1, "dim")
    if rank(x) != 4 or dims is None or node.kwargs.get("dtype") is not None:
        return False
    return sorted(d % 4 for d in dims) == [2, 3]


def _upsample(s: Support, node: Node) -> bool:
    return rank(node.args[0]) == 4 and static(node, slice(2, None))


def _softmax(s: Support, node: Node) -> bool:
    return node.args[1] % rank(node.args[0]) == rank(node.args[0]) - 1 and not node.args[2]


def _pow(s: Support, node: Node) -> bool:
    return node.args[1] == 2


def _gelu(s: Support, node: Node) -> bool:
    return node.kwargs.get("approximate", "none") == "none"


def _elu(s: Support, node: Node) -> bool:
    return arg(node, 2, "scale", 1) == 1 and arg(node, 3, "input_scale", 1) == 1


def _prelu(s: Support, node: Node) -> bool:
    x, weight = node.args
    channels = x.meta["val"].shape[1] if rank(x) > 1 else 1
    return s.is_constant(weight) and rank(x) in (2, 4) and weight.meta["val"].numel() in (1, channels)


def _reshape(s: Support, node: Node) -> bool:
    return sum(isinstance(d, torch.SymInt) for d in node.meta["val"].shape) <= 1


def _slice(s: Support, node: Node) -> bool:
    return arg(node, 4, "step", 1) == 1 and static(node.args[0]) and static(node) and node.meta["val"].numel() > 0


def _constant_pad(s: Support, node: Node) -> bool:
    return all(p >= 0 for p in node.args[1])


def _cat(s: Support, node: Node) -> bool:
    return len(node.args[0]) >= 1 and node.meta["val"].numel() > 0


def _copy(s: Support, node: Node) -> bool:
    """Copies XNNPACK can skip: same dtype, contiguous (default dim order), no broadcasting."""
    source = node.args[0]
    if not isinstance(source, Node) or node.meta["val"].shape != source.meta["val"].shape:
        return False
    if not s.is_constant(source) and source.meta["val"].dtype != torch.float32:
        return False
    dim_order = node.kwargs.get("dim_order")
    memory_format = node.kwargs.get("memory_format")
    contiguous = dim_order is None or list(dim_order) in ([], list(range(rank(node))))
    return contiguous and memory_format in (None, torch.contiguous_format, torch.preserve_format)


def _getitem(s: Support, node: Node) -> bool:
    source = node.args[0]
    return isinstance(source, Node) and node.args[1] == 0 and s.supported(source) and result_node(source) is node


def _batch_norm(s: Support, node: Node) -> bool:
    params = [p for p in node.args[1:5] if p is not None]
    users_ok = all(u.target is operator.getitem and u.args[1] == 0 for u in node.users)
    return users_ok and rank(node.args[0]) >= 2 and all(s.is_constant(p) for p in params)


def _attention(s: Support, node: Node) -> bool:
    q, k, v = node.args[:3]
    mask = arg(node, 3, "attn_mask")
    causal = bool(arg(node, 5, "is_causal", False))
    plain = arg(node, 4, "dropout_p", 0.0) == 0.0 and not node.kwargs.get("enable_gqa", False)
    ranks = rank(q) >= 3 and rank(q) == rank(k) == rank(v)
    mask_ok = mask is None or (mask.meta["val"].dtype == torch.float32 and not causal)
    causal_ok = not causal or (static(q, slice(-2, -1)) and static(k, slice(-2, -1)))
    return plain and ranks and mask_ok and causal_ok


CONSTRAINTS: dict[Any, Callable[[Support, Node], bool]] = {
    aten.linear.default: _linear,
    aten.addmm.default: _addmm,
    aten.mm.default: _mm,
    aten.convolution.default: _convolution,
    aten.max_pool2d.default: _max_pool,
    aten.max_pool2d_with_indices.default: _max_pool,
    aten.avg_pool2d.default: _avg_pool,
    aten._adaptive_avg_pool2d.default: _adaptive_avg_pool,
    aten.mean.dim: _mean,
    aten.upsample_bilinear2d.vec: _upsample,
    aten._softmax.default: _softmax,
    aten._log_softmax.default: _softmax,
    aten.pow.Tensor_Scalar: _pow,
    aten.gelu.default: _gelu,
    aten.elu.default: _elu,
    aten.prelu.default: _prelu,
    aten.view_copy.default: _reshape,
    aten.squeeze_copy.dims: _reshape,
    aten.squeeze_copy.dim: _reshape,
    aten.unsqueeze_copy.default: _reshape,
    aten.slice_copy.Tensor: _slice,
    aten.constant_pad_nd.default: _constant_pad,
    aten.cat.default: _cat,
    aten.clone.default: _copy,
    aten.alias_copy.default: _copy,
    aten.expand_copy.default: _copy,
    aten._to_copy.default: _copy,
    torch.ops.dim_order_ops._clone_dim_order.default: _copy,
    torch.ops.dim_order_ops._to_dim_order_copy.default: _copy,
    operator.getitem: _getitem,
    aten._native_batch_norm_legit_no_training.default: _batch_norm,
    aten.scaled_dot_product_attention.default: _attention,
}
"""ATen op -> what its arguments must satisfy for XNNPACK (ops not listed have no constraint beyond float32)."""


# ------------------------------------------------------------- quantized patterns

CHOOSERS = (q.CHOOSE_QPARAMS, q.AFFINE_CHOOSE)
QUANTIZERS = (q.DYNAMIC_QUANTIZE, q.AFFINE_QUANTIZE)
DYNAMIC_QUANTIZED_OPS = {aten.linear.default, aten.convolution.default}
"""ATen ops XNNPACK runs on a dynamically quantized (QD8) input, with per-channel int8 weights."""


def _int8(node: Node, first: int) -> bool:
    """Whether a q/dq node's (quant_min, quant_max, dtype) arguments from ``first`` on are full-range int8."""
    return tuple(node.args[first : first + 3]) == (-128, 127, torch.int8)


def _quantize(s: Support, node: Node) -> bool:
    """A static per-tensor int8 quantize of a float tensor whose every user dequantizes it again."""
    x = node.args[0]
    users_ok = all(q.op_of(u) == q.DEQUANTIZE for u in node.users)
    return _int8(node, 3) and users_ok and not s.is_constant(x) and first_tensor_dtype(x) == torch.float32


def _dequantize(s: Support, node: Node) -> bool:
    if q.is_quantized_weight(node):  # a constant weight quantized per tensor
        return _weight_dequantize(s, node)
    return _int8(node, 3) and q.op_of(node.args[0]) == q.QUANTIZE and s.supported(node.args[0])


def _weight_dequantize(s: Support, node: Node) -> bool:
    """Constant weights XNNPACK takes quantized (``quant.weight_kind``), read by supported linears/convs."""
    constant = s.is_constant(node) and _private_weight(s, node)
    return q.weight_kind(node) is not None and constant and all(_runs_quantized(s, u) for u in node.users)


def _runs_quantized(s: Support, node: Node) -> bool:
    """A supported linear/convolution that runs on integers: a static pattern or on a QD8 input. (One that
    runs in float, e.g. with weight-only quantization, keeps the weight's dequantize outside, so the program
    stores integers, not folded floats.)"""
    quantized = q.quantized_output(node) is not None or q.is_dynamic_dequantize(node.args[0])
    return quantized and s.supported(node)


def _dynamic_quantize(s: Support, node: Node) -> bool:
    """choose_qparams -> quantize -> dequantize before linears/convolutions that take a QD8 input."""
    return _int8(node, 3) and _quantizes_for_gemms(s, node)


def _quantizes_for_gemms(s: Support, node: Node) -> bool:
    """Whether a dynamic quantize of a non-constant value is only dequantized for supported linears/convs."""
    dequantize = [u for u in node.users if q.is_dynamic_dequantize(u)]
    if len(dequantize) != len(node.users) or s.is_constant(node.args[0]):
        return False
    return all(u.op == "call_function" and s.supported(u) for d in dequantize for u in d.users)


def _private_weight(s: Support, node: Node) -> bool:
    """Whether the tensors a constant weight is computed from feed only constant computations. A tensor also
    read by a computation on inputs (a tied embedding) reaches the delegate as an input, and a quantized weight
    must be static."""
    chain, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n not in chain:
            chain.add(n)
            stack.extend(n.all_input_nodes)
    return all(s.is_constant(u) for p in chain if p.op == "placeholder" for u in p.users)


def _weight_quantize(s: Support, node: Node) -> bool:
    """A constant weight quantized in the graph (``fold_quantize=False``): folded, then read by its dequantize."""
    return (
        s.is_constant(node)
        and _private_weight(s, node)
        and all(q.op_of(u) == q.WEIGHT_DEQUANTIZE and s.supported(u) for u in node.users)
    )


def _affine_quantize(s: Support, node: Node) -> bool:
    """torchao's per-token int8 quantization of an activation (8da4w/8da8w), which XNNPACK's QD8 is."""
    x, block = node.args[0], list(node.args[1])
    per_token = isinstance(x, Node) and block == [1] * (rank(x) - 1) + [x.meta["val"].shape[-1]]
    return per_token and tuple(node.args[4:7]) == (torch.int8, -128, 127) and _quantizes_for_gemms(s, node)


def _affine_dequantize(s: Support, node: Node) -> bool:
    if q.op_of(node.args[0]) == q.AFFINE_QUANTIZE:
        return s.supported(node.args[0])
    return _weight_dequantize(s, node)


def _dynamic_dequantize(s: Support, node: Node) -> bool:
    source = node.args[0]
    return q.op_of(source) == q.DYNAMIC_QUANTIZE and source.args[1:3] == node.args[1:3] and s.supported(source)


def _choose_qparams(s: Support, node: Node) -> bool:
    items = [u for u in node.users if u.target is operator.getitem]
    quantizes = {u for item in items for u in item.users}
    return (
        len(items) == len(node.users)
        and all(q.op_of(u) in (*QUANTIZERS, q.DYNAMIC_DEQUANTIZE, q.AFFINE_DEQUANTIZE) for u in quantizes)
        and all(s.supported(u) for u in quantizes if q.op_of(u) in QUANTIZERS)
    )


def _choose_qparams_item(s: Support, node: Node) -> bool:
    return s.supported(node.args[0])


def _quantized_op(s: Support, node: Node, op: Any) -> bool:
    """An op reading dequantized values. Static ones always lower: as a QS8 pattern (``quant.quantized_output``)
    or in float between convert nodes. A QD8 value has no float form: only linears and convolutions with
    per-channel int8 weights read it, and nothing else may read the same node."""
    dynamic = [a for a in node.all_input_nodes if q.is_dynamic_dequantize(a)]
    if not dynamic:
        return True
    weight = node.args[1]
    # Weights quantized per tensor (a dequantize_per_tensor) stay portable under a dynamic input, as in ExecuTorch.
    per_tensor = q.op_of(weight) == q.DEQUANTIZE
    kind = q.weight_kind(weight) if q.is_quantized_weight(weight) and not per_tensor else None
    grouped_ok = op == aten.linear.default or (kind is not None and kind[1] == 0)
    return op in DYNAMIC_QUANTIZED_OPS and dynamic == [node.args[0]] and kind is not None and grouped_ok


QUANT_CONSTRAINTS: dict[Any, Callable[[Support, Node], bool]] = {
    q.QUANTIZE: _quantize,
    q.DEQUANTIZE: _dequantize,
    q.WEIGHT_DEQUANTIZE: _weight_dequantize,
    q.WEIGHT_QUANTIZE: _weight_quantize,
    q.DYNAMIC_QUANTIZE: _dynamic_quantize,
    q.DYNAMIC_DEQUANTIZE: _dynamic_dequantize,
    q.CHOOSE_QPARAMS: _choose_qparams,
    q.AFFINE_CHOOSE: _choose_qparams,
    q.AFFINE_QUANTIZE: _affine_quantize,
    q.AFFINE_DEQUANTIZE: _affine_dequantize,
}
"""Quantize/dequantize ops -> when they join an XNNPACK partition (as value types, not nodes)."""
