"""Graph passes of the compiler (edge-side lowering here; out variants and memory planning beside it)."""

from edgetorch._lazy import lazy_exports
from edgetorch.exir.passes.decompose import core_aten_decompositions, decompose
from edgetorch.exir.passes.lift_constants import lift_constants
from edgetorch.exir.passes.to_edge import ToEdgePass, view_copy_of

_BACK_HALF = {
    "MemoryPlanningPass": "memory_planning_pass",
    "ToOutVarPass": "out_variant",
    "ReplaceViewCopyWithViewPass": "replace_view_copy_with_view_pass",
    "SpecPropPass": "spec_prop",
    "ConstraintBasedSymShapeEvalPass": "sym_shape_eval_pass",
    "HintBasedSymShapeEvalPass": "sym_shape_eval_pass",
}

__all__ = [
    "ConstraintBasedSymShapeEvalPass",
    "HintBasedSymShapeEvalPass",
    "MemoryPlanningPass",
    "ReplaceViewCopyWithViewPass",
    "SpecPropPass",
    "ToOutVarPass",
    "ToEdgePass",
    "core_aten_decompositions",
    "decompose",
    "lift_constants",
    "view_copy_of",
]


__getattr__ = lazy_exports(__name__, _BACK_HALF)
