"""Edge-dialect operator objects: ``from edgetorch.exir.dialects._ops import ops as exir_ops``.

``exir_ops.edge.aten.add.Tensor`` is an :class:`EdgeOpOverload` wrapping
``torch.ops.aten.add.Tensor``. Edge-dialect graph nodes use these objects as
their targets; an EdgeOpOverload compares equal to (and hashes like) other
wrappers of the same ATen overload, and calling it calls the ATen op, so
passes can run it on fake or real tensors.
"""

from __future__ import annotations

from typing import Any

import torch


class EdgeOpOverload:
    """An ATen (or custom) OpOverload as it appears in the Edge dialect."""

    def __init__(self, op: torch._ops.OpOverload):
        self._op = op
        self._edge_schema: Any = None
        # Printed graphs show edge targets as edgetorch_exir_dialects_edge__ops_aten_add_Tensor.
        self.__name__ = self.__qualname__ = f"{op.namespace}.{op.__name__}"
        self.__module__ = "edgetorch.exir.dialects.edge._ops"
        self.namespace = op.namespace

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._op(*args, **kwargs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EdgeOpOverload) and other._op is self._op

    def __hash__(self) -> int:
        return hash(("edge", self._op))

    def __deepcopy__(self, memo: dict) -> EdgeOpOverload:
        return self

    def __reduce__(self) -> tuple:
        return (edge_op, (self._op,))

    @property
    def _schema(self) -> Any:
        """The ATen schema; for an op with dtype constraints each argument also has ``allowed_types``."""
        if self._edge_schema is None:
            from edgetorch.exir.dialects.dtype_constraints import EdgeFunctionSchema, dtype_constraint

            constraint = dtype_constraint(self._op)
            self._edge_schema = (
                self._op._schema if constraint is None else EdgeFunctionSchema(self._op._schema, constraint)
            )
        return self._edge_schema

    def name(self) -> str:
        return self._op.name()

    @property
    def overloadpacket(self) -> Any:
        return self._op.overloadpacket

    @property
    def tags(self) -> Any:
        return self._op.tags

    def __repr__(self) -> str:
        return f"<EdgeOpOverload: {self._op.name()}>"

    def __str__(self) -> str:
        return f"{self._op.namespace}.{self._op._opname}.{self._op._overloadname}"


_CACHE: dict[Any, EdgeOpOverload] = {}


def edge_op(op: torch._ops.OpOverload) -> EdgeOpOverload:
    """The one EdgeOpOverload for ``op`` (created on first use)."""
    found = _CACHE.get(op)
    if found is None:
        found = _CACHE[op] = EdgeOpOverload(op)
    return found


def to_aten(target: Any) -> Any:
    """The underlying torch OpOverload of an edge op; other targets pass through."""
    return target._op if isinstance(target, EdgeOpOverload) else target


class _Packet:
    def __init__(self, packet: Any):
        self._packet = packet

    def __getattr__(self, overload: str) -> EdgeOpOverload:
        return edge_op(getattr(self._packet, overload))


class _Namespace:
    def __init__(self, ns: str):
        self._ns = ns

    def __getattr__(self, name: str) -> _Packet:
        return _Packet(getattr(getattr(torch.ops, self._ns), name))


class _Dialect:
    def __getattr__(self, ns: str) -> _Namespace:
        return _Namespace(ns)


class _ExirOps:
    edge = _Dialect()


exir_ops = _ExirOps()
ops = exir_ops  # the name ExecuTorch's docs import
