"""``Support``: which Edge nodes the XNNPACK delegate takes, op by op, with each op's constraints.

A node is delegated when the config owning its operator (``partition.config``)
is among the partitioner's configs with a precision left enabled, its operator
has a visitor in ``operators.VISITORS``, its tensors are float32 (constants may
be any dtype: they are folded to float32 at lowering), and the operator's
constraint below accepts its arguments. Quantize/dequantize ops join as the
value types they become in the blob (``operators/quant.py``): static per-tensor
int8 q/dq pairs, per-channel and 4-bit grouped weights of linears and
convolutions that run on integers, and dynamic (per-token) quantization chains
whose only readers are such linears and convolutions (``QUANT_CONSTRAINTS``).
``per_op_groups`` gives ``per_op_mode``'s partitions. Why a node is refused is
logged at debug level. May import torch.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.export import ExportedProgram

from edgetorch.backends.xnnpack._passes.fuse_activation_pass import FuseActivationPass
from edgetorch.backends.xnnpack.operators import VISITORS, result_node
from edgetorch.backends.xnnpack.operators import quant as q
from edgetorch.backends.xnnpack.partition.config.precision import ConfigPrecisionType
from edgetorch.backends.xnnpack.serialize import constant_placeholders
from edgetorch.exir.dialects import to_aten

__all__ = ["CONSTRAINTS", "QUANT_CONSTRAINTS", "Support", "gemm_precision"]

aten = torch.ops.aten
Node = torch.fx.Node
logger = logging.getLogger("edgetorch.backends.xnnpack.partition")


class Support:
    """Answers "can XNNPACK run this node?" for the nodes of one program (ATen or Edge dialect), with the given
    configs (``XNNPartitionerConfig`` instances: the operators they claim, with their enabled precisions)."""

    def __init__(self, program: ExportedProgram, configs: Sequence[Any]) -> None:
        self.constants = constant_placeholders(program)
        self._constant: dict[Node, bool] = {}
        self.config_of = {op: c for c in configs for op in c.ops}
        self._verdict: dict[Node, str | None] = {}

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
        if node not in self._verdict:
            reason = self._verdict[node] = self.why_not(node)
            if reason is not None and logger.isEnabledFor(logging.DEBUG):
                logger.debug("XNNPACK leaves node %s (%s) out: %s", node.name, _name(node.target), reason)
        return self._verdict[node] is None

    def why_not(self, node: Node) -> str | None:
        """Why XNNPACK does not take the call ``node``, or None if it does."""
        op = to_aten(node.target)
        config = self.config_of.get(str(op))
        if op not in FOLLOWERS and not self._fused_activation(node):
            if config is None:
                return f"no config of this partitioner claims {_name(op)}"
            if not config.enabled_precision_types:
                supported = [p.name for p in config.supported_precision_types()]
                return f"{type(config).__name__} supports {supported}, none of them enabled"
        if op in QUANT_CONSTRAINTS or (op is operator.getitem and q.op_of(node.args[0]) in CHOOSERS):
            check = QUANT_CONSTRAINTS.get(op, _choose_qparams_item)
            return None if check(self, node) else _doc(check)
        if op not in VISITORS:
            return f"edgetorch's XNNPACK lowering has no {_name(op)}"
        if not self._float_dtype(node):
            return "its tensors are not all float32 or all float16"
        if any(q.is_quantized_weight(a) and not _private_weight(self, a) for a in node.all_input_nodes):
            return _doc(_private_weight)
        if getattr(config, "weight_idx", None) is not None:  # a GEMMConfig
            precision = gemm_precision(node, config)
            if config.enabled_precision_types == [ConfigPrecisionType.FP32] != [precision]:
                return f"it is a {precision.name} {config.target_name}, and only FP32 is enabled"
        constraint = CONSTRAINTS.get(op)
        if constraint is not None and not constraint(self, node):
            return _doc(constraint)
        if q.quantized_inputs(node) and not _quantized_op(self, node, op):
            return _doc(_quantized_op)
        return None

    def _fused_activation(self, node: Node) -> bool:
        """Whether ``node`` is a ReLU or hardtanh a delegated GEMM fuses: it goes with the GEMM whatever its own
        config's precisions."""
        source: Any = node.args[0] if node.args else None
        fusable = (
            to_aten(node.target) in FuseActivationPass.FUSEABLE_ACTIVATIONS
            and q.op_of(source) in GEMMS
            and len(source.users) == 1
        )
        return fusable and self.supported(source)

    def _float_dtype(self, node: Node) -> bool:
        # A constant placeholder may be any dtype (the lowering converts it); a value computed from constants
        # outside this node is an input of the delegate like any other, so it must be float32 too (torchao's
        # weight-only int8 dequantizes with a view of the int8 weight, then a copy to float32, sub and mul).
        # float16 is delegated as ExecuTorch does (XNNPACK's fp16 datatype), when the node is float16 throughout.
        inputs = [a for a in node.all_input_nodes if a not in self.constants]
        dtypes = {first_tensor_dtype(n) for n in [node, *inputs]}
        return dtypes == {torch.float32} or dtypes == {torch.float16}

    def node_and_deps(self, node: Node) -> list[Node]:
        """The supported nodes delegated together with ``node`` in ``per_op_mode``, in graph order."""
        links = self._links(node.graph)
        group, stack = {node}, [node]
        while stack:
            for other in links.get(stack.pop(), ()):
                if other not in group:
                    group.add(other)
                    stack.append(other)
        return sorted(group, key=_position(node.graph))

    def per_op_groups(self, graph_module: torch.fx.GraphModule) -> list[list[Node]]:
        """The ``per_op_mode`` partitions: each supported operator with its q/dq nodes, getitems and fused
        activation; nodes two operators share (one dequantize read by both) join their partitions into one."""
        groups: list[list[Node]] = []
        seen: set[Node] = set()
        for node in graph_module.graph.nodes:
            if node not in seen and self.supported(node):
                group = self.node_and_deps(node)
                seen.update(group)
                groups.append(group)
        return groups

    def _links(self, graph: torch.fx.Graph) -> dict[Node, set[Node]]:
        """Supported node -> the supported nodes it must share a per-operator partition with (both ways)."""
        links: dict[Node, set[Node]] = {}
        for node in graph.nodes:
            if not self.supported(node):
                continue
            for other in self._attached_to(node):
                if isinstance(other, Node) and self.supported(other):
                    links.setdefault(node, set()).add(other)
                    links.setdefault(other, set()).add(node)
        return links

    def _attached_to(self, node: Node) -> list[Node]:
        """The nodes a q/dq node, getitem or fused activation belongs with: a quantize or dequantize with its
        readers, a getitem with its producer, an activation with the GEMM it follows."""
        op = to_aten(node.target)
        source: Any = node.args[0] if node.args else None
        if op in DEPENDENT_INPUTS or (op is operator.getitem and q.op_of(source) in CHOOSERS):
            return list(node.users)
        if op is operator.getitem:
            return [source]
        if op in FuseActivationPass.FUSEABLE_ACTIVATIONS and q.op_of(source) in GEMMS and len(source.users) == 1:
            return [source]
        return []


def gemm_precision(node: Node, config: Any) -> ConfigPrecisionType:
    """FP32 unless the weight is dequantized; then DYNAMIC_QUANT when the activation is dynamically quantized,
    else STATIC_QUANT (ExecuTorch's precision of a GEMM)."""
    weight = arg(node, config.weight_idx, "weight")
    if not (q.is_quantized_weight(weight) or q.op_of(weight) == q.DEQUANTIZE):
        return ConfigPrecisionType.FP32
    if q.is_dynamic_dequantize(node.args[config.act_idx]):
        return ConfigPrecisionType.DYNAMIC_QUANT
    return ConfigPrecisionType.STATIC_QUANT


def _name(target: Any) -> str:
    return str(target) if isinstance(target, torch._ops.OpOverload) else getattr(target, "__name__", str(target))


def _doc(check: Callable[..., bool]) -> str:
    """The constraint a check states (the first line of its docstring)."""
    return (check.__doc__ or check.__name__).strip().splitlines()[0].rstrip(".")


def _position(graph: torch.fx.Graph) -> Callable[[Node], int]:
    order = {n: i for i, n in enumerate(graph.nodes)}
    return order.__getitem__


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
    """A linear needs a constant 2-d weight and a constant (or no) bias."""
    bias = arg(node, 2, "bias")
    return s.is_constant(node.args[1]) and rank(node.args[1]) == 2 and (bias is None or s.is_constant(bias))


def _addmm(s: Support, node: Node) -> bool:
    """An addmm needs beta = alpha = 1 and a constant bias and weight."""
    ones = arg(node, 3, "beta", 1) == 1 and arg(node, 4, "alpha", 1) == 1
    return ones and s.is_constant(node.args[0]) and s.is_constant(node.args[2])


def _mm(s: Support, node: Node) -> bool:
    """A matrix product needs a constant right-hand side."""
    return s.is_constant(node.args[1])


def _convolution(s: Support, node: Node) -> bool:
    """A convolution needs a constant weight and bias and a 1-d or 2-d kernel."""
    weight, bias = node.args[1], node.args[2]
    constant = s.is_constant(weight) and (bias is None or s.is_constant(bias))
    return constant and rank(weight) in (3, 4) and rank(node.args[0]) == rank(weight)


def _max_pool(s: Support, node: Node) -> bool:
    """A max pooling needs a 4-d input, stride <= kernel, no index output, and static sizes with ceil_mode."""
    kernel = pair(node.args[1])
    stride = pair(arg(node, 2, "stride") or kernel)
    ceil = bool(arg(node, 5, "ceil_mode", False))
    ok = rank(node.args[0]) == 4 and all(st <= k for st, k in zip(stride, kernel))
    if to_aten(node.target) == aten.max_pool2d_with_indices.default:
        ok = ok and all(u.target is operator.getitem and u.args[1] == 0 for u in node.users)
    return ok and (not ceil or static(node.args[0], slice(2, None)))


def _avg_pool(s: Support, node: Node) -> bool:
    """An average pooling needs a 4-d input, no ceil_mode, no divisor_override, and no padding counted."""
    padding = pair(arg(node, 3, "padding", 0))
    ceil = bool(arg(node, 4, "ceil_mode", False))
    include_pad = bool(arg(node, 5, "count_include_pad", True))
    override = arg(node, 6, "divisor_override")
    zero_pad = all(p == 0 for p in padding)
    return rank(node.args[0]) == 4 and not ceil and override is None and (zero_pad or not include_pad)


def _adaptive_avg_pool(s: Support, node: Node) -> bool:
    """An adaptive average pooling needs a static 4-d input whose sizes the output sizes divide."""
    x = node.args[0]
    if rank(x) != 4 or not static(x, slice(2, None)):
        return False
    h, w = x.meta["val"].shape[2:]
    oh, ow = pair(node.args[1])
    return (oh, ow) == (1, 1) or (h % oh == 0 and w % ow == 0)


def _mean(s: Support, node: Node) -> bool:
    """A mean needs a 4-d input reduced over its last two dims, with no dtype."""
    x = node.args[0]
    dims = arg(node, 1, "dim")
    if rank(x) != 4 or dims is None or node.kwargs.get("dtype") is not None:
        return False
    return sorted(d % 4 for d in dims) == [2, 3]


def _upsample(s: Support, node: Node) -> bool:
    """A bilinear upsampling needs a 4-d input and static output sizes."""
    return rank(node.args[0]) == 4 and static(node, slice(2, None))


def _softmax(s: Support, node: Node) -> bool:
    """A softmax needs to run over the last dim, with no half-to-float."""
    return node.args[1] % rank(node.args[0]) == rank(node.args[0]) - 1 and not node.args[2]


def _pow(s: Support, node: Node) -> bool:
    """A power needs exponent 2."""
    return node.args[1] == 2


def _gelu(s: Support, node: Node) -> bool:
    """A GELU needs approximate='none' and float32 (XNNPACK has no float16 GELU; ExecuTorch refuses it too)."""
    return node.kwargs.get("approximate", "none") == "none" and first_tensor_dtype(node) == torch.float32


def _elu(s: Support, node: Node) -> bool:
    """An ELU needs scale = input_scale = 1."""
    return arg(node, 2, "scale", 1) == 1 and arg(node, 3, "input_scale", 1) == 1


def _prelu(s: Support, node: Node) -> bool:
    """A PReLU needs a constant weight of 1 or C values and a 2-d or 4-d input."""
    x, weight = node.args
    channels = x.meta["val"].shape[1] if rank(x) > 1 else 1
    return s.is_constant(weight) and rank(x) in (2, 4) and weight.meta["val"].numel() in (1, channels)


def _reshape(s: Support, node: Node) -> bool:
    """A reshape may have at most one dynamic dim."""
    return sum(isinstance(d, torch.SymInt) for d in node.meta["val"].shape) <= 1


def _slice(s: Support, node: Node) -> bool:
    """A slice needs step 1, static shapes and a non-empty result."""
    return arg(node, 4, "step", 1) == 1 and static(node.args[0]) and static(node) and node.meta["val"].numel() > 0


def _constant_pad(s: Support, node: Node) -> bool:
    """A constant pad needs no negative padding."""
    return all(p >= 0 for p in node.args[1])


def _cat(s: Support, node: Node) -> bool:
    """A concatenation needs at least one input and a non-empty result."""
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
    """A getitem is taken with its source, as that source's first output."""
    source = node.args[0]
    return isinstance(source, Node) and node.args[1] == 0 and s.supported(source) and result_node(source) is node


def _batch_norm(s: Support, node: Node) -> bool:
    """A batch norm needs constant parameters, an NC, NCL or NCHW input and only its first output read.

    ExecuTorch's limit: it runs a batch norm as a 1x1 depthwise convolution, or folds it into the 1-d/2-d
    convolution before it, so a 5-d one (after a Conv3d) stays with the portable kernels."""
    params = [p for p in node.args[1:5] if p is not None]
    users_ok = all(u.target is operator.getitem and u.args[1] == 0 for u in node.users)
    return users_ok and 2 <= rank(node.args[0]) <= 4 and all(s.is_constant(p) for p in params)


def _attention(s: Support, node: Node) -> bool:
    """An attention needs no dropout or GQA, equal ranks >= 3, a float mask without is_causal, static causal sizes."""
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
"""ATen op -> what its arguments must satisfy for XNNPACK (ops not listed have no constraint beyond their float
dtype: float32, or float16 throughout)."""


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
    """A static dequantize is taken with the int8 quantize it reads, or, of constant integers (a per-tensor
    weight), taken as QS8 by the linears/convolutions that run on integers, as ExecuTorch lowers it, else
    folded to float32 for the supported ops reading it."""
    if q.is_quantized_weight(node) and _weight_dequantize(s, node):
        return True
    if s.is_constant(node.args[0]):
        int8 = tuple(node.args[3:6]) in ((-128, 127, torch.int8), (-127, 127, torch.int8))
        return int8 and _private_weight(s, node) and all(u.op == "call_function" and s.supported(u) for u in node.users)
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
    """A torchao dequantize is taken with its per-token quantize, or as a GEMM's quantized weight."""
    if q.op_of(node.args[0]) == q.AFFINE_QUANTIZE:
        return s.supported(node.args[0])
    return _weight_dequantize(s, node)


def _dynamic_dequantize(s: Support, node: Node) -> bool:
    """A dynamic dequantize is taken with the matching dynamic quantize it reads."""
    source = node.args[0]
    return q.op_of(source) == q.DYNAMIC_QUANTIZE and source.args[1:3] == node.args[1:3] and s.supported(source)


def _choose_qparams(s: Support, node: Node) -> bool:
    """A choose_qparams is taken when the quantizes and dequantizes reading its results are."""
    items = [u for u in node.users if u.target is operator.getitem]
    quantizes = {u for item in items for u in item.users}
    return (
        len(items) == len(node.users)
        and all(q.op_of(u) in (*QUANTIZERS, q.DYNAMIC_DEQUANTIZE, q.AFFINE_DEQUANTIZE) for u in quantizes)
        and all(s.supported(u) for u in quantizes if q.op_of(u) in QUANTIZERS)
    )


def _choose_qparams_item(s: Support, node: Node) -> bool:
    """A result of choose_qparams is taken with it."""
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

FOLLOWERS = {
    operator.getitem,
    q.WEIGHT_DEQUANTIZE,
    q.WEIGHT_QUANTIZE,
    q.DYNAMIC_QUANTIZE,
    q.DYNAMIC_DEQUANTIZE,
    q.CHOOSE_QPARAMS,
}
"""Ops no config claims: delegated with the nodes they feed or come from (ExecuTorch's GEMM dependencies)."""
DEPENDENT_INPUTS = {
    q.QUANTIZE,
    q.DEQUANTIZE,
    q.WEIGHT_DEQUANTIZE,
    q.WEIGHT_QUANTIZE,
    q.DYNAMIC_QUANTIZE,
    q.DYNAMIC_DEQUANTIZE,
    q.CHOOSE_QPARAMS,
    q.AFFINE_CHOOSE,
    q.AFFINE_QUANTIZE,
    q.AFFINE_DEQUANTIZE,
}
"""Ops that belong, in ``per_op_mode``, to the partition of the operators reading them. (A static quantize
too: delegates then pass float32 between them, which edgetorch's blobs take, and quantize on entry.)"""
GEMMS = {aten.linear.default, aten.convolution.default, aten.addmm.default, aten.mm.default}
