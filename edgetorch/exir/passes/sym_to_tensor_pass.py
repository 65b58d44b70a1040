"""A symbolic int, float or bool passed where an op's schema asks for a tensor, wrapped in
``aten.scalar_tensor`` (int32, float32 or bool): the dispatcher converts such values implicitly, but the
runtime follows the schema."""

from __future__ import annotations

from typing import Any

import torch
from torch import SymBool, SymFloat, SymInt

from edgetorch.exir.pass_base import ExportPass, NodeMetadata, ProxyValue, map_args

_DTYPES = {SymInt: torch.int32, SymFloat: torch.float32, SymBool: torch.bool}


class SymToTensorPass(ExportPass):
    """Inserts ``aten.scalar_tensor`` before each symbolic value a tensor argument receives."""

    def call_operator(self, op: Any, args: tuple, kwargs: dict, meta: NodeMetadata) -> ProxyValue:
        def wrap(value: Any, arg: torch.Argument) -> Any:
            if (
                isinstance(value, ProxyValue)
                and not value.is_tensor()
                and isinstance(arg.type, torch.TensorType)
                and type(value.data) in _DTYPES
            ):
                dtype = _DTYPES[type(value.data)]
                return self.call_operator(torch.ops.aten.scalar_tensor.default, (value,), {"dtype": dtype}, meta)
            return value

        if hasattr(op, "_schema"):  # an ATen or Edge op
            args, kwargs = map_args(op, wrap, args, kwargs)
        return super().call_operator(op, args, kwargs, meta)
