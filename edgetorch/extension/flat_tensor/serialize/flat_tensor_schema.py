"""The FlatTensor schema as dataclasses, at ExecuTorch's path; they live in ``edgetorch.format.ptd``. Torch-free."""

from edgetorch.format.program import DataSegment
from edgetorch.format.ptd import FlatTensor, NamedData, TensorLayout

__all__ = ["DataSegment", "FlatTensor", "NamedData", "TensorLayout"]
