"""Ops that hand their input back unchanged, removed: ``to`` the same dtype, a slice that keeps every element,
a ``_to_copy`` that changes nothing. Where such an op sat between a dequantize and a quantize of the same
parameters, the pair goes too (``fold_dequantize_quantize``)."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.fx import GraphModule

from edgetorch.exir.dialects._ops import ops as exir_ops
from edgetorch.exir.pass_base import ExportPass, PassResult
from edgetorch.exir.passes.to_edge import is_noop

_qd = torch.ops.quantized_decomposed
DEQUANTIZE_OPS = (
    _qd.dequantize_per_tensor.default,
    _qd.dequantize_per_channel.default,
    exir_ops.edge.quantized_decomposed.dequantize_per_tensor.default,
    exir_ops.edge.quantized_decomposed.dequantize_per_channel.default,
)
QUANTIZE_OPS = (
    _qd.quantize_per_tensor.default,
    _qd.quantize_per_channel.default,
    exir_ops.edge.quantized_decomposed.quantize_per_tensor.default,
    exir_ops.edge.quantized_decomposed.quantize_per_channel.default,
)


def fold_dequantize_quantize(graph_module: GraphModule, dequantize_nodes: Iterable[torch.fx.Node]) -> None:
    """Where a dequantize feeds a quantize with the same quantization parameters, the quantize's users read the
    dequantize's integer input instead (the pair then dies in dead-code elimination)."""
    for dq in dequantize_nodes:
        if dq.target not in DEQUANTIZE_OPS:
            raise ValueError(f"fold_dequantize_quantize: expected a dequantize node, found {dq.target}")
        for user in list(dq.users):
            if user.target in QUANTIZE_OPS and list(user.args)[1:] == list(dq.args)[1:]:
                user.replace_all_uses_with(dq.args[0])


class RemoveNoopPass(ExportPass):
    """Removes ``aten.to.dtype`` and ``aten.slice_copy.Tensor`` nodes whose output is their input (the same fake
    tensor, or for a slice the same static shape), with any dequantize/quantize pair around them."""

    def call(self, graph_module: GraphModule) -> PassResult:
        around = []
        for node in graph_module.graph.nodes:
            if node.op != "call_function" or node.target not in (
                torch.ops.aten.to.dtype,
                torch.ops.aten.slice_copy.Tensor,
            ):
                continue
            if is_noop(node.target, node.args[0].meta.get("val"), node.meta.get("val")):
                if node.args[0].target in DEQUANTIZE_OPS:
                    around.append(node.args[0])
                node.replace_all_uses_with(node.args[0])
        graph_module.graph.eliminate_dead_code()
        fold_dequantize_quantize(graph_module, around)
        graph_module.graph.lint()
        graph_module.graph.eliminate_dead_code()
        return PassResult(graph_module, True)


class RemoveToCopyPass(ExportPass):
    """Removes ``aten._to_copy`` nodes that keep dtype, device, shape and strides."""

    def call(self, graph_module: GraphModule) -> PassResult:
        for node in graph_module.graph.nodes:
            if node.op != "call_function" or node.target != torch.ops.aten._to_copy.default:
                continue
            if is_noop(node.target, node.args[0].meta.get("val"), node.meta.get("val")):
                node.replace_all_uses_with(node.args[0])
        graph_module.graph.eliminate_dead_code()
        graph_module.graph.lint()
        return PassResult(graph_module, True)
