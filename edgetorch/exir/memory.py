"""The ``memory.alloc`` op of the execution dialect: an explicit allocation of an out-variant's output.

``alloc(((shape...), dtype))`` (or a list of such pairs) stands for a tensor
the memory planner gives a place in an arena. Run eagerly it returns empty
tensors, so an execution-dialect graph stays runnable. May import torch.
"""

from __future__ import annotations

import torch

Shape = tuple[int, ...]
AllocSpec = tuple[Shape, torch.dtype] | list[tuple[Shape, torch.dtype]]


def alloc(spec: AllocSpec) -> torch.Tensor | list[torch.Tensor]:
    """An uninitialised tensor (or list of tensors) of the given shape(s) and dtype(s)."""
    if isinstance(spec, list):
        return [torch.empty(shape, dtype=dtype) for shape, dtype in spec]
    shape, dtype = spec
    return torch.empty(shape, dtype=dtype)
