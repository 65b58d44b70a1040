"""Edge programs and their managers, at ExecuTorch's ``exir.program`` (the code is in ``_program``).

``ExecutorchProgramManager`` loads on first use from the back half (``edgetorch.exir.to_executorch``).
"""

from edgetorch._lazy import lazy_exports
from edgetorch.exir.program._program import (
    EdgeCompileConfig,
    EdgeProgramManager,
    edge_manager_to_backend,
    lower_to_edge,
    ops_to_keep,
    to_edge,
    to_edge_transform_and_lower,
)

__all__ = [
    "EdgeCompileConfig",
    "EdgeProgramManager",
    "ExecutorchProgramManager",
    "edge_manager_to_backend",
    "lower_to_edge",
    "ops_to_keep",
    "to_edge",
    "to_edge_transform_and_lower",
]

__getattr__ = lazy_exports("edgetorch.exir", {"ExecutorchProgramManager": "to_executorch"})
