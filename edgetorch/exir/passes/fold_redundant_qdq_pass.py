"""A dequantize followed directly by a quantize of the same parameters, folded away (what is left when
decomposition erased a quantized no-op such as eval-mode dropout)."""

from __future__ import annotations

import torch

from edgetorch.exir.pass_base import ExportPass, PassResult
from edgetorch.exir.passes.remove_noop_pass import DEQUANTIZE_OPS, fold_dequantize_quantize


class FoldRedundantDequantizeQuantizePass(ExportPass):
    """Folds every ``dequantize -> quantize`` pair with equal quantization parameters."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        graph = graph_module.graph
        before = len(graph.nodes)
        fold_dequantize_quantize(
            graph_module, [n for n in graph.nodes if n.op == "call_function" and n.target in DEQUANTIZE_OPS]
        )
        graph.eliminate_dead_code()
        changed = len(graph.nodes) != before
        if changed:
            graph.lint()
            graph_module.recompile()
        return PassResult(graph_module, changed)
