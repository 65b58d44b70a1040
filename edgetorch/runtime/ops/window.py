"""The geometry of sliding windows (convolution, pooling, their transposes), declared once for every runtime.

Sizes are per spatial axis; padding is given as the amounts before and after, so that torch's symmetric
padding and XNNPACK's four-sided padding use the same rule. :class:`Window` is a 2-D window over channels-last
(NHWC) data with the views its taps read (im2col's columns are ops/conv.py's); :class:`PhasePlanes` the
stride-phase planes those views, and the portable NCHW pooling's, read. Imports NumPy and the error types.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from edgetorch.errors import InvalidArgumentError

LAYOUTS = ("NCHW", "NHWC")  # the data layouts every windowed op takes, as a parameter


def check_layout(layout: str, what: str) -> None:
    """Raise :class:`InvalidArgumentError` unless ``layout`` is one of :data:`LAYOUTS` (``what`` names the op)."""
    if layout not in LAYOUTS:
        raise InvalidArgumentError(f"{what} layout must be one of {LAYOUTS}, found {layout!r}")


def expand(values: Sequence[int], n: int) -> list[int]:
    """An int-list parameter with ``n`` entries (torch lets one value stand for every spatial dim)."""
    values = [int(v) for v in values]
    return values * n if len(values) == 1 else values


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

    def taps(self) -> list[tuple[int, int]]:
        return [(i, j) for i in range(self.kh) for j in range(self.kw)]

    def tap_views(self, x: np.ndarray, fill: float) -> tuple[list[np.ndarray], list]:
        """The [N, OH, OW, C] view of every tap (in ``taps()`` order) over ``x`` padded by ``fill`` (its
        :class:`PhasePlanes`), and the steps that refresh the views' memory from ``x``."""
        n, h, w, c = x.shape
        oh, ow = self.out_hw(h, w)
        kernel, stride, dilation = (self.kh, self.kw), (self.sh, self.sw), (self.dh, self.dw)
        planes = PhasePlanes(x, 1, kernel, stride, dilation, (self.top, self.left), (oh, ow), fill)
        return [planes.view(tap) for tap in planes.taps()], planes.steps


class PhasePlanes:
    """The stride-phase plane trick, once for every layout: ``x`` padded by ``fill`` and split into one plane
    per stride phase (for stride 2: even and odd rows times even and odd columns), so that every kernel tap
    of a strided window reads one plane at a constant offset. Each tap is then a view with contiguous rows
    (:meth:`view`), or, with ``flat``, one contiguous run of a flat plane (:meth:`flat_view`) over a
    "virtual" output grid whose rows are a plane's width (:meth:`virtual` views it at the real shape), and
    NumPy runs long inner loops instead of one per output row or pixel.

    The spatial axes are ``axis`` .. ``axis + len(kernel) - 1`` of ``x`` (NCHW: the last ones; NHWC: 1 and 2,
    the channels after them). The planes are built with the padding in place; :attr:`steps` copy ``x`` in
    (run them before reading a view, and again whenever ``x`` changes). Where no copy is needed (no padding
    and stride 1, or no more taps than phases) the views are of ``x`` itself and there are no steps.
    """

    def __init__(
        self,
        x: np.ndarray,
        axis: int,
        kernel: Sequence[int],
        stride: Sequence[int],
        dilation: Sequence[int],
        lo: Sequence[int],
        out_sizes: Sequence[int],
        fill: float,
        dtype: np.dtype | None = None,
        flat: bool = False,
    ) -> None:
        d = len(kernel)
        self.x, self.axis, self.flat = x, axis, flat
        self.kernel, self.stride, self.dilation = tuple(kernel), tuple(stride), tuple(dilation)
        self.out_sizes = tuple(out_sizes)
        self.lead, sizes, self.trailing = x.shape[:axis], x.shape[axis : axis + d], x.shape[axis + d :]
        dtype = x.dtype if dtype is None else np.dtype(dtype)
        extent = [reach(o, k, s, dl) for o, k, s, dl in zip(out_sizes, kernel, stride, dilation)]
        self.plane = [-(-r // s) for r, s in zip(extent, stride)]
        self.plane_strides = [math.prod(self.plane[i + 1 :]) for i in range(d)]
        self.length = 1 + sum((o - 1) * p for o, p in zip(out_sizes, self.plane_strides))
        unit = all(s == 1 for s in stride)
        if flat:
            self.direct = unit and list(sizes) == self.plane and not self.trailing
        else:
            few = math.prod(kernel) <= math.prod(stride)
            self.direct = all(r <= n for r, n in zip(extent, sizes)) and (unit or few)
        self.direct = self.direct and dtype == x.dtype and not any(lo)
        self.steps: list = []
        if self.direct:
            self.phases = x
            return
        self.phases = np.full(self.lead + self.stride + tuple(self.plane) + self.trailing, fill, dtype)
        for phase in itertools.product(*(range(s) for s in stride)):
            dst, src = [], []
            for r, s, p, n, m in zip(phase, stride, lo, sizes, self.plane):
                m0 = max(0, -((r - p) // s))  # the first plane position inside x
                i0 = m0 * s + r - p
                count = min(m - m0, -(-(n - i0) // s)) if i0 < n else 0
                dst.append(slice(m0, m0 + max(count, 0)))
                src.append(slice(i0, i0 + (count - 1) * s + 1 if count > 0 else i0, s))
            if all(t.stop > t.start for t in dst):
                into = self.phases[self._at(phase, tuple(dst))]
                self.steps.append(partial(np.copyto, into, x[self._at((), tuple(src))], casting="unsafe"))

    def _at(self, phase: tuple, spatial: tuple) -> tuple:
        return (slice(None),) * len(self.lead) + phase + spatial + (Ellipsis,)

    def refresh(self) -> None:
        """Copy ``x`` into the planes (the steps, run now)."""
        for step in self.steps:
            step()

    def taps(self) -> itertools.product:
        """Every kernel position, in the window's row-major scan order (torch's, and XNNPACK's)."""
        return itertools.product(*(range(k) for k in self.kernel))

    def view(self, tap: Sequence[int]) -> np.ndarray:
        """``(*lead, *out_sizes, *trailing)``: what kernel position ``tap`` reads for every output."""
        offsets = [t * dl for t, dl in zip(tap, self.dilation)]
        if self.direct:
            spatial = tuple(slice(o, o + (n - 1) * s + 1, s) for o, n, s in zip(offsets, self.out_sizes, self.stride))
            return self.x[self._at((), spatial)]
        phase = tuple(o % s for o, s in zip(offsets, self.stride))
        spatial = tuple(slice(o // s, o // s + n) for o, s, n in zip(offsets, self.stride, self.out_sizes))
        return self.phases[self._at(phase, spatial)]

    def flat_view(self, tap: Sequence[int]) -> np.ndarray:
        """``(*lead, length)``: what kernel position ``tap`` reads at every virtual output position (planes
        built ``flat``, no channels after the spatial axes)."""
        offsets = [t * dl for t, dl in zip(tap, self.dilation)]
        phase = int(np.ravel_multi_index([o % s for o, s in zip(offsets, self.stride)], self.stride))
        start = sum(o // s * p for o, s, p in zip(offsets, self.stride, self.plane_strides))
        flat = self.phases.reshape(self.lead + (math.prod(self.stride), -1))
        return flat[..., phase, start : start + self.length]

    def virtual(self, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
        """A new result ``(*lead, length)`` on the virtual grid, and its view at ``(*lead, *out_sizes)``."""
        full = np.empty(self.lead + self.out_sizes[:1] + tuple(self.plane[1:]), dtype)
        flat = full.reshape(self.lead + (-1,))[..., : self.length]
        return flat, full[(Ellipsis, slice(None)) + tuple(slice(o) for o in self.out_sizes[1:])]

    def grid(self, per_axis: Sequence[np.ndarray]) -> np.ndarray:
        """``(length,)``: the sum of per-axis values (each of length ``plane[i]``) at every virtual position."""
        d = len(per_axis)
        total = sum(a[: self.plane[i]].reshape((-1,) + (1,) * (d - 1 - i)) for i, a in enumerate(per_axis))
        return np.broadcast_to(total, tuple(self.plane)).reshape(-1)[: self.length]
