"""Backend-dialect op objects at ExecuTorch's path; they live in :mod:`edgetorch.exir.dialects._ops`."""

from edgetorch.exir.dialects._ops import BackendOpOverload, BackendOpOverloadPacket, backend_op

__all__ = ["BackendOpOverload", "BackendOpOverloadPacket", "backend_op"]
