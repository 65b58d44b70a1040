"""The geometry of sliding windows (convolution, pooling, their transposes), declared once for every runtime.

Sizes are per spatial axis; padding is given as the amounts before and after, so that torch's symmetric
padding and XNNPACK's four-sided padding use the same rule. :class:`Window` is a 2-D window over channels-last
(NHWC) data with the views its taps read (im2col's columns are ops/conv.py's). Imports NumPy.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np


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


def window_counts(
    size: int,
    kernel: int,
    stride: int,
    before: int,
    after: int,
    outputs: int,
    dilation: int = 1,
    include_padding: bool = False,
) -> np.ndarray:
    """Along one axis, how many taps of each of the ``outputs`` windows fall inside the input (or, with
    ``include_padding``, inside the padded input): average pooling's divisor, torch's rule and XNNPACK's."""
    taps = (np.arange(outputs) * stride - before)[:, None] + np.arange(kernel) * dilation
    low, high = (-before, size + after) if include_padding else (0, size)
    return np.count_nonzero((taps >= low) & (taps < high), axis=1)


@dataclass(frozen=True)
class Window:
    """A 2-D sliding window over NHWC data: kernel, stride, dilation and padding."""

    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    top: int
    right: int
    bottom: int
    left: int

    @property
    def padded(self) -> bool:
        return bool(self.top or self.right or self.bottom or self.left)

    def out_hw(self, h: int, w: int) -> tuple[int, int]:
        oh = output_size(h, self.kh, self.sh, self.top, self.bottom, self.dh)
        ow = output_size(w, self.kw, self.sw, self.left, self.right, self.dw)
        if oh <= 0 or ow <= 0:
            raise ValueError(f"a {self.kh}x{self.kw} window does not fit a {h}x{w} input")
        return oh, ow

    def pad(self, x: np.ndarray, fill: float) -> tuple[np.ndarray, list]:
        """``x`` with its borders padded by ``fill`` (set once), and the step that copies the interior in."""
        if not self.padded:
            return x, []
        n, h, w, c = x.shape
        xp = np.full((n, h + self.top + self.bottom, w + self.left + self.right, c), fill, x.dtype)
        return xp, [partial(np.copyto, xp[:, self.top : self.top + h, self.left : self.left + w, :], x)]

    def tap(self, xp: np.ndarray, i: int, j: int, oh: int, ow: int) -> np.ndarray:
        """The [N, OH, OW, C] view of ``xp`` that kernel tap (i, j) reads."""
        r, c = i * self.dh, j * self.dw
        return xp[:, r : r + self.sh * (oh - 1) + 1 : self.sh, c : c + self.sw * (ow - 1) + 1 : self.sw, :]

    def taps(self) -> list[tuple[int, int]]:
        return [(i, j) for i in range(self.kh) for j in range(self.kw)]

    def tap_views(self, x: np.ndarray, fill: float) -> tuple[list[np.ndarray], list]:
        """The [N, OH, OW, C] view of every tap (in ``taps()`` order) over ``x`` padded by ``fill``, and the
        steps that refresh the views' memory from ``x``.

        A strided window reads from one persistent padded plane per stride phase (for stride 2: even and odd
        rows times even and odd columns), so each tap view has contiguous rows and NumPy runs one long inner
        loop per row instead of one per pixel.
        """
        n, h, w, c = x.shape
        oh, ow = self.out_hw(h, w)
        if not self.padded and (self.sh == self.sw == 1 or self.kh * self.kw <= self.sh * self.sw):
            return [self.tap(x, i, j, oh, ow) for i, j in self.taps()], []
        hp, wp = h + self.top + self.bottom, w + self.left + self.right
        planes, steps = {}, []
        for a in range(self.sh):
            for b in range(self.sw):
                plane = np.full((n, len(range(a, hp, self.sh)), len(range(b, wp, self.sw)), c), fill, x.dtype)
                h0, w0 = (a - self.top) % self.sh, (b - self.left) % self.sw  # first rows/columns of x it holds
                src = x[:, h0 :: self.sh, w0 :: self.sw]
                k0, l0 = (h0 + self.top - a) // self.sh, (w0 + self.left - b) // self.sw
                if src.size:
                    steps.append(partial(np.copyto, plane[:, k0 : k0 + src.shape[1], l0 : l0 + src.shape[2]], src))
                planes[a, b] = plane
        views = []
        for i, j in self.taps():
            r, s = i * self.dh, j * self.dw
            plane = planes[r % self.sh, s % self.sw]
            views.append(plane[:, r // self.sh : r // self.sh + oh, s // self.sw : s // self.sw + ow])
        return views, steps
