"""Symbolic shape evaluation: give every TensorSpec a concrete (planned) shape.

``ConstraintBasedSymShapeEvalPass`` plans each dynamic dimension at the upper bound its
range allows (ExecuTorch's default); ``HintBasedSymShapeEvalPass`` at the example input's
size. May import torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import sympy
import torch
from torch.fx.passes.infra.pass_base import PassBase, PassResult
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

from edgetorch.exir.passes.spec_prop import graph_specs
from edgetorch.exir.tensor import SymDim


class ConstraintBasedSymShapeEvalPass(PassBase):
    """Resolve every spec's shape to the upper bound its symbols' value ranges allow."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        bound_data_dependent_lengths(graph_module)
        resolve_shapes(graph_module, upper_bound)
        return PassResult(graph_module, True)


class HintBasedSymShapeEvalPass(PassBase):
    """Resolve every spec's shape to the sizes of the example inputs (no headroom for other sizes)."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        resolve_shapes(graph_module, lambda d: int(d.node.hint) if isinstance(d, torch.SymInt) else int(d))
        return PassResult(graph_module, True)


def bound_data_dependent_lengths(gm: torch.fx.GraphModule) -> None:
    """Give the unbacked output length of a masked_select its bound, the broadcast input's numel.

    torch's shape function leaves it unbounded (int64's maximum), which no plan can hold; with the bound the
    plan holds the largest possible result.
    """
    for node in gm.graph.nodes:
        op = getattr(node.target, "_op", node.target)
        out = node.meta.get("val")
        if op is not torch.ops.aten.masked_select.default or not isinstance(out, torch.Tensor):
            continue
        sym = out.shape[0].node if isinstance(out.shape[0], torch.SymInt) else None
        if sym is None or not isinstance(sym.expr, sympy.Symbol) or sym.expr not in sym.shape_env.var_to_range:
            continue
        try:
            shapes = [tuple(upper_bound(d) for d in a.meta["val"].shape) for a in node.args[:2]]
        except ValueError:
            continue  # an input without an upper bound: the planner reports it
        bound = math.prod(torch.broadcast_shapes(*shapes))
        old = sym.shape_env.var_to_range[sym.expr]
        if bound < old.upper:
            sym.shape_env.var_to_range[sym.expr] = ValueRanges(old.lower, bound)


# A dimension bound this large (torch's stand-in for "no bound" on data-dependent sizes) cannot be planned.
UNPLANNABLE = 2**40


def upper_bound(dim: SymDim) -> int:
    """The largest value ``dim`` can take; raises ValueError when it is unbounded."""
    if not isinstance(dim, torch.SymInt):
        return int(dim)
    node = dim.node
    bound = bound_sympy(node.expr, node.shape_env.var_to_range).upper
    if bound in (int_oo, sympy.oo) or bound >= UNPLANNABLE:
        raise ValueError(
            f"dynamic dimension {node.expr} has no usable upper bound (found {bound}); give it one, e.g. "
            "torch.export.Dim('n', max=1024), or torch._check(n <= N) on a data-dependent length"
        )
    return int(bound)


def resolve_shapes(gm: torch.fx.GraphModule, evaluate: Callable[[SymDim], int]) -> None:
    """Set ``spec.shape`` from ``spec.sym_shape`` for every spec of ``gm``."""
    for spec in graph_specs(gm):
        spec.shape = tuple(evaluate(d) for d in spec.sym_shape)
