"""Evaluating symbolic sizes (``torch.SymInt``): their example value, their upper bound, their free symbols.

Plain ints pass through unchanged, so callers can hand over any shape. May import torch.
"""

from __future__ import annotations

from collections.abc import Iterable

import sympy
import torch
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from edgetorch.exir.passes.sym_shape_eval_pass import upper_bound

__all__ = ["collect_free_symbols", "eval_expr", "eval_shape", "eval_shape_upper_bound", "eval_upper_bound"]


def eval_expr(symint: int | torch.SymInt) -> int | None:
    """The value ``symint`` takes on the example inputs; None for a data-dependent size with no hint."""
    if not isinstance(symint, torch.SymInt):
        return int(symint)
    node = symint.node
    try:
        return int(node.shape_env.size_hint(node.expr))
    except GuardOnDataDependentSymNode:
        return None


def eval_upper_bound(maybe_symint: int | torch.SymInt) -> int:
    """The largest value ``maybe_symint`` can take; ValueError when its range has no finite bound."""
    return upper_bound(maybe_symint)


def eval_shape(shape: Iterable[int | torch.SymInt]) -> list[int | None]:
    """:func:`eval_expr` of each dimension (None where a data-dependent size has no hint)."""
    return [eval_expr(d) for d in shape]


def eval_shape_upper_bound(shape: Iterable[int | torch.SymInt]) -> list[int]:
    """:func:`eval_upper_bound` of each dimension."""
    return [eval_upper_bound(d) for d in shape]


def collect_free_symbols(shape: Iterable[int | torch.SymInt]) -> set[sympy.Symbol]:
    """The symbols the dimensions of ``shape`` depend on."""
    return {s for d in shape if isinstance(d, torch.SymInt) for s in d.node.expr.free_symbols}
