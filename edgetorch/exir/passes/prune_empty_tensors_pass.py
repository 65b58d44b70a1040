"""``PruneEmptyTensorsPass``: drop the empty tensors a ``cat`` concatenates; a ``cat`` of only empty ones becomes ``full``.

An empty input adds nothing to a concatenation but still costs an argument, a tensor in the program and
a size check at run time. A tensor whose element count is symbolic and not provably zero is kept. When
every input is empty the ``cat`` becomes ``full(shape, 0)`` of its (static) result shape. ``to_edge``
runs it on the ATen graph (as ExecuTorch does); it also accepts an Edge graph. May import torch.
"""

from __future__ import annotations

import torch
from torch.fx.experimental.symbolic_shapes import guard_or_true
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from edgetorch.exir.dialects._ops import EdgeOpOverload, edge_op, to_aten

__all__ = ["PruneEmptyTensorsPass"]


def _maybe_nonempty(node: object) -> bool:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        return True
    return bool(guard_or_true(val.numel() != 0))


class PruneEmptyTensorsPass(PassBase):
    """Remove the inputs of ``aten.cat`` that are certainly empty (every subgraph too)."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        changed = False
        for module in graph_module.modules():
            if isinstance(module, torch.fx.GraphModule):
                changed |= self._prune(module)
        return PassResult(graph_module, changed)

    def _prune(self, gm: torch.fx.GraphModule) -> bool:
        changed = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or to_aten(node.target) is not torch.ops.aten.cat.default:
                continue
            inputs = list(node.args[0])
            kept = [x for x in inputs if _maybe_nonempty(x)]
            if len(kept) == len(inputs):
                continue
            result = node.meta.get("val")
            if kept:
                node.args = (kept, *node.args[1:])
            elif isinstance(result, torch.Tensor) and all(isinstance(d, int) for d in result.shape):
                full = torch.ops.aten.full.default
                target = edge_op(full) if isinstance(node.target, EdgeOpOverload) else full
                with gm.graph.inserting_after(node):
                    zeros = gm.graph.call_function(target, (tuple(result.shape), 0), {"dtype": result.dtype})
                zeros.meta.update(node.meta)
                node.replace_all_uses_with(zeros)
                gm.graph.erase_node(node)
            else:  # symbolic result shape: keep one empty input so the shape stays computed
                node.args = (inputs[:1], *node.args[1:])
            changed = True
        if changed:
            gm.graph.eliminate_dead_code()
            gm.graph.lint()
            gm.recompile()
        return changed
