"""Graph passes of the compiler (edge-side lowering here; out variants and memory planning beside it).

As in ExecuTorch, ``remove_unused_parameters_pass`` and ``weights_to_outputs_pass`` here are the
functions (their modules share their names).
"""

import torch
from torch.fx.passes.infra.pass_base import PassResult

from edgetorch._lazy import lazy_exports
from edgetorch.exir.pass_base import ExportPass
from edgetorch.exir.passes.decompose import core_aten_decompositions, decompose
from edgetorch.exir.passes.lift_constants import lift_constants
from edgetorch.exir.passes.remove_unused_parameters_pass import remove_unused_parameters_pass
from edgetorch.exir.passes.to_edge import ToEdgePass, view_copy_of
from edgetorch.exir.passes.weights_to_outputs_pass import weights_to_outputs_pass

_BACK_HALF = {
    "DebugPass": "debug_pass",
    "PruneEmptyTensorsPass": "prune_empty_tensors_pass",
    "MemoryPlanningPass": "memory_planning_pass",
    "ToOutVarPass": "out_variant",
    "ReplaceViewCopyWithViewPass": "replace_view_copy_with_view_pass",
    "ScalarToTensorPass": "scalar_to_tensor_pass",
    "SpecPropPass": "spec_prop",
    "ConstraintBasedSymShapeEvalPass": "sym_shape_eval_pass",
    "HintBasedSymShapeEvalPass": "sym_shape_eval_pass",
}

__all__ = [
    "ConstraintBasedSymShapeEvalPass",
    "DebugPass",
    "ExportPass",
    "HintBasedSymShapeEvalPass",
    "MemoryPlanningPass",
    "PruneEmptyTensorsPass",
    "ReplaceViewCopyWithViewPass",
    "ScalarToTensorPass",
    "SpecPropPass",
    "ToOutVarPass",
    "ToEdgePass",
    "core_aten_decompositions",
    "dead_code_elimination_pass",
    "decompose",
    "lift_constants",
    "remove_unused_parameters_pass",
    "view_copy_of",
    "weights_to_outputs_pass",
]


def dead_code_elimination_pass(graph_module: torch.fx.GraphModule) -> PassResult:
    """Remove the nodes whose results nothing uses (side-effecting ops stay), in every subgraph too."""
    changed = False
    for module in graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            changed |= module.graph.eliminate_dead_code()
            module.recompile()
    return PassResult(graph_module, changed)


__getattr__ = lazy_exports(__name__, _BACK_HALF)
