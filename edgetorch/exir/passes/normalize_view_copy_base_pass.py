"""Every ``view_copy`` made to read the first tensor above it that is not itself a ``view_copy``: a chain of
views becomes one view of the base (the intermediate views then die in dead-code elimination)."""

from __future__ import annotations

import logging

import torch
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from edgetorch.exir.dialects._ops import ops

logger = logging.getLogger(__name__)


def _is_view_copy(node: object) -> bool:
    return (
        isinstance(node, torch.fx.Node)
        and node.op == "call_function"
        and node.target in (torch.ops.aten.view_copy.default, ops.edge.aten.view_copy.default)
    )


class NormalizeViewCopyBasePass(PassBase):
    """Points each view_copy at its first non-view_copy ancestor (graph order makes one step enough)."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        moved = 0
        for module in graph_module.modules():
            if not isinstance(module, torch.fx.GraphModule):
                continue
            for node in module.graph.nodes:
                if _is_view_copy(node) and _is_view_copy(node.args[0]):
                    node.args = (node.args[0].args[0], node.args[1])
                    moved += 1
            module.recompile()
        logger.debug("NormalizeViewCopyBasePass: %d view_copy nodes now read their base", moved)
        return PassResult(graph_module, moved > 0)

    def ensures(self, graph_module: torch.fx.GraphModule) -> None:
        for module in graph_module.modules():
            if isinstance(module, torch.fx.GraphModule):
                for node in module.graph.nodes:
                    if _is_view_copy(node) and _is_view_copy(node.args[0]):
                        raise AssertionError(f"{node.name} still reads the view_copy {node.args[0].name}")
