"""ScalarToTensorPass: a Python number passed where an op's schema wants a Tensor becomes a 0-d tensor.

``to_edge`` applies the same rule to every op it lowers; this pass is ExecuTorch's standalone
form of it, for graphs built or rewritten by hand. May import torch and edgetorch.exir.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx.passes.infra.pass_base import PassResult

from edgetorch.exir.pass_base import ExportPass, NodeMetadata, ProxyValue, map_args

__all__ = ["ScalarToTensorPass", "scalar_to_tensor"]


def scalar_to_tensor(value: Any, arg: torch.Argument) -> Any:
    """``value`` as a constant 0-d tensor when it is a number and ``arg`` is a Tensor argument."""
    if isinstance(value, bool | int | float) and isinstance(arg.type, torch.TensorType):
        # A real constant, not a fake tensor of the surrounding fake mode.
        with torch.utils._python_dispatch._disable_current_modes():
            return torch.tensor(value)
    return value


class ScalarToTensorPass(ExportPass):
    """Wrap numbers passed as Tensor arguments in 0-d tensors; reports a change only when it made one."""

    def __init__(self) -> None:
        super().__init__()
        self._modified = False

    def call_operator(self, op: Any, args: tuple, kwargs: dict, meta: NodeMetadata) -> ProxyValue:
        if hasattr(op, "_schema"):

            def coerce(value: Any, arg: torch.Argument) -> Any:
                new = scalar_to_tensor(value, arg)
                self._modified |= new is not value
                return new

            args, kwargs = map_args(op, coerce, args, kwargs)
        return super().call_operator(op, args, kwargs, meta)

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        self._modified = False
        graph_module = super().call(graph_module).graph_module
        return PassResult(graph_module, self._modified)
