"""Size queries named by their packet (``aten.sym_size``) made the overload the runtime knows
(``aten.sym_size.int``); ``sym_stride`` and ``sym_numel`` likewise. Passes built on ExportPass cannot run a
packet, so this one runs first."""

from __future__ import annotations

import torch

from edgetorch.exir.pass_base import PassBase, PassResult

replacements: dict = {
    torch.ops.aten.sym_size: torch.ops.aten.sym_size.int,
    torch.ops.aten.sym_stride: torch.ops.aten.sym_stride.int,
    torch.ops.aten.sym_numel: torch.ops.aten.sym_numel.default,
}


class ReplaceSymSizeOpPass(PassBase):
    """Rewrites sym_size / sym_stride / sym_numel packets to their overloads, in every subgraph."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        for module in graph_module.modules():
            if isinstance(module, torch.fx.GraphModule):
                for node in module.graph.nodes:
                    if node.target in replacements:
                        node.target = replacements[node.target]
        return PassResult(graph_module, True)
