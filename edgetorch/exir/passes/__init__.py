"""Graph passes of the compiler (edge-side lowering here; out variants and memory planning beside it)."""

from typing import Any

from edgetorch.exir.passes.decompose import core_aten_decompositions, decompose
from edgetorch.exir.passes.lift_constants import lift_constants
from edgetorch.exir.passes.to_edge import ToEdgePass, view_copy_of

__all__ = [
    "MemoryPlanningPass",
    "ToEdgePass",
    "core_aten_decompositions",
    "decompose",
    "lift_constants",
    "view_copy_of",
]


def __getattr__(name: str) -> Any:
    # Loaded on first use: the back-half passes import the emitter and runtime pieces.
    if name == "MemoryPlanningPass":
        from edgetorch.exir.passes.memory_planning_pass import MemoryPlanningPass

        return MemoryPlanningPass
    raise AttributeError(f"module 'edgetorch.exir.passes' has no attribute {name!r}")
