"""The ``et_copy`` operators: explicit host-to-device and device-to-host copies at a device delegate's edges.

``et_copy::_h2d_copy`` and ``et_copy::_d2h_copy`` (each with an ``.out`` variant) are what
:class:`~edgetorch.exir.passes.propagate_device_pass.PropagateDevicePass` inserts. While a program is
traced and lowered every tensor is on the host, so both are plain copies. ExecuTorch defines the same
namespace; :class:`~edgetorch.exir.dialects.shared_library.SharedLibrary` lets either be imported first.
May import torch.
"""

from __future__ import annotations

import torch

from edgetorch.exir.dialects.shared_library import SharedLibrary

__all__ = ["LIBRARY", "ensure_registered"]


def _copy(self: torch.Tensor) -> torch.Tensor:
    return self.clone()


def _copy_out(self: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    return out.copy_(self)


_SCHEMAS = {
    "_h2d_copy": "_h2d_copy(Tensor self) -> Tensor",
    "_h2d_copy.out": "_h2d_copy.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)",
    "_d2h_copy": "_d2h_copy(Tensor self) -> Tensor",
    "_d2h_copy.out": "_d2h_copy.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)",
}
_KERNELS = {"_h2d_copy": _copy, "_h2d_copy.out": _copy_out, "_d2h_copy": _copy, "_d2h_copy.out": _copy_out}

LIBRARY = SharedLibrary("et_copy", _SCHEMAS, _KERNELS, "executorch.exir.passes._device_copy_ops_registry")


def ensure_registered() -> None:
    """Make ``torch.ops.et_copy`` hold the copy operators (ExecuTorch's if it was imported first)."""
    LIBRARY.ensure_registered()


ensure_registered()
