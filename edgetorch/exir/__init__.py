"""edgetorch.exir: the compiler, mirroring ``executorch.exir``.

``to_edge`` lowers torch.export programs to the Edge dialect;
``EdgeProgramManager.to_executorch`` produces the .pte. The back-half names
(``ExecutorchBackendConfig``, ``ExecutorchProgramManager``) load on first use.
"""

from typing import Any

from edgetorch._lazy import lazy_exports
from edgetorch.exir.capture import CaptureConfig, ExirExportedProgram, capture, capture_pre_autograd_graph, dynamic_dim
from edgetorch.exir.dialects import exir_ops
from edgetorch.exir.pass_base import ExportPass, PassManager, PassResult
from edgetorch.exir.program import EdgeCompileConfig, EdgeProgramManager, to_edge, to_edge_transform_and_lower

_LAZY = {
    "ExecutorchBackendConfig": "to_executorch",
    "ExecutorchProgramManager": "to_executorch",
}

# What a graph passes between its nodes (tensors, scalars, and tuples and lists of them): ExecuTorch annotates
# its tracer and pass APIs with this name, and code written against them imports it from here.
Value = Any

__all__ = [
    "CaptureConfig",
    "EdgeCompileConfig",
    "EdgeProgramManager",
    "ExecutorchBackendConfig",
    "ExecutorchProgramManager",
    "ExirExportedProgram",
    "ExportPass",
    "PassManager",
    "PassResult",
    "Value",
    "capture",
    "capture_pre_autograd_graph",
    "dynamic_dim",
    "exir_ops",
    "to_edge",
    "to_edge_transform_and_lower",
]


__getattr__ = lazy_exports(__name__, _LAZY)
