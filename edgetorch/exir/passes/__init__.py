"""Graph passes of the compiler (edge-side lowering here; out variants and memory planning beside it)."""

from typing import Any

from edgetorch.exir.passes.decompose import core_aten_decompositions, decompose
from edgetorch.exir.passes.lift_constants import lift_constants
from edgetorch.exir.passes.to_edge import ToEdgePass, view_copy_of

_BACK_HALF = {
    "MemoryPlanningPass": "memory_planning_pass",
    "ToOutVarPass": "out_variant",
    "ReplaceViewCopyWithViewPass": "out_variant",
    "SpecPropPass": "spec_prop",
    "ConstraintBasedSymShapeEvalPass": "spec_prop",
    "HintBasedSymShapeEvalPass": "spec_prop",
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


def __getattr__(name: str) -> Any:
    # Loaded on first use: the back-half passes import the emitter and runtime pieces.
    if name in _BACK_HALF:
        import importlib

        return getattr(importlib.import_module(f"edgetorch.exir.passes.{_BACK_HALF[name]}"), name)
    raise AttributeError(f"module 'edgetorch.exir.passes' has no attribute {name!r}")
