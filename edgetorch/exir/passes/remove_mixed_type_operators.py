"""Binary arithmetic on operands of different dtypes given operands of one dtype: each tensor operand that is
not of the promoted dtype (PyTorch's elementwise promotion for the op) is cast with ``aten._to_copy`` first, so
the kernel sees one dtype. Covers add, sub, mul, div (true division promotes ints to float) and minimum."""

from __future__ import annotations

from typing import Any

import torch
from torch import SymBool, SymFloat, SymInt
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as Kind
from torch._prims_common import elementwise_dtypes

from edgetorch.exir.dialects import EdgeOpOverload
from edgetorch.exir.dialects._ops import ops as exir_ops
from edgetorch.exir.dialects._ops import to_aten
from edgetorch.exir.pass_base import ExportPass, NodeMetadata, ProxyValue, map_args

_PROMOTION = {
    torch.ops.aten.add.Tensor: Kind.DEFAULT,
    torch.ops.aten.sub.Tensor: Kind.DEFAULT,
    torch.ops.aten.mul.Tensor: Kind.DEFAULT,
    torch.ops.aten.div.Tensor: Kind.INT_TO_FLOAT,
    torch.ops.aten.div.Tensor_mode: Kind.DEFAULT,  # INT_TO_FLOAT without a rounding mode
    torch.ops.aten.minimum.default: Kind.DEFAULT,
}


def _example(arg: Any) -> Any:
    """What ``elementwise_dtypes`` reads the operand's type from."""
    if isinstance(arg, ProxyValue):
        if arg.is_tensor():
            return arg.to_tensor()
        if isinstance(arg.data, (SymInt, SymFloat, SymBool)):
            return torch.tensor(arg.data)
        return arg.data
    return arg


class RemoveMixedTypeOperators(ExportPass):
    """Casts the operands of mixed-dtype binary arithmetic to the promoted dtype."""

    def call_operator(self, op: Any, args: tuple, kwargs: dict, meta: NodeMetadata) -> ProxyValue:
        kind = _PROMOTION.get(to_aten(op)) if len(args) > 1 else None
        if kind is None:
            return super().call_operator(op, args, kwargs, meta)
        if to_aten(op) == torch.ops.aten.div.Tensor_mode and kwargs.get("rounding_mode") is None:
            kind = Kind.INT_TO_FLOAT
        promoted = elementwise_dtypes(*(_example(a) for a in args), type_promotion_kind=kind)[1]

        # the cast in the graph's own dialect: an Edge graph gets the Edge op
        cast_op = (
            exir_ops.edge.aten._to_copy.default if isinstance(op, EdgeOpOverload) else torch.ops.aten._to_copy.default
        )

        def cast(value: Any, arg: torch.Argument) -> Any:
            if not isinstance(arg.type, torch.TensorType):
                return value
            if isinstance(value, ProxyValue) and (not value.is_tensor() or value.to_tensor().dtype == promoted):
                return value
            if isinstance(value, torch.Tensor) and value.dtype == promoted:
                return value
            return self.call_operator(cast_op, (value,), {"dtype": promoted}, meta)

        args, kwargs = map_args(op, cast, args, kwargs)
        return super().call_operator(op, args, kwargs, meta)
