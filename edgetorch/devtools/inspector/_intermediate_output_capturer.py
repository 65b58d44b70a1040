"""Eager intermediate outputs by debug handle: run a graph module in PyTorch and keep the output of every
operator node that carries a debug handle (the last node with a handle wins, as it ends the group)."""

from __future__ import annotations

from typing import Any

import torch

from edgetorch.devtools.inspector._inspector_utils import DebugHandle, NodeFilter


class IntermediateOutputCapturer(torch.fx.Interpreter):
    """An FX interpreter that records, by debug handle (as a tuple), the output of each operator call
    (``getitem`` nodes left out: they select, they compute nothing)."""

    def __init__(self, module: torch.fx.GraphModule):
        super().__init__(module)
        self.node_filters = [NodeFilter("debug_handle", "call_function", exclude_ops=["getitem"])]
        self._captured: dict[DebugHandle, Any] | None = None

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        if self._captured is not None and all(f.matches(n) for f in self.node_filters):
            handle = n.meta["debug_handle"]
            key = (handle,) if isinstance(handle, int) else tuple(handle)
            self._captured[key] = _detached(result)
        return result

    def run_and_capture(self, *args: Any, **kwargs: Any) -> dict[DebugHandle, Any]:
        """Run the module on ``args`` (nested inputs are flattened as the module's input spec says) and return
        debug handle -> output (a detached copy; a list for an operator with several outputs)."""
        self._captured = {}
        try:
            with torch.no_grad():
                self.run(*args, **kwargs)
            return self._captured
        finally:
            self._captured = None


def _detached(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return [v.detach().clone() if isinstance(v, torch.Tensor) else v for v in value]
    return value
