"""ATen ops -> their Edge-dialect op objects (``aten_to_edge``), as a pass on a graph (``OpReplacePass``).

``to_edge`` does this and more (``passes.to_edge``); this is the bare replacement ExecuTorch's
passes use. May import torch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from edgetorch.exir.dialects._ops import EdgeOpOverload, edge_op

__all__ = ["OpReplacePass", "aten_to_edge", "should_lower_to_edge"]


def aten_to_edge(aten_op: torch._ops.OpOverload) -> EdgeOpOverload:
    """The Edge op of ``aten_op`` (``exir_ops.edge.<ns>.<op>.<overload>``)."""
    return edge_op(aten_op)


def should_lower_to_edge(op: Any) -> bool:
    """True for a torch operator overload that is not already an Edge op (Python builtins are left alone)."""
    return isinstance(op, torch._ops.OpOverload)


class OpReplacePass(PassBase):
    """Make every ATen operator call of a graph (and its subgraphs) call the Edge op instead."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        changed = False
        for module in graph_module.modules():
            if not isinstance(module, torch.fx.GraphModule):
                continue
            for node in module.graph.nodes:
                if node.op == "call_function" and should_lower_to_edge(node.target):
                    node.target = aten_to_edge(node.target)
                    changed = True
            module.recompile()
        return PassResult(graph_module, changed)
