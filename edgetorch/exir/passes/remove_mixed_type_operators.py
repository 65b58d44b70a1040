"""Binary arithmetic on operands of different dtypes given operands of one dtype: each tensor operand that is
not of the promoted dtype (``to_edge``'s promotion rule, :func:`~edgetorch.exir.passes.to_edge.promoted_dtype`)
is cast with ``_to_copy`` first, so the kernel sees one dtype. Covers add, sub, mul, div and minimum."""

from __future__ import annotations

from typing import Any

import torch

from edgetorch.exir.dialects import EdgeOpOverload
from edgetorch.exir.dialects._ops import ops as exir_ops
from edgetorch.exir.dialects._ops import to_aten
from edgetorch.exir.pass_base import ExportPass, NodeMetadata, ProxyValue, map_args
from edgetorch.exir.passes.to_edge import promoted_dtype


class RemoveMixedTypeOperators(ExportPass):
    """Casts the operands of mixed-dtype binary arithmetic to the promoted dtype."""

    def call_operator(self, op: Any, args: tuple, kwargs: dict, meta: NodeMetadata) -> ProxyValue:
        promoted = promoted_dtype(to_aten(op), args, kwargs)
        if promoted is None:
            return super().call_operator(op, args, kwargs, meta)
        # the cast in the graph's own dialect: an Edge graph gets the Edge op
        cast_op = (
            exir_ops.edge.aten._to_copy.default if isinstance(op, EdgeOpOverload) else torch.ops.aten._to_copy.default
        )

        def cast(value: Any, arg: torch.Argument) -> Any:
            data = value.data if isinstance(value, ProxyValue) else value
            if isinstance(arg.type, torch.TensorType) and isinstance(data, torch.Tensor) and data.dtype != promoted:
                return self.call_operator(cast_op, (value,), {"dtype": promoted}, meta)
            return value

        args, kwargs = map_args(op, cast, args, kwargs)
        return super().call_operator(op, args, kwargs, meta)
