"""Edge-op dtype constraints: which dtypes an Edge op's tensor arguments and results may have together.

Each constrained op has a list of allowed rows, one dtype per typed argument and per returned
tensor (measured in PyTorch eager by ``scripts/gen_edge_dtypes.py``, kept in ``_dtype_table.py``).
``exir_ops.edge.aten.sigmoid.default._schema.arguments[0].allowed_types`` shows the union over
rows, as in ExecuTorch; ``DtypeConstraint.validate`` is what the Edge verifier checks for every
node. Ops without an entry are unconstrained.

A constraint can also be registered in the entry format of ExecuTorch's ``edge.yaml``
(``_edge_dialect_info["ns::op.overload"] = {"type_alias": {"T0": ["Float", ...]}, "type_constraint":
[{"self": "T0", "__ret_0": "T0"}, ...]}``); a registered entry takes precedence over the measured
table, for the schema shown and for the verifier. May import torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import torch

__all__ = [
    "AllowedDtypeSet",
    "DtypeConstraint",
    "EdgeArgument",
    "EdgeFunctionSchema",
    "FunctionDtypeConstraint",
    "dtype_constraint",
    "call_tensor_dtypes",
    "node_tensor_dtypes",
    "schema_constraint",
]

DTYPE_NAMES: dict[str, torch.dtype] = {
    "Bool": torch.bool,
    "Byte": torch.uint8,
    "Char": torch.int8,
    "Short": torch.int16,
    "Int": torch.int32,
    "Long": torch.int64,
    "Half": torch.float16,
    "BFloat16": torch.bfloat16,
    "Float": torch.float32,
    "Double": torch.float64,
    "UInt16": torch.uint16,
    "ComplexFloat": torch.complex64,
    "ComplexDouble": torch.complex128,
}
"""The dtype names of ``edge.yaml`` entries (ExecuTorch's scalar type names)."""

_edge_dialect_info: dict[str, dict[str, Any]] = {}
"""Registered constraints, ``"ns::op.overload"`` -> an ``edge.yaml`` entry (see the module docstring)."""


class AllowedDtypeSet:
    """The dtypes a type alias (``T0``) allows; ``reduce_to`` binds it to one of them until ``clear``."""

    def __init__(self, types: set[torch.dtype]):
        self.types = set(types)
        self._bound: torch.dtype | None = None

    def reduce_to(self, dtype: torch.dtype) -> bool:
        """Bind the alias to ``dtype`` if it allows it (and is unbound or bound to it); False otherwise."""
        if dtype not in self:
            return False
        self._bound = dtype
        return True

    def clear(self) -> None:
        self._bound = None

    def __contains__(self, dtype: object) -> bool:
        return dtype == self._bound if self._bound is not None else dtype in self.types

    def __repr__(self) -> str:
        return f"AllowedDtypeSet({sorted(map(str, self.types))}, bound={self._bound})"


class FunctionDtypeConstraint:
    """A constraint in ``edge.yaml``'s form: type aliases, and rows naming an alias per tensor input and output.

    A combination is allowed when one row can bind each alias to a single dtype it allows, consistently
    over every named tensor (None, an empty tensor list, binds nothing).
    """

    def __init__(
        self,
        essential_tensor_io_names: Sequence[str],
        optional_tensor_io_names: Sequence[str],
        type_alias: Mapping[str, Sequence[torch.dtype]],
        type_constraint: Sequence[Mapping[str, str]],
    ):
        self.essential_tensor_io_names = list(essential_tensor_io_names)
        self.optional_tensor_io_names = list(optional_tensor_io_names)
        self.type_alias = {alias: AllowedDtypeSet(set(types)) for alias, types in type_alias.items()}
        self.type_constraint = [dict(row) for row in type_constraint]
        if not self.type_constraint:
            raise ValueError("expected at least one type_constraint row, found none")
        names = set(self.essential_tensor_io_names) | set(self.optional_tensor_io_names)
        for row in self.type_constraint:
            if not names <= set(row):
                raise ValueError(
                    f"expected every type_constraint row to name each tensor argument and return {sorted(names)}, "
                    f"found a row naming {sorted(row)}; add the missing names"
                )
            unknown = set(row.values()) - set(self.type_alias)
            if unknown:
                raise ValueError(f"type_constraint names aliases {sorted(unknown)} that type_alias does not define")

    def __contains__(self, name: object) -> bool:
        return name in self.type_constraint[0]

    def __getitem__(self, name: str) -> set[torch.dtype]:
        """Every dtype ``name`` may have in some row (empty if ``name`` is no tensor of the op)."""
        if name not in self:
            return set()
        return set().union(*(self.type_alias[row[name]].types for row in self.type_constraint))

    def validate(self, types: Mapping[str, torch.dtype | None]) -> bool:
        if any(name not in self for name in types):
            return False
        if any(name not in types for name in self.essential_tensor_io_names):
            return False
        for row in self.type_constraint:
            try:
                if all(d is None or self.type_alias[row[n]].reduce_to(d) for n, d in types.items()):
                    return True
            finally:
                for alias in self.type_alias.values():
                    alias.clear()
        return False


def _tensor_io_names(schema: torch.FunctionSchema) -> tuple[list[str], list[str], list[str]]:
    """(essential, optional, all) tensor input and output names; outputs are essential (``__ret_<i>`` if unnamed)."""
    kinds = {"Tensor": "essential", "List[Tensor]": "essential", "Optional[Tensor]": "optional"}
    essential = [a.name for a in schema.arguments if kinds.get(str(a.type)) == "essential"]
    optional = [a.name for a in schema.arguments if kinds.get(str(a.type)) == "optional"]
    every = [a.name for a in schema.arguments if str(a.type) in kinds]
    returns = [r for r in schema.returns if str(r.type) in kinds]
    returned = [r.name or f"__ret_{i}" for i, r in enumerate(returns)]
    return essential + returned, optional, every + returned


def _from_entry(schema: torch.FunctionSchema, entry: Mapping[str, Any]) -> FunctionDtypeConstraint:
    try:
        aliases = {alias: [DTYPE_NAMES[t] for t in names] for alias, names in entry["type_alias"].items()}
        rows = entry["type_constraint"]
    except KeyError as e:
        raise ValueError(
            f"registered dtype constraint of {schema.name}: expected type_alias and type_constraint with dtype names "
            f"among {sorted(DTYPE_NAMES)}, found no {e}; fix the _edge_dialect_info entry"
        ) from None
    essential, optional, _ = _tensor_io_names(schema)
    return FunctionDtypeConstraint(essential, optional, aliases, rows)


def _any_dtype(schema: torch.FunctionSchema) -> FunctionDtypeConstraint:
    """The constraint of an op nothing constrains: each tensor any ExecuTorch dtype, essential ones required."""
    essential, optional, every = _tensor_io_names(schema)
    aliases = {f"T{i}": list(DTYPE_NAMES.values()) for i in range(len(every))}
    return FunctionDtypeConstraint(essential, optional, aliases, [{n: f"T{i}" for i, n in enumerate(every)}])


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


def dtype_constraint(op: torch._ops.OpOverload) -> DtypeConstraint | FunctionDtypeConstraint | None:
    """The constraint of overload ``op``: registered, else measured, else None (unconstrained)."""
    entry = _edge_dialect_info.get(op.name())
    if entry is not None:
        return _registered(op, id(entry))
    return _measured(op)


def schema_constraint(op: torch._ops.OpOverload) -> DtypeConstraint | FunctionDtypeConstraint:
    """:func:`dtype_constraint`, or for an unconstrained op one allowing any ExecuTorch dtype per tensor."""
    found = dtype_constraint(op)
    return found if found is not None else _unconstrained(op)


@cache
def _unconstrained(op: torch._ops.OpOverload) -> DtypeConstraint | FunctionDtypeConstraint:
    try:
        return _any_dtype(op._schema)
    except ValueError:  # no tensor at all: nothing to constrain
        return DtypeConstraint((), (), [()])


def _registered(op: torch._ops.OpOverload, entry_id: int) -> FunctionDtypeConstraint:
    cached = _REGISTERED.get(op)
    if cached is None or cached[0] != entry_id:
        cached = _REGISTERED[op] = (entry_id, _from_entry(op._schema, _edge_dialect_info[op.name()]))
    return cached[1]


_REGISTERED: dict[Any, tuple[int, FunctionDtypeConstraint]] = {}


@cache
def _measured(op: torch._ops.OpOverload) -> DtypeConstraint | None:
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
    return call_tensor_dtypes(op, node.args, node.kwargs, node.meta.get("val"))


def call_tensor_dtypes(op: torch._ops.OpOverload, args: Sequence, kwargs: Mapping, result: Any) -> dict:
    """The dtype of each tensor argument and returned tensor of a call to ``op`` (values or graph nodes)."""
    types: dict[str, torch.dtype | None] = {}
    schema = op._schema
    for i, arg in enumerate(schema.arguments):
        if arg.name in kwargs:
            value = kwargs[arg.name]
        elif not arg.kwarg_only and i < len(args):
            value = args[i]
        else:
            continue
        is_tensor, dtype = _dtype_of(value)
        if is_tensor and "Tensor" in str(arg.real_type):
            types[arg.name] = dtype
    val = result
    results = val if len(schema.returns) > 1 else (val,)
    for i, (ret, value) in enumerate(zip(schema.returns, results)):
        is_tensor, dtype = _dtype_of(value)
        if is_tensor:
            types[_return_name(ret, i)] = dtype
    return types
