"""The delegate-call operator at ExecuTorch's path; it lives in :mod:`edgetorch.exir.backend.delegate`."""

from edgetorch.exir.backend.delegate import (
    delegate_call_nodes,
    executorch_call_delegate,
    get_lowered_module_name,
    is_delegate_call,
    is_lowered_module,
)

__all__ = [
    "delegate_call_nodes",
    "executorch_call_delegate",
    "get_lowered_module_name",
    "is_delegate_call",
    "is_lowered_module",
]
