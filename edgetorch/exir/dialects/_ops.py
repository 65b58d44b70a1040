"""Edge- and backend-dialect operator objects: ``from edgetorch.exir.dialects._ops import ops as exir_ops``.

``exir_ops.edge.aten.add.Tensor`` is an :class:`EdgeOpOverload` wrapping
``torch.ops.aten.add.Tensor``. Edge-dialect graph nodes use these objects as
their targets; an EdgeOpOverload compares equal to (and hashes like) other
wrappers of the same ATen overload, and calling it calls the ATen op, so
passes can run it on fake or real tensors.

``exir_ops.backend.<ns>.<op>.<overload>`` is a :class:`BackendOpOverload`: a custom op a
backend fuses a pattern of edge ops into, declared with :func:`bind_pattern_to_op` so that
it needs no kernel of its own and decomposes back into the pattern when retraced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.library import Library

from edgetorch.errors import UnsupportedOperatorError


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
    def _overloadpacket(self) -> EdgeOpOverloadPacket:
        """The Edge packet this overload belongs to (``_qualified_op_name`` is ``aten::sin``)."""
        return EdgeOpOverloadPacket(self._op._overloadpacket)

    @property
    def _schema(self) -> Any:
        """The ATen schema; for an op with dtype constraints each argument also has ``allowed_types``."""
        from edgetorch.exir.dialects.dtype_constraints import EdgeFunctionSchema, schema_constraint

        constraint = schema_constraint(self._op)  # registering a constraint later changes it
        if self._edge_schema is None or self._edge_schema.dtype_constraint is not constraint:
            self._edge_schema = EdgeFunctionSchema(self._op._schema, constraint)
        return self._edge_schema

    def to_out_variant(self) -> torch._ops.OpOverload:
        """The out-variant overload (the functional schema plus out arguments); RuntimeError if there is none."""
        from edgetorch.exir.dialects.out_variants import find_out_variant

        found, _ = find_out_variant(self._op)
        if found is None:
            raise RuntimeError(
                f"SchemaKind.out variant of operator {self._op.name()} can't be found. "
                "Define an out overload (..., *, Tensor(a!) out) -> Tensor(a!) for it, or keep it out of the program"
            )
        return found

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


class BackendOpOverload(EdgeOpOverload):
    """A backend op: a custom op standing for a pattern of edge ops (``_equivalent_callable``, the pattern)."""

    def __init__(self, op: torch._ops.OpOverload):
        keys = (
            torch._C.DispatchKey.CompositeExplicitAutograd,
            torch._C.DispatchKey.CompositeImplicitAutograd,
            torch._C.DispatchKey.Meta,
        )
        if not any(op.has_kernel_for_dispatch_key(k) for k in keys):
            raise RuntimeError(
                f"{op.name()} is not a backend op: it has no CompositeExplicitAutograd, CompositeImplicitAutograd "
                "or Meta kernel; declare it with bind_pattern_to_op (or register one of those kernels)"
            )
        super().__init__(op)
        self._equivalent_callable: Callable[..., Any] | None = None

    def __repr__(self) -> str:
        return f"<BackendOpOverload: {self._op.name()}>"


_BACKEND_CACHE: dict[Any, BackendOpOverload] = {}
# Namespaces whose ops exir_ops.backend hands out: ExecuTorch's own, and each library bind_pattern_to_op saw.
BACKEND_NAMESPACES = {"executorch_prim", "quantized_decomposed"}


def backend_op(op: torch._ops.OpOverload) -> BackendOpOverload:
    """The one BackendOpOverload for ``op`` (created on first use)."""
    found = _BACKEND_CACHE.get(op)
    if found is None:
        found = _BACKEND_CACHE[op] = BackendOpOverload(op)
    return found


def bind_pattern_to_op(library: Library, schema_or_name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a pattern function to make it the backend op ``schema_or_name`` of ``library``'s namespace.

    A full schema (``"add_relu(Tensor self, Tensor other) -> Tensor"``) is defined first; a bare name
    (``"add_relu"`` or ``"add_relu.out"``) refers to an op already defined. Unless the op already has a
    CompositeExplicitAutograd, CompositeImplicitAutograd or Meta kernel, the pattern becomes its
    CompositeImplicitAutograd kernel: no kernel has to be written, and retracing decomposes the op back
    into the pattern. The op is then ``exir_ops.backend.<ns>.<op>.<overload>``.
    """

    def bind(pattern: Callable[..., Any]) -> Callable[..., Any]:
        BACKEND_NAMESPACES.add(library.ns)
        text = schema_or_name.split("::")[-1]
        if "(" in text:
            library.define(text)
            text = text.split("(", 1)[0]
        name, _, overload = text.partition(".")
        op = getattr(getattr(getattr(torch.ops, library.ns), name), overload or "default")
        keys = (
            torch._C.DispatchKey.CompositeExplicitAutograd,
            torch._C.DispatchKey.CompositeImplicitAutograd,
            torch._C.DispatchKey.Meta,
        )
        if not any(op.has_kernel_for_dispatch_key(k) for k in keys):
            library.impl(text, pattern, "CompositeImplicitAutograd")
        backend_op(op)._equivalent_callable = pattern
        return pattern

    return bind


class EdgeOpOverloadPacket:
    """``exir_ops.<dialect>.<ns>.<op>``: its attributes are the op's overloads in that dialect."""

    def __init__(self, packet: Any, wrap: Callable[[torch._ops.OpOverload], EdgeOpOverload] = edge_op):
        self._packet = packet
        self._wrap = wrap

    def __getattr__(self, overload: str) -> EdgeOpOverload:
        if overload.startswith("__"):
            raise AttributeError(overload)
        return self._wrap(getattr(self._packet, overload))

    @property
    def _qualified_op_name(self) -> str:
        """``namespace::name``, as torch's packets have it."""
        return self._packet._qualified_op_name

    def __repr__(self) -> str:
        return f"<EdgeOpOverloadPacket: {self._qualified_op_name}>"


class BackendOpOverloadPacket(EdgeOpOverloadPacket):
    """``exir_ops.backend.<ns>.<op>``: its attributes are BackendOpOverloads."""

    def __init__(self, packet: Any):
        super().__init__(packet, backend_op)


class _Namespace:
    def __init__(self, ns: str, packet: type[EdgeOpOverloadPacket]):
        self._ns = ns
        self._packet = packet

    def __getattr__(self, name: str) -> EdgeOpOverloadPacket:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._packet(getattr(getattr(torch.ops, self._ns), name))


class _DialectNamespace:
    """``exir_ops.edge`` / ``exir_ops.backend``: its attributes are op namespaces (``aten``, ``quantized_decomposed``)."""

    def __init__(self, packet: type[EdgeOpOverloadPacket], namespaces: set[str] | None = None):
        self._packet = packet
        self._namespaces = namespaces

    def __getattr__(self, ns: str) -> _Namespace:
        if ns.startswith("__"):
            raise AttributeError(ns)
        if self._namespaces is not None and ns not in self._namespaces:
            raise UnsupportedOperatorError(
                f"{ns!r} op library does not belong to backend ops: expected one of {sorted(self._namespaces)}; "
                "declare its ops with bind_pattern_to_op(library, schema) first"
            )
        return _Namespace(ns, self._packet)


class _Ops:
    """``exir_ops``: the dialects (iterating gives their names)."""

    edge = _DialectNamespace(EdgeOpOverloadPacket)
    backend = _DialectNamespace(BackendOpOverloadPacket, BACKEND_NAMESPACES)

    def __iter__(self) -> Any:
        return iter(("edge", "backend"))


exir_ops = _Ops()
ops = exir_ops  # the name ExecuTorch's docs import
