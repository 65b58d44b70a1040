"""The ``dim_order_ops`` operator library: memory-format ops that take a dim order.

ExecuTorch records a tensor's layout as a dim order (``[0, 2, 3, 1]`` for
channels-last) instead of a ``torch.memory_format``, so ``aten._to_copy``,
``aten.clone`` and ``aten.empty.memory_format`` become ``dim_order_ops::*``
ops whose names the portable kernel library knows. The schemas are
ExecuTorch's (the ``.pte`` names these ops), and the real ``executorch``
package defines the very same library, so it is a :class:`SharedLibrary`:
edgetorch uses ExecuTorch's definitions when they exist and hands its own
over when ExecuTorch is imported later. Registration is lazy (call
:func:`ensure_registered`). May import torch only.
"""

from __future__ import annotations

import torch

from edgetorch.exir.dialects.shared_library import SharedLibrary

_SCHEMAS = {
    "_to_dim_order_copy": "_to_dim_order_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, "
    "Device? device=None, bool? pin_memory=None, bool non_blocking=False, int[]? dim_order=None) -> Tensor",
    "_to_dim_order_copy.out": "_to_dim_order_copy.out(Tensor self, *, bool non_blocking=False, "
    "int[]? dim_order=None, Tensor(a!) out) -> Tensor(a!)",
    "_clone_dim_order": "_clone_dim_order(Tensor self, *, bool non_blocking=False, int[]? dim_order=None) -> Tensor",
    "_clone_dim_order.out": "_clone_dim_order.out(Tensor self, *, bool non_blocking=False, "
    "int[]? dim_order=None, Tensor(a!) out) -> Tensor(a!)",
    "_empty_dim_order": "_empty_dim_order(int[] size, *, ScalarType? dtype=None, Layout? layout=None, "
    "Device? device=None, bool? pin_memory=None, int[]? dim_order=None) -> Tensor",
    "_empty_dim_order.out": "_empty_dim_order.out(int[] size, *, int[]? dim_order=None, Tensor(a!) out) -> Tensor(a!)",
}


def memory_format_of(dim_order: list[int]) -> torch.memory_format:
    """The torch memory format a dim order stands for (contiguous or channels-last only)."""
    rank = len(dim_order)
    if list(dim_order) == list(range(rank)):
        return torch.contiguous_format
    if rank == 4 and list(dim_order) == [0, 2, 3, 1]:
        return torch.channels_last
    if rank == 5 and list(dim_order) == [0, 2, 3, 4, 1]:
        return torch.channels_last_3d
    raise ValueError(
        f"dim order {list(dim_order)} is neither contiguous nor channels-last; ExecuTorch supports only those layouts."
    )


def dim_order_of(memory_format: torch.memory_format, rank: int) -> list[int]:
    """The dim order for ``memory_format`` on a tensor of ``rank`` dims."""
    if memory_format == torch.contiguous_format:
        return list(range(rank))
    if memory_format == torch.channels_last and rank == 4:
        return [0, 2, 3, 1]
    if memory_format == torch.channels_last_3d and rank == 5:
        return [0, 2, 3, 4, 1]
    raise ValueError(
        f"memory format {memory_format} on a rank-{rank} tensor has no ExecuTorch dim order; "
        "use contiguous_format, or channels_last on 4-d (channels_last_3d on 5-d) tensors."
    )


def _to_dim_order_copy(
    self, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, dim_order=None
):
    fmt = torch.preserve_format if dim_order is None else memory_format_of(dim_order)
    return torch.ops.aten._to_copy.default(
        self,
        dtype=dtype,
        layout=layout,
        device=device,
        pin_memory=pin_memory,
        non_blocking=non_blocking,
        memory_format=fmt,
    )


def _to_dim_order_copy_out(self, *, non_blocking=False, dim_order=None, out):
    out.copy_(self)
    return out


def _clone_dim_order(self, *, non_blocking=False, dim_order=None):
    fmt = torch.preserve_format if dim_order is None else memory_format_of(dim_order)
    return torch.ops.aten.clone.default(self, memory_format=fmt)


def _empty_dim_order(size, *, dtype=None, layout=None, device=None, pin_memory=None, dim_order=None):
    fmt = torch.contiguous_format if dim_order is None else memory_format_of(dim_order)
    return torch.ops.aten.empty.memory_format(
        size, dtype=dtype, layout=layout, device=device, pin_memory=pin_memory, memory_format=fmt
    )


def _empty_dim_order_out(size, *, dim_order=None, out):
    return out.resize_(size)


_KERNELS = {
    "_to_dim_order_copy": _to_dim_order_copy,
    "_to_dim_order_copy.out": _to_dim_order_copy_out,
    "_clone_dim_order": _clone_dim_order,
    "_clone_dim_order.out": _to_dim_order_copy_out,
    "_empty_dim_order": _empty_dim_order,
    "_empty_dim_order.out": _empty_dim_order_out,
}


LIBRARY = SharedLibrary("dim_order_ops", _SCHEMAS, _KERNELS, "executorch.exir.passes.dim_order_ops_registry")


def ensure_registered() -> None:
    """Make ``torch.ops.dim_order_ops`` hold the dim-order ops (ExecuTorch's if imported, else edgetorch's)."""
    LIBRARY.ensure_registered()
