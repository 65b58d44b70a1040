"""Legacy capture entry points and the compile configs, at ExecuTorch's ``exir.capture``.

The entry points are in ``_capture``; the configs (``_config``) load on first use, since
``ExecutorchBackendConfig`` belongs to the back half.
"""

from edgetorch._lazy import lazy_exports
from edgetorch.exir.capture._capture import (
    DimConstraint,
    EqualityConstraint,
    capture_pre_autograd_graph,
    dynamic_dim,
    export,
)
from edgetorch.exir.capture._legacy import CaptureConfig, ExirExportedProgram, capture

__all__ = [
    "CaptureConfig",
    "DimConstraint",
    "EdgeCompileConfig",
    "EqualityConstraint",
    "ExecutorchBackendConfig",
    "ExirExportedProgram",
    "capture",
    "capture_pre_autograd_graph",
    "dynamic_dim",
    "export",
]

__getattr__ = lazy_exports(__name__, {"EdgeCompileConfig": "_config", "ExecutorchBackendConfig": "_config"})
