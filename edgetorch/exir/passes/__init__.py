"""Graph passes of the compiler (edge-side lowering here; out variants and memory planning beside it)."""

from edgetorch.exir.passes.decompose import core_aten_decompositions, decompose
from edgetorch.exir.passes.lift_constants import lift_constants
from edgetorch.exir.passes.to_edge import ToEdgePass, view_copy_of

__all__ = ["ToEdgePass", "core_aten_decompositions", "decompose", "lift_constants", "view_copy_of"]
