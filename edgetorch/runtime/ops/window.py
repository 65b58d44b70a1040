"""The geometry of sliding windows (convolution, pooling, their transposes), declared once for every runtime.

Sizes are per spatial axis; padding is given as the amounts before and after, so that torch's symmetric
padding and XNNPACK's four-sided padding use the same rule. Imports nothing.
"""

from __future__ import annotations


def span(kernel: int, dilation: int) -> int:
    """Input positions one window covers: ``dilation * (kernel - 1) + 1``."""
    return dilation * (kernel - 1) + 1


def output_size(
    size: int, kernel: int, stride: int, before: int, after: int, dilation: int = 1, ceil_mode: bool = False
) -> int:
    """Windows that fit an input of ``size`` padded by ``before`` and ``after``. With ``ceil_mode`` a last,
    partial window counts too, as long as it starts inside the input or its leading padding (torch's rule)."""
    room = size + before + after - span(kernel, dilation)
    n = (room + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (n - 1) * stride >= size + before:
        n -= 1
    return n


def reach(outputs: int, kernel: int, stride: int, dilation: int) -> int:
    """Input positions that ``outputs`` windows read, from the first window's start to the last one's end."""
    return (outputs - 1) * stride + span(kernel, dilation)


def transposed_size(size: int, kernel: int, stride: int, before: int, after: int, dilation: int, extra: int) -> int:
    """The output length of a transposed convolution: the input length a convolution of these parameters would
    map to ``size``, plus ``extra`` (torch's ``output_padding``, XNNPACK's adjustment)."""
    return reach(size, kernel, stride, dilation) - before - after + extra
