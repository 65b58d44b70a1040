"""ExecuTorch's ``portable_lib`` entry points, served by edgetorch's runtime. Torch-free.

Code written against ``executorch.extension.pybindings.portable_lib`` runs unchanged:
``_load_for_executorch("model.pte", "model.ptd").forward([x])``. The returned module is
:class:`edgetorch.runtime.Module`; torch tensors in give torch tensors out.
"""

from __future__ import annotations

import os

from edgetorch.runtime.backends import BackendRegistry
from edgetorch.runtime.program import MethodMeta, Module, Runtime, TensorInfo, Verification

ExecuTorchModule = Module


def _load_for_executorch(
    program_path: str | os.PathLike,
    data_path: str | os.PathLike | None = None,
    *,
    program_verification: Verification = Verification.InternalConsistency,
) -> Module:
    """Load a .pte file (and the .ptd file holding its external tensors, if any) as a Module."""
    module = Module(program_path, data_path, verification=program_verification)
    module.load()
    return module


def _load_for_executorch_from_buffer(
    buffer: bytes,
    data_map_buffer: bytes | None = None,
    *,
    program_verification: Verification = Verification.InternalConsistency,
) -> Module:
    """As :func:`_load_for_executorch`, from the bytes of a .pte (and of a .ptd)."""
    module = Module(
        bytes(buffer), None if data_map_buffer is None else bytes(data_map_buffer), verification=program_verification
    )
    module.load()
    return module


def _get_operator_names() -> list[str]:
    """Every operator the runtime has a kernel for, as ``namespace::op.overload``."""
    return sorted(Runtime.get().operator_registry.operator_names)


def _get_registered_backend_names() -> list[str]:
    return BackendRegistry().registered_backend_names


def _is_available(backend_name: str) -> bool:
    return BackendRegistry().is_available(backend_name)


__all__ = [
    "ExecuTorchModule",
    "MethodMeta",
    "TensorInfo",
    "Verification",
    "_get_operator_names",
    "_get_registered_backend_names",
    "_is_available",
    "_load_for_executorch",
    "_load_for_executorch_from_buffer",
]
