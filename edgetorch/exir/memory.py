"""The memory ops of the execution dialect: ``alloc`` (an out-variant's output), ``free`` and ``view`` (an alias).

``alloc(((shape...), dtype))`` (or a list of such pairs) stands for a tensor
the memory planner gives a place in an arena. ``view(base, shape)`` is a
reshape that costs nothing at run time: the emitted tensor shares its base's
bytes. ``free(spec)`` marks where a tensor's lifetime ends; it does nothing and emits
nothing. Run eagerly both behave like their torch counterparts, so an
execution-dialect graph stays runnable. May import torch.
"""

from __future__ import annotations

import torch

from edgetorch.exir.sym_util import eval_shape

Shape = tuple[int, ...]
AllocSpec = tuple[Shape, torch.dtype] | list[tuple[Shape, torch.dtype]]


def alloc(spec: AllocSpec) -> torch.Tensor | list[torch.Tensor]:
    """An uninitialised tensor (or list of tensors) of the given shape(s) and dtype(s)."""
    if isinstance(spec, list):
        return [torch.empty(shape, dtype=dtype) for shape, dtype in spec]
    shape, dtype = spec
    return torch.empty(eval_shape(shape), dtype=dtype)


def free(spec: object) -> None:
    """A marker a graph may call when the tensor described by ``spec`` is dead; it does nothing."""


def view(base: torch.Tensor, size: list[int]) -> torch.Tensor:
    """``base`` seen with shape ``size``, sharing its memory (no instruction is emitted for it)."""
    return base.view(size)
