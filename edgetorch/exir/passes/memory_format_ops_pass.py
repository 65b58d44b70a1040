"""Between the two ways of naming a layout: ``MemoryFormatOpsPass`` turns the edge ops that take a
``torch.memory_format`` (``_to_copy``, ``clone``, ``empty.memory_format``) into the ``dim_order_ops`` ops that
take a dim order, as ``to_edge`` does (the same table and rule, :mod:`edgetorch.exir.passes.to_edge`), and
``DimOrderOpsRevertPass`` turns them back."""

from __future__ import annotations

import functools
from typing import Any

from edgetorch.exir.dialects import EdgeOpOverload
from edgetorch.exir.dialects._ops import edge_op, to_aten
from edgetorch.exir.dim_order_utils import get_memory_format
from edgetorch.exir.pass_base import ExportPass, NodeMetadata, ProxyValue
from edgetorch.exir.passes.to_edge import ToEdgePass, dim_order_forms


class MemoryFormatOpsPass(ExportPass):
    """Replaces memory-format edge ops with dim-order ops (``memory_format`` -> ``dim_order`` keyword)."""

    def call_operator(self, op: Any, args: tuple, kwargs: dict, meta: NodeMetadata) -> ProxyValue:
        if isinstance(op, EdgeOpOverload) and to_aten(op) in dim_order_forms():
            twin, kwargs = ToEdgePass._to_dim_order(to_aten(op), args, kwargs)
            op = edge_op(twin)
        return super().call_operator(op, args, kwargs, meta)


@functools.cache
def memory_format_forms() -> dict[Any, Any]:
    """The dim-order ops -> the ops taking a memory format (``dim_order_forms`` inverted)."""
    return {v: k for k, v in dim_order_forms().items()}


class DimOrderOpsRevertPass(ExportPass):
    """Replaces dim-order ops with their memory-format edge ops (``dim_order`` -> ``memory_format`` keyword)."""

    def call_operator(self, op: Any, args: tuple, kwargs: dict, meta: NodeMetadata) -> ProxyValue:
        back = memory_format_forms().get(to_aten(op))
        if isinstance(op, EdgeOpOverload) and back is not None:
            kwargs = dict(kwargs)
            order = kwargs.pop("dim_order", None)
            first = args[0].data if isinstance(args[0], ProxyValue) else args[0]
            rank = first.dim() if hasattr(first, "dim") else len(first)
            kwargs["memory_format"] = get_memory_format(order or list(range(rank)))
            op = edge_op(back)
        return super().call_operator(op, args, kwargs, meta)
