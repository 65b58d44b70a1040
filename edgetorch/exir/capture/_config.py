"""The compile configs where ExecuTorch's own code imports them (``exir.capture._config``)."""

from edgetorch.exir.program._program import EdgeCompileConfig
from edgetorch.exir.to_executorch import ExecutorchBackendConfig

__all__ = ["EdgeCompileConfig", "ExecutorchBackendConfig"]
