"""The ``dim_order_ops`` operator library: memory-format ops that take a dim order.

ExecuTorch records a tensor's layout as a dim order (``[0, 2, 3, 1]`` for
channels-last) instead of a ``torch.memory_format``, so ``aten._to_copy``,
``aten.clone`` and ``aten.empty.memory_format`` become ``dim_order_ops::*``
ops whose names the portable kernel library knows. The schemas are
ExecuTorch's (the ``.pte`` names these ops), so the library is registered
only if nobody registered it yet — the real ``executorch`` package defines the
very same ops, and whichever comes first wins. Registration is lazy (call
:func:`ensure_registered`) so importing edgetorch never blocks a later import
of ``executorch``. May import torch only.
"""

from __future__ import annotations

import torch

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

_LIBRARY: torch.library.Library | None = None


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


def ensure_registered() -> None:
    """Define the ``dim_order_ops`` library in torch unless it already exists."""
    global _LIBRARY
    if _LIBRARY is not None or hasattr(torch.ops.dim_order_ops, "_to_dim_order_copy"):
        return
    lib = torch.library.Library("dim_order_ops", "DEF")
    for name, schema in _SCHEMAS.items():
        lib.define(schema)
        lib.impl(name, _KERNELS[name], "CompositeExplicitAutograd")
        # Fake tensors run the same ATen calls on fake inputs.
        torch.library.register_fake(f"dim_order_ops::{name}", _KERNELS[name], lib=lib)
    _LIBRARY = lib
