"""Between the two ways of naming a layout: ``MemoryFormatOpsPass`` turns the edge ops that take a
``torch.memory_format`` (``_to_copy``, ``clone``, ``empty.memory_format``) into the ``dim_order_ops`` ops that
take a dim order, and ``DimOrderOpsRevertPass`` turns them back."""

from __future__ import annotations

import functools
import logging
from typing import Any

import torch

from edgetorch.exir.dialects import EdgeOpOverload
from edgetorch.exir.dialects._ops import ops as exir_ops
from edgetorch.exir.dialects.dim_order_ops import ensure_registered
from edgetorch.exir.dim_order_utils import get_dim_order, get_memory_format
from edgetorch.exir.pass_base import ExportPass, NodeMetadata, ProxyValue

logger = logging.getLogger(__name__)


@functools.cache
def memory_format_to_dim_order_ops() -> dict[Any, Any]:
    """Each edge op that takes a memory format -> its dim-order twin."""
    ensure_registered()
    aten, dim = exir_ops.edge.aten, exir_ops.edge.dim_order_ops
    return {
        aten._to_copy.default: dim._to_dim_order_copy.default,
        aten.clone.default: dim._clone_dim_order.default,
        aten.empty.memory_format: dim._empty_dim_order.default,
    }


@functools.cache
def dim_order_to_memory_format_ops() -> dict[Any, Any]:
    return {v: k for k, v in memory_format_to_dim_order_ops().items()}


def _rank_and_example(first: Any) -> tuple[int, torch.Tensor | None]:
    if isinstance(first, ProxyValue) and first.is_tensor():
        t = first.to_tensor()
        return t.dim(), t
    if isinstance(first, torch.Tensor):
        return first.dim(), first
    if isinstance(first, (list, tuple)):  # a size list (empty)
        return len(first), None
    raise TypeError(f"expected a tensor or a size list as the first argument, found {type(first).__name__}")


class MemoryFormatOpsPass(ExportPass):
    """Replaces memory-format edge ops with dim-order ops (``memory_format`` -> ``dim_order`` keyword)."""

    def call_operator(self, op: Any, args: tuple, kwargs: dict, meta: NodeMetadata) -> ProxyValue:
        twin = memory_format_to_dim_order_ops().get(op) if isinstance(op, EdgeOpOverload) else None
        if twin is None:
            return super().call_operator(op, args, kwargs, meta)
        kwargs = dict(kwargs)
        fmt = kwargs.pop("memory_format", torch.preserve_format)
        rank, example = _rank_and_example(args[0])
        if fmt in (None, torch.preserve_format):  # keep the input's layout (contiguous without one)
            order = [int(d) for d in example.dim_order()] if example is not None else list(range(rank))
        else:
            order = get_dim_order(fmt, rank)
        kwargs["dim_order"] = order
        logger.debug("%s: memory format %s -> dim order %s", op, fmt, order)
        return super().call_operator(twin, args, kwargs, meta)


class DimOrderOpsRevertPass(ExportPass):
    """Replaces dim-order ops with their memory-format edge ops (``dim_order`` -> ``memory_format`` keyword)."""

    def call_operator(self, op: Any, args: tuple, kwargs: dict, meta: NodeMetadata) -> ProxyValue:
        twin = dim_order_to_memory_format_ops().get(op) if isinstance(op, EdgeOpOverload) else None
        if twin is None:
            return super().call_operator(op, args, kwargs, meta)
        kwargs = dict(kwargs)
        rank, _ = _rank_and_example(args[0])
        order = kwargs.pop("dim_order", None) or list(range(rank))
        kwargs["memory_format"] = get_memory_format(order)
        return super().call_operator(twin, args, kwargs, meta)
