"""Alignment arithmetic of the serializers, at ExecuTorch's ``exir._serialize.padding``."""

from __future__ import annotations

from edgetorch.format.pte import aligned

__all__ = ["aligned_size", "pad_to", "padding_required"]


def padding_required(offset: int, alignment: int) -> int:
    """Bytes to add after ``offset`` to reach the next multiple of ``alignment``."""
    return -offset % alignment


def aligned_size(input_size: int, alignment: int) -> int:
    """``input_size`` rounded up to a multiple of ``alignment``."""
    return aligned(input_size, alignment)


def pad_to(data: bytes, length: int) -> bytes:
    """``data`` followed by zero bytes up to ``length``; ValueError when it is already longer."""
    if len(data) > length:
        raise ValueError(f"{len(data)} bytes of data do not fit in {length}")
    return data + bytes(length - len(data))
