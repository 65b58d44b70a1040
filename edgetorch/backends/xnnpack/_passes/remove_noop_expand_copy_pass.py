"""``RemoveNoopExpandCopyPass``: drop ``expand_copy`` nodes whose result has their input's shape (an identity once
export has specialised the shapes). Imports torch."""

from __future__ import annotations

from typing import Any

import torch

from edgetorch.exir.dialects import to_aten
from edgetorch.exir.pass_base import ExportPass, NodeMetadata, ProxyValue

__all__ = ["RemoveNoopExpandCopyPass"]


class RemoveNoopExpandCopyPass(ExportPass):
    """Replaces each ``expand_copy`` that changes neither shape nor dtype by its input."""

    def call_operator(self, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any], meta: NodeMetadata) -> Any:
        if to_aten(op) == torch.ops.aten.expand_copy.default and isinstance(args[0], ProxyValue):
            shape = list(args[0].to_tensor().shape)
            sizes = list(args[1])
            if len(sizes) == len(shape) and all(s in (-1, d) for s, d in zip(sizes, shape)):
                return args[0]
        return super().call_operator(op, args, kwargs, meta)
