"""Memory format <-> dim order, at ExecuTorch's ``exir.dim_order_utils``.

The rules are :mod:`edgetorch.exir.dialects.dim_order_ops`' (``memory_format_of``,
``dim_order_of``); this adds ExecuTorch's treatment of "no layout": ``None`` and
``torch.preserve_format`` stand for each other. May import torch and edgetorch.exir.dialects.
"""

from __future__ import annotations

import torch

from edgetorch.exir.dialects.dim_order_ops import dim_order_of, memory_format_of

__all__ = ["get_dim_order", "get_memory_format", "is_channel_last_dim_order", "is_contiguous_dim_order"]


def get_memory_format(dim_order: list[int] | None) -> torch.memory_format:
    """The memory format of ``dim_order``; ``torch.preserve_format`` for ``None``."""
    return torch.preserve_format if dim_order is None else memory_format_of(dim_order)


def get_dim_order(memory_format: torch.memory_format | None, ndim: int) -> list[int] | None:
    """The dim order of ``memory_format`` on an ``ndim``-d tensor; ``None`` for ``preserve_format``/``None``."""
    if memory_format is None or memory_format == torch.preserve_format:
        return None
    return dim_order_of(memory_format, ndim)


def is_channel_last_dim_order(tensor: torch.Tensor) -> bool:
    """True for a 4-d tensor laid out channels-last."""
    return tensor.dim() == 4 and tensor.dim_order() == (0, 2, 3, 1)


def is_contiguous_dim_order(tensor: torch.Tensor) -> bool:
    """True when the tensor's dims are laid out in order (row-major)."""
    return tensor.dim_order() == tuple(range(tensor.dim()))
