"""What every XNNPACK node visitor shares: the registry of visitors by Edge op, and shape helpers.

A visitor is a function ``(builder, node) -> None`` that writes the XNNPACK nodes one Edge node becomes,
through the :class:`~edgetorch.backends.xnnpack.serialize.XnnpackGraphBuilder` it is given. The modules
beside this one register theirs with :func:`visits`. May import torch and edgetorch.exir.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from edgetorch.errors import EdgetorchError
from edgetorch.exir.dialects.dim_order_ops import ensure_registered
from edgetorch.exir.passes.sym_shape_eval_pass import upper_bound

if TYPE_CHECKING:
    from edgetorch.backends.xnnpack.serialize import XnnpackGraphBuilder

ensure_registered()  # visitors name dim_order_ops at import
aten = torch.ops.aten
Node = torch.fx.Node
Visitor = Callable[["XnnpackGraphBuilder", Node], None]
VISITORS: dict[Any, Visitor] = {}
"""ATen op -> the visitor that writes its XNNPACK nodes; the partitioner delegates exactly these ops."""
TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)


class XnnpackLoweringError(EdgetorchError, RuntimeError):
    """A node handed to the XNNPACK backend cannot be expressed in an XNNPACK graph."""


def visits(*ops: Any) -> Callable[[Visitor], Visitor]:
    def register(fn: Visitor) -> Visitor:
        for op in ops:
            VISITORS[op] = fn
        return fn

    return register


def dims_of(node: Node) -> list[int]:
    """The node's shape at its upper bound; a 0-d tensor is [1] in XNNPACK."""
    return [upper_bound(d) for d in node.meta["val"].shape] or [1]


def is_dynamic(node: Node) -> bool:
    return any(isinstance(d, torch.SymInt) for d in node.meta["val"].shape)


def permuted(dims: Sequence[int], perm: Sequence[int]) -> list[int]:
    return [dims[p] for p in perm]


def reshape_target(node: Node) -> list[int]:
    """``node``'s output shape for XNNStaticReshape: static sizes, and 0 for the (one) dynamic one."""
    shape = [0 if isinstance(d, torch.SymInt) else int(d) for d in node.meta["val"].shape]
    if shape.count(0) > 1 and is_dynamic(node):
        raise XnnpackLoweringError(f"{node.name} reshapes to {shape}: XNNPACK infers at most one dynamic dimension")
    return shape


def result_node(node: Node) -> Node:
    """The node holding the tensor a visitor produces: a multi-output op's ``getitem(op, 0)`` user, else itself."""
    if not isinstance(node.meta["val"], list | tuple):
        return node
    return next(u for u in node.users if u.target is operator.getitem and u.args[1] == 0)


def pair(value: Any) -> list[int]:
    values = list(value) if isinstance(value, list | tuple) else [value]
    return values * 2 if len(values) == 1 else values
