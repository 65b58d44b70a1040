"""ATen (Core ATen, after decomposition) -> Edge dialect, in one re-trace.

Each op of the decomposed graph is rewritten so that the result uses only ops
ExecuTorch's portable kernel library has, in the form ExecuTorch's own
``to_edge`` emits:

* aliasing view ops become their ``*_copy`` variants (``view`` -> ``view_copy``);
* Python scalars passed where the schema wants a Tensor become tensor constants;
* ``add``/``sub``/``mul``/``div``/``minimum`` on mixed dtypes get explicit casts;
* no-op casts and full-range slices disappear;
* ``_to_copy`` / ``clone`` / ``empty.memory_format`` become ``dim_order_ops`` ops;
* every remaining operator target is wrapped as an ``EdgeOpOverload``.

May import torch and edgetorch.exir.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from edgetorch.exir.dialects import EdgeOpOverload, edge_op, to_aten
from edgetorch.exir.dialects.dim_order_ops import dim_order_of, ensure_registered
from edgetorch.exir.pass_base import ExportPass, NodeMetadata, ProxyValue, map_args
from edgetorch.exir.passes.scalar_to_tensor_pass import scalar_to_tensor

aten = torch.ops.aten

# Ops that stay plain torch ops in the Edge dialect: symbolic-size and assertion
# ops (no tensor kernel) and scalar_tensor, as ExecuTorch leaves them.
NOT_EDGE_OPS = frozenset(
    {
        aten.sym_size.int,
        aten.sym_stride.int,
        aten.sym_numel.default,
        aten.sym_storage_offset.default,
        aten._local_scalar_dense.default,
        aten.sym_constrain_range.default,
        aten.sym_constrain_range_for_size.default,
        aten._assert_scalar.default,
        aten._assert_async.msg,
        aten.scalar_tensor.default,
    }
)

_PROMOTION = {
    aten.add.Tensor: ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT,
    aten.sub.Tensor: ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT,
    aten.mul.Tensor: ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT,
    aten.minimum.default: ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT,
    aten.div.Tensor: ELEMENTWISE_TYPE_PROMOTION_KIND.INT_TO_FLOAT,
    aten.div.Tensor_mode: ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT,
}


def view_copy_of(op: torch._ops.OpOverload) -> torch._ops.OpOverload:
    """The functional ``*_copy`` twin of an aliasing ATen view op (``op`` itself otherwise)."""
    if op is aten._unsafe_view.default:
        return aten.view_copy.default
    schema = op._schema
    first = schema.arguments[0].alias_info if schema.arguments else None
    if op.namespace != "aten" or first is None or first.is_write:
        return op
    packet = getattr(aten, op._opname + "_copy", None)
    overload = getattr(packet, op._overloadname, None) if packet is not None else None
    if overload is None:
        raise NotImplementedError(f"view op {op} has no *_copy variant; ExecuTorch graphs cannot hold aliasing views.")
    return overload


def _value(x: Any) -> Any:
    return x.data if isinstance(x, ProxyValue) else x


def is_noop(op: torch._ops.OpOverload, source: Any, result: Any) -> bool:
    """Whether ``op`` hands back its input unchanged, from the fake values of its input and its result: a
    ``_to_copy`` that keeps dtype, device, shape and strides, a slice of static shapes that keeps every element,
    a ``to`` whose result is its input."""
    if not (isinstance(result, torch.Tensor) and isinstance(source, torch.Tensor)):
        return False
    if op is aten.to.dtype:
        return source is result
    if op is aten._to_copy.default:
        return (source.dtype, source.device, source.shape, source.stride()) == (
            result.dtype,
            result.device,
            result.shape,
            result.stride(),
        )
    if op in (aten.slice.Tensor, aten.slice_copy.Tensor):
        static = all(isinstance(d, int) for d in (*source.shape, *result.shape))
        return static and source.shape == result.shape
    return False


def promoted_dtype(op: Any, args: tuple, kwargs: dict) -> torch.dtype | None:
    """The dtype binary arithmetic ``op`` computes in when its tensor operands' dtypes differ (PyTorch's
    elementwise promotion; true division promotes ints to float), else None."""
    kind = _PROMOTION.get(op)
    if kind is None:
        return None
    if op is aten.div.Tensor_mode and kwargs.get("rounding_mode") is None:
        kind = ELEMENTWISE_TYPE_PROMOTION_KIND.INT_TO_FLOAT
    tensors = [_value(a) for a in args if isinstance(_value(a), torch.Tensor)]
    if len({t.dtype for t in tensors}) <= 1:
        return None
    return elementwise_dtypes(*tensors, type_promotion_kind=kind)[1]


class ToEdgePass(ExportPass):
    """Rewrite a decomposed Core ATen graph into the Edge dialect (see module docstring)."""

    def __init__(self, skip_dim_order: bool = False) -> None:
        super().__init__()
        ensure_registered()
        self.skip_dim_order = skip_dim_order

    def call_operator(self, op: Any, args: tuple, kwargs: dict, meta: NodeMetadata) -> ProxyValue:
        op = to_aten(op)
        if not isinstance(op, torch._ops.OpOverload) or op in NOT_EDGE_OPS:
            return super().call_operator(op, args, kwargs, meta)
        if self._is_noop(op, args, meta):
            return args[0]
        return self._lower(op, args, kwargs, meta)

    def _lower(self, op: torch._ops.OpOverload, args: tuple, kwargs: dict, meta: NodeMetadata) -> ProxyValue:
        op = view_copy_of(op)
        args, kwargs = map_args(op, scalar_to_tensor, args, kwargs)
        if op in _PROMOTION:
            args = self._promote(op, args, kwargs, meta)
        if not self.skip_dim_order:
            op, kwargs = self._to_dim_order(op, args, kwargs)
        return super().call_operator(edge_op(op), args, kwargs, meta)

    @staticmethod
    def _is_noop(op: torch._ops.OpOverload, args: tuple, meta: NodeMetadata) -> bool:
        return is_noop(op, _value(args[0]) if args else None, meta.data.get("val"))

    def _promote(self, op: torch._ops.OpOverload, args: tuple, kwargs: dict, meta: NodeMetadata) -> tuple:
        dtype = promoted_dtype(op, args, kwargs)
        if dtype is None:
            return args

        def cast(value: Any, arg: torch.Argument) -> Any:
            data = _value(value)
            if isinstance(arg.type, torch.TensorType) and isinstance(data, torch.Tensor) and data.dtype != dtype:
                return self._lower(aten._to_copy.default, (value,), {"dtype": dtype}, meta)
            return value

        return map_args(op, cast, args, {})[0]

    @staticmethod
    def _to_dim_order(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> tuple[Any, dict]:
        replacement = dim_order_forms().get(op)
        if replacement is None:
            return op, kwargs
        kwargs = dict(kwargs)
        fmt = kwargs.pop("memory_format", None)
        source = _value(args[0])
        if isinstance(source, torch.Tensor):
            rank = source.dim()
        else:
            rank = len(source)
        if fmt in (None, torch.preserve_format) and isinstance(source, torch.Tensor):
            kwargs["dim_order"] = [int(d) for d in source.dim_order()]
        else:
            kwargs["dim_order"] = dim_order_of(fmt or torch.contiguous_format, rank)
        return replacement, kwargs


@cache
def dim_order_forms() -> dict[torch._ops.OpOverload, torch._ops.OpOverload]:
    """The ops taking a ``memory_format`` -> their ``dim_order`` forms, which Edge graphs use unless ``_skip_dim_order``."""
    ensure_registered()
    return {
        aten._to_copy.default: torch.ops.dim_order_ops._to_dim_order_copy.default,
        aten.clone.default: torch.ops.dim_order_ops._clone_dim_order.default,
        aten.empty.memory_format: torch.ops.dim_order_ops._empty_dim_order.default,
    }


def is_edge_target(target: Any) -> bool:
    """True for targets an Edge-dialect call_function node may have as an operator."""
    return isinstance(target, EdgeOpOverload) or target in NOT_EDGE_OPS
