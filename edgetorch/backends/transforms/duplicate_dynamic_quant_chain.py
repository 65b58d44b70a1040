"""``DuplicateDynamicQuantChainPass``: one dynamic-quantization chain per consumer.

After ``convert_pt2e`` a dynamically quantized activation read by several
quantized ops (say the q, k and v projections) is one chain
``choose_qparams -> getitem x2 -> quantize -> dequantize`` with several
users. A partitioner that lowers each linear with its own input quantization
needs each user to have its own chain, so this pass copies the whole chain
for every extra user. Run it on the converted module, before
``torch.export``. Imports torch.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult
from torchao.quantization.pt2e.quantizer import is_valid_annotation
from torchao.quantization.pt2e.quantizer.quantizer import Q_ANNOTATION_KEY

__all__ = ["DuplicateDynamicQuantChainPass"]

_qd = torch.ops.quantized_decomposed
_QUANTIZE = {_qd.quantize_per_tensor.default, _qd.quantize_per_tensor.tensor, _qd.quantize_per_channel.default}
_DEQUANTIZE = {_qd.dequantize_per_tensor.default, _qd.dequantize_per_tensor.tensor, _qd.dequantize_per_channel.default}


def _is_call(node: object, targets) -> bool:
    return isinstance(node, Node) and node.op == "call_function" and node.target in targets


def _consumers(node: Node) -> list[Node]:
    """Users of ``node`` other than ``sym_size`` queries (which read its shape, not its values)."""
    return [u for u in node.users if u.target is not torch.ops.aten.sym_size.int]


def _dynamic_chain(dq: Node) -> list[Node] | None:
    """``[choose_qparams, scale getitem, zero-point getitem, quantize, dequantize]`` ending at ``dq``, or None."""
    q = dq.args[0]
    if not _is_call(q, _QUANTIZE) or len(q.args) < 3:
        return None
    scale, zero_point = q.args[1], q.args[2]
    if not (_is_call(scale, {operator.getitem}) and _is_call(zero_point, {operator.getitem})):
        return None
    choose = scale.args[0]
    if not _is_call(choose, {_qd.choose_qparams.tensor}) or zero_point.args[0] is not choose:
        return None
    return [choose, scale, zero_point, q, dq]


class DuplicateDynamicQuantChainPass(PassBase):
    """Give every quantized consumer of a dynamically quantized activation its own q/dq chain."""

    def call(self, graph_module: GraphModule) -> PassResult:
        graph = graph_module.graph
        for dq in list(graph.nodes):
            if not _is_call(dq, _DEQUANTIZE):
                continue
            users = _consumers(dq)
            chain = _dynamic_chain(dq)
            if len(users) <= 1 or chain is None:
                continue
            if not all(is_valid_annotation(u.meta.get(Q_ANNOTATION_KEY)) for u in users):
                continue  # a float consumer shares the chain; leave it as convert_pt2e wrote it
            for user in users[1:]:
                copies: dict[Node, Node] = {}
                with graph.inserting_before(user):
                    for node in chain:
                        copies[node] = graph.node_copy(node, lambda n, c=copies: c.get(n, n))
                user.replace_input_with(dq, copies[dq])
        graph.eliminate_dead_code()
        graph_module.recompile()
        return PassResult(graph_module, True)
