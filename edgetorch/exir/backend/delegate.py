"""``executorch_call_delegate``: the graph node that calls a lowered backend module.

PyTorch itself defines this higher-order operator
(``torch.ops.higher_order.executorch_call_delegate``) with the behaviour a
delegate call needs: eagerly and on fake tensors it runs the lowered module's
``original_module``; under ``torch.export`` tracing it records a
``call_function`` node whose first argument is a ``get_attr`` of the module,
registered on the traced root as ``lowered_module_N``. ExecuTorch graphs and
ours must refer to this one operator, so we re-export it rather than define a
second one. May import torch.
"""

from __future__ import annotations

import torch
from torch._higher_order_ops.executorch_call_delegate import (
    executorch_call_delegate,
    get_lowered_module_name,
    is_lowered_module,
)

__all__ = [
    "delegate_call_nodes",
    "executorch_call_delegate",
    "get_lowered_module_name",
    "is_delegate_call",
    "is_lowered_module",
]


def is_delegate_call(node: torch.fx.Node) -> bool:
    """True for a ``call_function`` node of ``executorch_call_delegate``."""
    return node.op == "call_function" and node.target is executorch_call_delegate


def delegate_call_nodes(graph_module: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The delegate calls of ``graph_module``'s top-level graph, in program order."""
    return [n for n in graph_module.graph.nodes if is_delegate_call(n)]
