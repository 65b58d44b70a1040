"""The torch-free runtime: load a .pte and run its methods with NumPy.

Mirrors ``executorch.runtime``: ``Runtime.get().load_program(path).load_method("forward").execute(inputs)``.
Imports only the standard library, NumPy, flatbuffers and ml_dtypes.
"""

from edgetorch.errors import (
    DelegateLoadError,
    EdgetorchError,
    InvalidInputError,
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
    "EventTracer",
    "InvalidInputError",
    "Method",
    "MethodMeta",
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
