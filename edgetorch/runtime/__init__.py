"""The torch-free runtime: load a .pte and run its methods with NumPy.

Mirrors ``executorch.runtime``: ``Runtime.get().load_program(path).load_method("forward").execute(inputs)``.
Failures raise the typed errors below, ``RuntimeError`` subclasses whose message carries ExecuTorch's error
code (``Error``), e.g. ``[error 0x14 OperatorMissing]``.
Imports only the standard library, NumPy, flatbuffers and ml_dtypes.
"""

from edgetorch.errors import (
    DelegateLoadError,
    EdgetorchError,
    Error,
    ExecutionError,
    InvalidInputError,
    MethodNotFoundError,
    ProgramLoadError,
    UnsupportedBackendError,
    UnsupportedOperatorError,
)
from edgetorch.runtime.backends import BackendInterface, BackendRegistry, register_backend
from edgetorch.runtime.kernels.compiled import get_num_threads, set_num_threads
from edgetorch.runtime.kernels.registry import register_kernel
from edgetorch.runtime.program import (
    EventTracer,
    Method,
    MethodMeta,
    Module,
    OperatorRegistry,
    Program,
    Runtime,
    TensorInfo,
    Verification,
)

__all__ = [
    "BackendInterface",
    "BackendRegistry",
    "DelegateLoadError",
    "EdgetorchError",
    "Error",
    "EventTracer",
    "ExecutionError",
    "InvalidInputError",
    "Method",
    "MethodMeta",
    "MethodNotFoundError",
    "Module",
    "OperatorRegistry",
    "Program",
    "ProgramLoadError",
    "Runtime",
    "TensorInfo",
    "UnsupportedBackendError",
    "UnsupportedOperatorError",
    "Verification",
    "get_num_threads",
    "register_backend",
    "register_kernel",
    "set_num_threads",
]
