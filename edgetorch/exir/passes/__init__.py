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
    "RemoveNoopPass": "remove_noop_pass",
    "RemoveToCopyPass": "remove_noop_pass",
    "ReplaceSymSizeOpPass": "replace_sym_size_op_pass",
    "EdgeToBackendOpsPass": "replace_edge_with_backend_pass",
    "MemoryFormatOpsPass": "memory_format_ops_pass",
    "DimOrderOpsRevertPass": "memory_format_ops_pass",
    "SymToTensorPass": "sym_to_tensor_pass",
    "RemoveMixedTypeOperators": "remove_mixed_type_operators",
    "RemoveGraphAssertsPass": "remove_graph_asserts_pass",
    "NormalizeViewCopyBasePass": "normalize_view_copy_base_pass",
    "FoldRedundantDequantizeQuantizePass": "fold_redundant_qdq_pass",
    "CSEPass": "cse_pass",
}

__all__ = [
    "CSEPass",
    "ConstraintBasedSymShapeEvalPass",
    "DimOrderOpsRevertPass",
    "EdgeToBackendOpsPass",
    "FoldRedundantDequantizeQuantizePass",
    "MemoryFormatOpsPass",
    "NormalizeViewCopyBasePass",
    "RemoveGraphAssertsPass",
    "RemoveMixedTypeOperators",
    "RemoveNoopPass",
    "RemoveToCopyPass",
    "ReplaceSymSizeOpPass",
    "SymToTensorPass",
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
    "propagate_dynamic_shape",
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


def propagate_dynamic_shape(dynamic_memory_planning_mode: object = None) -> list:
    """The passes that give a graph's tensors their specs with the upper bounds of their dynamic sizes (what a
    partitioner needs before delegation): spec propagation, then hint-based size evaluation. The mode is
    accepted for ExecuTorch's signature; upper bounds are the only mode these passes compute."""
    from edgetorch.exir.passes.spec_prop import SpecPropPass
    from edgetorch.exir.passes.sym_shape_eval_pass import HintBasedSymShapeEvalPass

    return [SpecPropPass(), HintBasedSymShapeEvalPass()]


__getattr__ = lazy_exports(__name__, _BACK_HALF)
