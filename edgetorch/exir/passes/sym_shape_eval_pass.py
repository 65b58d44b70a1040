"""Symbolic shape evaluation: give every TensorSpec a concrete (planned) shape.

``ConstraintBasedSymShapeEvalPass`` plans each dynamic dimension at the upper bound its
range allows (ExecuTorch's default); ``HintBasedSymShapeEvalPass`` at the example input's
size. May import torch.
"""

from __future__ import annotations

from collections.abc import Callable

import sympy
import torch
from torch.fx.passes.infra.pass_base import PassBase, PassResult
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.value_ranges import bound_sympy

from edgetorch.exir.passes.spec_prop import graph_specs
from edgetorch.exir.tensor import SymDim


class ConstraintBasedSymShapeEvalPass(PassBase):
    """Resolve every spec's shape to the upper bound its symbols' value ranges allow."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        resolve_shapes(graph_module, upper_bound)
        return PassResult(graph_module, True)


class HintBasedSymShapeEvalPass(PassBase):
    """Resolve every spec's shape to the sizes of the example inputs (no headroom for other sizes)."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        resolve_shapes(graph_module, lambda d: int(d.node.hint) if isinstance(d, torch.SymInt) else int(d))
        return PassResult(graph_module, True)


def upper_bound(dim: SymDim) -> int:
    """The largest value ``dim`` can take; raises ValueError when it is unbounded."""
    if not isinstance(dim, torch.SymInt):
        return int(dim)
    node = dim.node
    bound = bound_sympy(node.expr, node.shape_env.var_to_range).upper
    if bound in (int_oo, sympy.oo):
        raise ValueError(
            f"dynamic dimension {node.expr} has no upper bound; give it one, e.g. torch.export.Dim('n', max=1024)"
        )
    return int(bound)


def resolve_shapes(gm: torch.fx.GraphModule, evaluate: Callable[[SymDim], int]) -> None:
    """Set ``spec.shape`` from ``spec.sym_shape`` for every spec of ``gm``."""
    for spec in graph_specs(gm):
        spec.shape = tuple(evaluate(d) for d in spec.sym_shape)
