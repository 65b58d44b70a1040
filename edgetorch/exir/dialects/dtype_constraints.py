"""Edge-op dtype constraints: which dtypes an Edge op's tensor arguments and results may have together.

Each constrained op has a list of allowed rows, one dtype per typed argument and per returned
tensor (measured in PyTorch eager by ``scripts/gen_edge_dtypes.py``, kept in ``_dtype_table.py``).
``exir_ops.edge.aten.sigmoid.default._schema.arguments[0].allowed_types`` shows the union over
rows, as in ExecuTorch; ``DtypeConstraint.validate`` is what the Edge verifier checks for every
node. Ops without an entry are unconstrained. May import torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import torch

__all__ = ["DtypeConstraint", "EdgeArgument", "EdgeFunctionSchema", "dtype_constraint", "node_tensor_dtypes"]


class DtypeConstraint:
    """The allowed dtype combinations of one Edge op (ExecuTorch's ``FunctionDtypeConstraint``).

    ``names`` are the typed arguments (tensors; Python scalars, as bool, int32 or float32; dtype
    arguments) then the returned tensors (``__ret_0``, ... when unnamed). Those in ``optional``
    may be absent; rows are then matched on the others.
    """

    def __init__(self, names: Sequence[str], optional: Sequence[str], rows: Sequence[Sequence[torch.dtype | None]]):
        self.names = tuple(names)
        self.optional_io_names = [n for n in self.names if n in set(optional)]
        self.essential_io_names = [n for n in self.names if n not in set(optional)]
        self.rows = [tuple(r) for r in rows]
        self._projections: dict[tuple[int, ...], set[tuple]] = {}

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __getitem__(self, name: str) -> set[torch.dtype]:
        """Every dtype ``name`` may have in some allowed combination (empty if ``name`` is no tensor of the op)."""
        if name not in self.names:
            return set()
        i = self.names.index(name)
        return {row[i] for row in self.rows if row[i] is not None}

    def validate(self, types: Mapping[str, torch.dtype | None]) -> bool:
        """Whether ``types`` (tensor name -> dtype; None for an empty tensor list) is an allowed combination.

        Every essential name must be given, every given name must be one of the op's, and one
        row must match every given dtype. A name no allowed row gives a dtype (an optional tensor the
        measured samples always left out) constrains nothing.
        """
        if any(name not in self.names for name in types):
            return False
        if any(name not in types for name in self.essential_io_names):
            return False
        given = sorted((self.names.index(n), d) for n, d in types.items() if d is not None and self[n])
        positions = tuple(i for i, _ in given)
        projected = self._projections.get(positions)
        if projected is None:  # rows seen through these names only; built once per set of names
            projected = self._projections[positions] = {tuple(row[i] for i in positions) for row in self.rows}
        return tuple(d for _, d in given) in projected


class EdgeArgument:
    """A schema argument or return with the dtypes the Edge op allows it (``allowed_types``); else as torch's."""

    def __init__(self, argument: Any, allowed_types: set[torch.dtype]):
        self.argument = argument
        self.allowed_types = allowed_types

    def __getattr__(self, name: str) -> Any:
        return getattr(self.argument, name)

    def __str__(self) -> str:
        return str(self.argument)

    def __repr__(self) -> str:
        return repr(self.argument)


class EdgeFunctionSchema:
    """An ATen schema whose arguments and returns carry ``allowed_types``; prints as the ATen schema."""

    def __init__(self, schema: torch.FunctionSchema, constraint: DtypeConstraint):
        self._schema = schema
        self.dtype_constraint = constraint
        self.arguments = [EdgeArgument(a, constraint[a.name]) for a in schema.arguments]
        self.returns = [EdgeArgument(r, constraint[_return_name(r, i)]) for i, r in enumerate(schema.returns)]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._schema, name)

    def __str__(self) -> str:
        return str(self._schema)

    def __repr__(self) -> str:
        return repr(self._schema)


def _return_name(ret: Any, index: int) -> str:
    return ret.name or f"__ret_{index}"


@cache
def _table() -> dict[str, str]:
    from edgetorch.exir.dialects._dtype_table import TABLE

    return {line.split(" ", 1)[0]: line for line in TABLE.splitlines() if line}


@cache
def dtype_constraint(op: torch._ops.OpOverload) -> DtypeConstraint | None:
    """The measured constraint of ATen overload ``op``, or None when the table has none."""
    from edgetorch.exir.dialects._dtype_table import DTYPES

    line = _table().get(op.name())
    if line is None:
        return None
    _, names, optional, *rows = line.split()
    dtypes = [getattr(torch, name) for name in DTYPES]
    decoded = [tuple(None if c == "-" else dtypes[ord(c) - ord("a")] for c in row) for row in rows]
    return DtypeConstraint(names.split(","), [] if optional == "-" else optional.split(","), decoded)


def _dtype_of(value: Any) -> tuple[bool, torch.dtype | None]:
    """(is a tensor or tensor list, its dtype) of a graph value; a list gives its first tensor's dtype."""
    if isinstance(value, torch.fx.Node):
        value = value.meta.get("val")
    if isinstance(value, torch.Tensor):
        return True, value.dtype
    if isinstance(value, (list, tuple)):
        if not value:
            return True, None
        found = [_dtype_of(v) for v in value if v is not None]
        if found and all(is_tensor for is_tensor, _ in found):
            return True, found[0][1]
    return False, None


def node_tensor_dtypes(op: torch._ops.OpOverload, node: torch.fx.Node) -> dict[str, torch.dtype | None]:
    """The dtype of each tensor argument and returned tensor of ``node``, a call to ``op``, by schema name."""
    types: dict[str, torch.dtype | None] = {}
    schema = op._schema
    for i, arg in enumerate(schema.arguments):
        if arg.name in node.kwargs:
            value = node.kwargs[arg.name]
        elif not arg.kwarg_only and i < len(node.args):
            value = node.args[i]
        else:
            continue
        is_tensor, dtype = _dtype_of(value)
        if is_tensor and "Tensor" in str(arg.real_type):
            types[arg.name] = dtype
    val = node.meta.get("val")
    results = val if len(schema.returns) > 1 else (val,)
    for i, (ret, value) in enumerate(zip(schema.returns, results)):
        is_tensor, dtype = _dtype_of(value)
        if is_tensor:
            types[_return_name(ret, i)] = dtype
    return types
