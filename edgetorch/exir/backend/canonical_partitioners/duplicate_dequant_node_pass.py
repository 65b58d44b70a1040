"""``DuplicateDequantNodePass``: one dequantize node per user, so each quantized op can be partitioned alone.

A quantized op reads ``dequantize -> op -> quantize``. When one dequantize feeds several ops,
a partition taking one of those ops would have to share it with the others; after this pass
each user has its own copy. May import torch.
"""

from __future__ import annotations

import torch
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from edgetorch.exir.dialects import to_aten

__all__ = ["DuplicateDequantNodePass", "is_dequantize"]


def is_dequantize(node: torch.fx.Node) -> bool:
    """True for a ``quantized_decomposed.dequantize_*`` call (ATen or Edge dialect)."""
    op = to_aten(node.target)
    return (
        node.op == "call_function"
        and isinstance(op, torch._ops.OpOverload)
        and op.namespace == "quantized_decomposed"
        and op._opname.startswith("dequantize_")
    )


class DuplicateDequantNodePass(PassBase):
    """Give every user of a shared dequantize node its own copy, placed just before that user."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        graph, changed = graph_module.graph, False
        for node in list(graph.nodes):
            if not is_dequantize(node):
                continue
            for user in list(node.users)[1:]:
                with graph.inserting_before(user):
                    copy = graph.node_copy(node)
                copy.meta = dict(node.meta)
                user.replace_input_with(node, copy)
                changed = True
        if changed:
            graph_module.recompile()
        return PassResult(graph_module, changed)
