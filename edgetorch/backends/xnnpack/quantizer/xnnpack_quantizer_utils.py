"""The annotators of the XNNPACK quantizer: one function per operator pattern XNNPACK runs quantized.

Each annotator walks an exported (pre-dispatch ATen) graph, finds its pattern
(``linear``, ``conv`` + ``relu``, ``add``, ``cat``, ...) and records on the
pattern's nodes which inputs and which output get a quantize/dequantize pair,
through torchao's ``QuantizationAnnotation``. ``prepare_pt2e`` turns those
records into observers and ``convert_pt2e`` into q/dq ops. The patterns, their
order and their corner cases (a conv whose only user is a relu belongs to the
conv+relu pattern, int64 or huge scalar inputs of add/mul are left in float,
transposed-conv weights are quantized along axis 1) follow ExecuTorch's
XNNPACK quantizer, so a model quantized here lowers as users of ExecuTorch
expect. Imports torch and torchao.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e.graph_utils import get_source_partitions
from torchao.quantization.pt2e.quantizer import (
    QuantizationAnnotation,
    QuantizationConfig,
    SharedQuantizationSpec,
    get_bias_qspec,
    get_input_act_qspec,
    get_output_act_qspec,
    get_weight_qspec,
)
from torchao.quantization.pt2e.quantizer.quantizer import Q_ANNOTATION_KEY
from torchao.quantization.pt2e.utils import get_new_attr_name_with_prefix

__all__ = ["ANNOTATORS", "Annotator", "propagate_annotation", "scalars_to_attributes"]

NodeFilter = Callable[[Node], bool]
Annotator = Callable[[GraphModule, QuantizationConfig, NodeFilter | None], list[list[Node]]]

aten = torch.ops.aten

CONV_TARGETS = {
    aten.conv1d.default,
    aten.conv1d.padding,
    aten.conv2d.default,
    aten.conv2d.padding,
    aten.conv3d.default,
    aten.conv3d.padding,
}
CONV_TRANSPOSE_TARGETS = {
    aten.conv_transpose1d,
    aten.conv_transpose1d.default,
    aten.conv_transpose2d,
    aten.conv_transpose2d.input,
    aten.conv_transpose3d,
    aten.conv_transpose3d.input,
}
LINEAR_TARGETS = {aten.linear.default}
ADD_TARGETS = {aten.add.Tensor, aten.add_.Tensor}
MUL_TARGETS = {aten.mul.Tensor, aten.mul_.Tensor}
CAT_TARGETS = {aten.cat.default}
ADAPTIVE_AVG_POOL2D_TARGETS = {aten.adaptive_avg_pool2d.default}
RELU_TARGETS = {aten.relu.default, aten.relu_.default}

# Ops whose output keeps its input's quantization parameters: a q/dq pair after
# them reuses the producer's scale and zero point instead of observing anew.
SHARING_TARGETS = {
    aten.relu.default,
    aten.hardtanh.default,
    aten.hardtanh_.default,
    aten.max_pool2d.default,
    aten.mean.default,
    aten.mean.dim,
    aten.permute.default,
    aten.permute_copy.default,
    aten.transpose.int,
    aten.squeeze.dim,
    aten.squeeze_copy.dim,
    aten.adaptive_avg_pool2d.default,
    aten.view_copy.default,
    aten.view.default,
    aten.reshape.default,
    aten.slice.Tensor,
    aten.slice_copy.Tensor,
    aten.flatten.using_ints,
    aten.dropout.default,
    aten.dropout_.default,
}

# torch.histc, which HistogramObserver uses, fails on values beyond this bound.
_HISTC_UPPER_BOUND = 3.4028235e15


def _is_call(node: object, targets: set) -> bool:
    return isinstance(node, Node) and node.op == "call_function" and node.target in targets


def _annotated(nodes: list[Node]) -> bool:
    return any(Q_ANNOTATION_KEY in n.meta and n.meta[Q_ANNOTATION_KEY]._annotated for n in nodes)


def _mark_annotated(nodes: list[Node]) -> None:
    for node in nodes:
        node.meta.setdefault(Q_ANNOTATION_KEY, QuantizationAnnotation())._annotated = True


def _rejected(nodes: list[Node], filter_fn: NodeFilter | None) -> bool:
    return filter_fn is not None and not all(filter_fn(n) for n in nodes)


def _annotate(node: Node, inputs: dict | None = None, output=None) -> None:
    node.meta[Q_ANNOTATION_KEY] = QuantizationAnnotation(
        input_qspec_map=inputs or {}, output_qspec=output, _annotated=True
    )


def _sole_user(node: Node) -> Node | None:
    return next(iter(node.users)) if len(node.users) == 1 else None


def _weighted_inputs(op: Node, config: QuantizationConfig, transposed: bool = False) -> tuple[dict, list[Node]]:
    """The qspec map of a linear/conv node (activation, weight, optional bias) and its weight/bias nodes."""
    weight_qspec = get_weight_qspec(config)
    if transposed:
        # A transposed conv's weight is (in, out/groups, ...): output channels are axis 1.
        weight_qspec = dataclasses.replace(weight_qspec, ch_axis=1)
    inputs = {op.args[0]: get_input_act_qspec(config), op.args[1]: weight_qspec}
    params = [op.args[1]]
    bias = op.args[2] if len(op.args) > 2 else None
    if isinstance(bias, Node):
        inputs[bias] = get_bias_qspec(config)
        params.append(bias)
    return inputs, params


def _linear(gm: GraphModule, config: QuantizationConfig, filter_fn: NodeFilter | None) -> list[list[Node]]:
    found = []
    for node in gm.graph.nodes:
        if not _is_call(node, LINEAR_TARGETS) or _rejected([node], filter_fn) or _annotated([node]):
            continue
        inputs, params = _weighted_inputs(node, config)
        _annotate(node, inputs, get_output_act_qspec(config))
        _mark_annotated(params)
        found.append([node, *params])
    return found


def _op_relu(targets: set, transposed: bool = False) -> Annotator:
    """An annotator for ``relu(op(x, weight[, bias]))``: inputs quantized at ``op``, the output after the relu."""

    def annotate(gm: GraphModule, config: QuantizationConfig, filter_fn: NodeFilter | None) -> list[list[Node]]:
        found = []
        for relu in gm.graph.nodes:
            op = relu.args[0] if _is_call(relu, RELU_TARGETS) else None
            if not _is_call(op, targets) or len(op.users) > 1:
                continue
            inputs, params = _weighted_inputs(op, config, transposed)
            partition = [relu, op, *params]
            if _annotated(partition) or (transposed and _conv_groups(op) != 1) or _rejected(partition, filter_fn):
                continue
            _annotate(op, inputs)
            _annotate(relu, output=get_output_act_qspec(config))
            _mark_annotated(partition)
            found.append(partition)
        return found

    return annotate


def _conv_groups(conv: Node) -> int:
    """Groups of a training-graph conv, which does not carry them: deduced from the weight's shape."""
    weight = conv.args[1].meta["val"].shape
    if conv.target in CONV_TRANSPOSE_TARGETS:
        return conv.meta["val"].shape[1] // weight[1]
    return conv.args[0].meta["val"].shape[1] // weight[1]


def _conv(transposed: bool) -> Annotator:
    targets = CONV_TRANSPOSE_TARGETS if transposed else CONV_TARGETS

    def annotate(gm: GraphModule, config: QuantizationConfig, filter_fn: NodeFilter | None) -> list[list[Node]]:
        found = []
        dynamic = config.input_activation is not None and config.input_activation.is_dynamic
        for conv in gm.graph.nodes:
            if not _is_call(conv, targets) or _is_call(_sole_user(conv), RELU_TARGETS):
                continue  # a conv feeding only a relu is the conv+relu pattern's
            skip = transposed and _conv_groups(conv) != 1
            if dynamic:
                # Dynamically quantized convs run only as 2-D, non-depthwise convolutions.
                shape = getattr(conv.args[1].meta.get("val"), "shape", None)
                skip = skip or (shape is not None and len(shape) != 4)
                skip = skip or (not transposed and shape is not None and len(shape) >= 2 and shape[1] == 1)
            inputs, params = _weighted_inputs(conv, config, transposed)
            partition = [conv, *params]
            if _annotated(partition) or skip or _rejected(partition, filter_fn):
                continue
            _annotate(conv, inputs, get_output_act_qspec(config))
            _mark_annotated(partition)
            found.append(partition)
        return found

    return annotate


def _conv_bn(transposed: bool, with_relu: bool) -> Annotator:
    """``[relu](batch_norm(conv(x, w, b)))`` as QAT leaves it (PTQ folds the batch norm into the conv first)."""
    targets = CONV_TRANSPOSE_TARGETS if transposed else CONV_TARGETS
    two_dim = {aten.conv_transpose1d.default, aten.conv_transpose2d.input, aten.conv1d.default, aten.conv2d.default}

    def annotate(gm: GraphModule, config: QuantizationConfig, filter_fn: NodeFilter | None) -> list[list[Node]]:
        gm.graph.eliminate_dead_code()
        gm.recompile()
        found = []
        for conv in list(gm.graph.nodes):
            # The pattern is a 1-D or 2-D conv feeding only a batch norm.
            if not _is_call(conv, targets & two_dim):
                continue
            bn = _sole_user(conv)
            if not _is_call(bn, {aten.batch_norm.default}) or bn.args[0] is not conv:
                continue
            output = bn
            if with_relu:
                output = _sole_user(bn)
                if not _is_call(output, RELU_TARGETS):
                    continue
            inputs, params = _weighted_inputs(conv, config)
            partition = [conv, *params]
            if _annotated(partition) or _rejected(partition, filter_fn):
                continue
            _annotate(conv, inputs)
            _annotate(output, output=get_output_act_qspec(config))
            _mark_annotated(partition)
            found.append(partition)
        return found

    return annotate


def _float_operand(node: Node, gm: GraphModule) -> bool:
    """Whether an add/mul operand can be observed: a float32 tensor, not a scalar beyond histc's range."""
    val = node.meta.get("val")
    if not isinstance(val, torch._subclasses.FakeTensor) or val.dtype != torch.float32:
        return False
    if node.op == "get_attr":
        owner, _, name = str(node.target).rpartition(".")
        value = getattr(gm.get_submodule(owner), name)
        return not (value.numel() == 1 and abs(value.item()) > _HISTC_UPPER_BOUND)
    return True


def _binary(targets: set, with_relu: bool) -> Annotator:
    """An annotator for add/mul (optionally followed by relu): both tensor operands and the output quantized."""

    def annotate(gm: GraphModule, config: QuantizationConfig, filter_fn: NodeFilter | None) -> list[list[Node]]:
        found = []
        for node in gm.graph.nodes:
            if with_relu:
                op = node.args[0] if _is_call(node, RELU_TARGETS) else None
                if not _is_call(op, targets) or len(op.users) > 1:
                    continue
                partition = [node, op]
            else:
                if not _is_call(node, targets):
                    continue
                op = node
                partition = [op]
            if _annotated(partition) or _rejected(partition, filter_fn):
                continue
            operands = [a for a in op.args[:2] if isinstance(a, Node)]
            if not all(_float_operand(a, gm) for a in operands):
                continue
            inputs = dict.fromkeys(operands, get_input_act_qspec(config))
            if with_relu:
                _annotate(op, inputs)
                _annotate(node, output=get_output_act_qspec(config))
            else:
                _annotate(op, inputs, get_output_act_qspec(config))
            found.append(partition + operands)
        return found

    return annotate


def _adaptive_avg_pool2d(gm: GraphModule, config: QuantizationConfig, filter_fn: NodeFilter | None) -> list[list[Node]]:
    found = []
    sources = get_source_partitions(gm.graph, [torch.nn.AdaptiveAvgPool2d, F.adaptive_avg_pool2d], filter_fn)
    for partition in itertools.chain.from_iterable(sources.values()):
        pool = partition.output_nodes[0]
        if not _is_call(pool, ADAPTIVE_AVG_POOL2D_TARGETS) or _annotated([pool]):
            continue
        found.append(partition.nodes)
        source = pool.args[0]
        annotation = source.meta.get(Q_ANNOTATION_KEY)
        quantized_output = annotation is not None and annotation._annotated and annotation.output_qspec is not None
        input_qspec = SharedQuantizationSpec(source) if quantized_output else get_input_act_qspec(config)
        _annotate(pool, {source: input_qspec}, SharedQuantizationSpec((source, pool)))
    return found


def _has_quantized_source(node: Node) -> bool:
    """Whether ``node``'s value comes, through parameter-sharing ops only, from an annotated output."""
    seen = set()
    while isinstance(node, Node) and node not in seen:
        seen.add(node)
        annotation = node.meta.get(Q_ANNOTATION_KEY)
        if annotation is not None and annotation._annotated and annotation.output_qspec is not None:
            return True
        if not _is_call(node, SHARING_TARGETS):
            return False
        node = node.args[0]
    return False


def _cat(gm: GraphModule, config: QuantizationConfig, filter_fn: NodeFilter | None) -> list[list[Node]]:
    """cat: every input and the output share one set of parameters, owned by the first already-quantized input."""
    found = []
    for cat in gm.graph.nodes:
        if not _is_call(cat, CAT_TARGETS) or _annotated([cat]):
            continue
        found.append(cat.all_input_nodes)
        inputs = cat.args[0]
        owner = next((a for a in inputs if isinstance(a, Node) and _has_quantized_source(a)), inputs[0])
        shared = SharedQuantizationSpec((owner, cat))
        qspecs = {owner: get_input_act_qspec(config)} if isinstance(owner, Node) else {}
        for a in inputs:
            qspecs.setdefault(a, shared)
        _annotate(cat, qspecs, shared)
    return found


ANNOTATORS: dict[str, Annotator] = {
    "conv_bn_relu": _conv_bn(transposed=False, with_relu=True),
    "conv_bn": _conv_bn(transposed=False, with_relu=False),
    "conv_transpose_bn_relu": _conv_bn(transposed=True, with_relu=True),
    "conv_transpose_bn": _conv_bn(transposed=True, with_relu=False),
    "linear_relu": _op_relu(LINEAR_TARGETS),
    "linear": _linear,
    "conv": _conv(transposed=False),
    "conv_transpose": _conv(transposed=True),
    "conv_relu": _op_relu(CONV_TARGETS),
    "conv_transpose_relu": _op_relu(CONV_TRANSPOSE_TARGETS, transposed=True),
    "adaptive_avg_pool2d": _adaptive_avg_pool2d,
    "add_relu": _binary(ADD_TARGETS, with_relu=True),
    "add": _binary(ADD_TARGETS, with_relu=False),
    "mul_relu": _binary(MUL_TARGETS, with_relu=True),
    "mul": _binary(MUL_TARGETS, with_relu=False),
    "cat": _cat,
}
"""Pattern name -> annotator, in the order patterns are tried (fused patterns before their parts)."""


def propagate_annotation(gm: GraphModule) -> None:
    """Let each parameter-sharing op (relu, pooling, views, ...) after a quantized output share its parameters."""
    for node in gm.graph.nodes:
        if not _is_call(node, SHARING_TARGETS) or not isinstance(node.args[0], Node):
            continue
        source = node.args[0]
        annotation = source.meta.get(Q_ANNOTATION_KEY)
        if annotation is None or annotation.output_qspec is None or _annotated([node]):
            continue
        shared = SharedQuantizationSpec(source)
        _annotate(node, {source: shared}, shared)


def scalars_to_attributes(gm: GraphModule) -> GraphModule:
    """Turn the Python-number operands of add/mul into float tensor attributes, so they can be quantized too."""
    for node in gm.graph.nodes:
        if not _is_call(node, {aten.add.Tensor, aten.mul.Tensor}):
            continue
        args = []
        for arg in node.args:
            if not isinstance(arg, Node):
                name = get_new_attr_name_with_prefix("_tensor_constant_")(gm)
                value = torch.tensor(float(arg))
                gm.register_buffer(name, value)
                with gm.graph.inserting_before(node):
                    arg = gm.graph.create_node("get_attr", name)
                arg.meta["val"] = node.meta["val"].fake_mode.from_tensor(value, static_shapes=True)
            args.append(arg)
        node.args = tuple(args)
    gm.recompile()
    return gm
