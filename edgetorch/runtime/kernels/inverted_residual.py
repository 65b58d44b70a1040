"""MobileNet's inverted residual block as one pass, in the optional compiled tier (numba,
``pip install edgetorch[fast]``): a pointwise convolution that expands the channels, a depthwise convolution on
the expanded values, and a pointwise convolution that projects them back, ``y = project(depthwise(expand(x)))``
with each layer's bias and clamp.

Run layer by layer, the expanded tensor (six times the block's input: 112 x 112 x 96 floats, 4.8 MB, in
MobileNetV2's second block) is written to memory by the first layer and read back by the second, and the
depthwise output again by the third; each layer is also a parallel region of its own. Here each thread takes a
band of output rows and works through it a few rows at a time: it expands the input rows the next output rows'
windows need into a scratch buffer (``EXPANDED_BYTES``, so that they stay in the L2 cache), keeping the rows the
previous window shares instead of computing them again, runs the depthwise kernel on them into a second
buffer, and projects that into the output (adding the block's input to it, for the residual add after a stride-1
block). A band's first rows are expanded by both threads that need them.

The layers are the existing kernels, called on the buffers: gemm.py's packed GEMM tiles for both pointwise
layers, depthwise.py's kernels (the one the host's measurement picked for the layer) for the depthwise one. Each
output is therefore computed as layer by layer, with the same bits.

Imports only NumPy, the policy, compiled.py, gemm.py and depthwise.py (numba and llvmlite on the first compile).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from edgetorch.runtime import policy
from edgetorch.runtime.kernels import compiled, depthwise, gemm

EXPANDED_BYTES = 512 * 1024  # expanded rows a pass reads: half a 1 MB L2 (measured best of 128 KB to 1 MB)
WEIGHT_BYTES = 512 * 1024  # pointwise weights a fused block may read at each pass (as much as the expanded rows)


def takes(channels: int, expanded: int, out: int) -> bool:
    """Whether a block of ``channels`` -> ``expanded`` -> ``out`` channels (``channels`` 0: a block without the
    expanding layer) is run as one pass: its pointwise weights, as packed (panels of 16 channels), take at most
    ``WEIGHT_BYTES``, since each pass reads them again from the cache. MobileNetV2's blocks up to 96 -> 576 -> 96
    channels fit, and EfficientNet-Lite0's up to 80 -> 480."""
    panels = gemm.WIDTH * (-(-expanded // gemm.WIDTH) * channels + -(-out // gemm.WIDTH) * expanded)
    return 4 * panels <= WEIGHT_BYTES


@dataclass(frozen=True)
class Depthwise:
    """The block's depthwise layer as depthwise.py takes it: ``taps`` [KH * KW, C], ``bias`` [C] or empty,
    ``window`` (kh, kw, sh, sw, dh, dw, top, left), the clamp, and the kernel the host's measurement picked."""

    taps: np.ndarray
    bias: np.ndarray
    window: tuple[int, int, int, int, int, int, int, int]
    lo: float
    hi: float
    kernel: str


def step(
    expand: gemm.PackedGemm | None,
    dw: Depthwise,
    project: gemm.PackedGemm,
    x: np.ndarray,
    y: np.ndarray,
    kernels: tuple[str, str] = ("packed", "packed"),
    residual: bool = False,
) -> Callable[[], None] | None:
    """The step computing the block from the C-contiguous float32 NHWC ``x`` into ``y`` (its output shape);
    without ``expand`` (MobileNetV2's first block) the depthwise layer reads ``x``'s rows where they lie.
    ``kernels`` are the packed GEMM variants (``gemm.packed_kernels()``) of the expand and project layers. From
    the policy's ``split_macs`` multiply-adds on, bands of output rows are split over the threads. With
    ``residual`` the block's input is added to the projection (``x`` and ``y`` of one shape). None when the
    arrays do not fit the layers."""
    HELPERS.require("inverted residual block")
    kh, kw, sh, sw, dh, dw_, top, left = dw.window
    if x.ndim != 4 or y.ndim != 4 or not compiled.flat_float32(x, y) or x.shape[0] != y.shape[0]:
        return None
    nb, h, wd, c = x.shape
    e = c if expand is None else expand.n
    if (
        (expand is not None and c != expand.k)
        or dw.taps.shape != (kh * kw, e)
        or project.k != e
        or y.shape[3] != project.n
    ):
        return None
    oh, ow = y.shape[1], y.shape[2]
    if residual and x.shape != y.shape:
        return None
    held = max(1, EXPANDED_BYTES // (wd * e * 4))  # expanded rows a thread keeps, at least one window's
    span = (kh - 1) * dh + 1
    chunk = max(1, (held - span) // sh + 1)  # output rows a pass
    rows = (chunk - 1) * sh + span
    none = gemm.PackedGemm(np.zeros((1, 1), np.float32), None) if expand is None else expand  # not read
    capacity = 2 * rows if expand is not None else 0  # the kept rows move to the front only when it is full
    sizes = (capacity, wd, e, chunk, ow)
    y2, x2 = y.reshape(-1, y.shape[3]), x.reshape(-1, c)
    wide_e, wide_p = gemm.wide_tiles(kernels[0]), gemm.wide_tiles(kernels[1])
    taps, bd = depthwise.read_only(dw.taps), depthwise.read_only(dw.bias)
    lod, hid = np.float32(dw.lo), np.float32(dw.hi)
    # The layers' kernels at their addresses, built for the arguments' types _band passes (a scratch view of the
    # same type stands for a buffer; ``x`` for the depthwise layer's rows, which are either): both depthwise
    # kernels, since _band's one build holds a call of each (tuning has built them for these types already).
    e2, _, f2, f4 = _ARRAYS
    expand_at = compiled.address(gemm._gemm_blocks, e2, x2, none.wp, none.bias, none.lo, none.hi, 0, 0, 0, 0, wide_e)
    project_at = compiled.address(
        gemm._gemm_blocks, y2, f2, project.wp, project.bias, project.lo, project.hi, 0, 0, 0, 0, wide_p
    )
    wide_d = depthwise.wide_lanes(dw.kernel)
    filtered = (x, taps, bd, f4[None], kh, kw, sh, sw, dh, dw_, top, left, lod, hid, 0, 0)
    rows_at = compiled.address(depthwise._depthwise_rows, *filtered)
    vector_at = compiled.address(depthwise._vector_rows, *filtered, wide_d)
    # The block's numbers as two arrays (_band's ``numbers`` and ``clamps``): every argument of the threaded build
    # costs its compile time.
    numbers = np.array([kh, kw, sh, sw, dh, dw_, top, left, chunk, oh, ow, expand is not None, dw.kernel == "rows",
                        residual, expand_at, rows_at if dw.kernel == "rows" else vector_at, project_at], np.int64)  # fmt: skip
    clamps = np.array([none.lo, none.hi, dw.lo, dw.hi, project.lo, project.hi], np.float32)
    args = (y2, x2, x, none.wp, none.bias, taps, bd, project.wp, project.bias, numbers, clamps, wide_e, wide_d, wide_p)
    band = compiled.address(_band, *args, *_ARRAYS, 0, nb * oh)  # the threads call the serial build
    parallel = partial(_with_buffers, compiled.compiled("inverted_residual_split", _block, parallel=True), sizes, band)
    # On the calling thread by the compiled _band itself: a parallel build run with one part would still wake
    # numba's threads, and a serial build of its own would optimise _band's code once more.
    serial = partial(_in_one_band, _band, sizes, nb * oh, *args)
    macs = nb * ((expand is not None) * h * wd * c * e + oh * ow * e * (kh * kw + project.n))
    return compiled.split_step(serial, parallel, args, nb * oh, macs >= policy.current().split_macs)


_SCRATCH = threading.local()
_ARRAYS = tuple(np.empty((0,) * d, np.float32) for d in (2, 3, 2, 3))  # the scratch views' types, for address


def _with_buffers(kernel: Any, sizes: tuple[int, ...], *args: Any) -> None:
    """``kernel(*args[:-1], buffers..., parts)`` with each part's expanded and filtered rows in the calling
    thread's scratch buffer (:func:`_scratch`)."""
    parts = args[-1]
    kernel(*args[:-1], *_scratch(sizes, parts)[1:5], parts)


def _in_one_band(band: Any, sizes: tuple[int, ...], rows: int, *args: Any) -> None:
    """``band`` (the compiled ``_band``) over all ``rows`` output rows on the calling thread, with one part's
    scratch buffers."""
    band(*args, *_scratch(sizes, 1)[5:], 0, rows)


def _scratch(sizes: tuple[int, ...], parts: int) -> tuple:
    """:func:`_views` of the calling thread's scratch buffer, which every block shares (grown to the largest):
    2-d and 4-d views made here, since a reshape to a tuple in the compiled kernel costs seconds of its first
    compile. They are kept per block shape and part count until the buffer grows (four reshapes cost 1.1 us a
    call)."""
    views = getattr(_SCRATCH, "views", None)
    if views is None:
        views = _SCRATCH.views = {}
    got = views.get((sizes, parts))
    if got is None or got[0] is not getattr(_SCRATCH, "buffer", None):
        got = views[sizes, parts] = _views(sizes, parts)
    return got


def _views(sizes: tuple[int, ...], parts: int) -> tuple:
    """The thread's scratch buffer (grown to fit), its four views for ``parts`` parts of a block of ``sizes``
    (capacity, W, E, chunk, OW), and the first part's four."""
    capacity, wd, e, chunk, ow = sizes
    expanded, filtered = capacity * wd * e, chunk * ow * e
    need = parts * (expanded + filtered)
    buffer = getattr(_SCRATCH, "buffer", None)
    if buffer is None or buffer.size < need:
        buffer = _SCRATCH.buffer = np.empty(need, np.float32)
        _SCRATCH.views.clear()  # the other blocks' views of the old buffer: made again when next called
    ex, fl = buffer[: parts * expanded], buffer[parts * expanded : need]
    split = (
        ex.reshape(parts, capacity * wd, e),
        ex.reshape(parts, capacity, wd, e),
        fl.reshape(parts, chunk * ow, e),
        fl.reshape(parts, chunk, ow, e),
    )
    return (buffer, *split, *(view[0] for view in split))


# ------------------------------------------------------------------------------------------------ kernels

_gemm_blocks: Any = None
_depthwise_rows: Any = None
_vector_rows: Any = None
prange: Any = range
call_at: Any = None


def _band(y2, x2, x, we, be, taps, bd, wp, bp, numbers, clamps, wide_e, wide_d, wide_p,
          e2, e4, f2, f4, first, last):  # fmt: skip  # pragma: no cover - compiled
    """Output rows ``first`` .. ``last`` (of all images' rows, n * OH + i) of the block, ``chunk`` rows a pass
    (module docstring); ``y2`` and ``x2`` are the output and input as [pixels, channels]. The expanded rows a
    pass needs go into ``e2`` / ``e4`` (one buffer as [rows * W, E] and [rows, W, E]), the previous pass's last
    rows kept when the windows share them; the depthwise output into ``f2`` / ``f4``. ``numbers`` holds the
    depthwise window (kh, kw, sh, sw, dh, dw, top, left), ``chunk``, OH, OW, whether the block expands, runs
    the depthwise ``rows`` kernel and adds its input, and the layers' kernels' addresses; ``clamps`` the three
    layers' bounds.

    The layers are the kernels of gemm.py and depthwise.py called at their addresses (``compiled.address``), so
    that their code is compiled once, not again inside this build: ``_gemm_blocks`` at ``expand_at`` and
    ``project_at``, and at ``depthwise_at`` ``_depthwise_rows`` where ``rows``, else ``_vector_rows``."""
    kh, kw, sh, sw, dh, dw, top, left, chunk, oh, ow = numbers[:11]
    expanding, rows, residual = numbers[11] != 0, numbers[12] != 0, numbers[13] != 0
    expand_at, depthwise_at, project_at = numbers[14:17]
    loe, hie, lod, hid, lop, hip = clamps[:6]
    nb, h, wd, c = x.shape
    capacity = e4.shape[0]
    image, held_lo, held_hi, base = -1, 0, 0, 0  # rows held_lo .. held_hi of ``image`` from buffer row ``base``
    r = first
    while r < last:
        n, i0 = r // oh, r % oh
        i1 = min(oh, i0 + chunk, i0 + last - r)
        g0 = max(0, i0 * sh - top)
        g1 = max(g0, min(h, (i1 - 1) * sh - top + (kh - 1) * dh + 1))
        start = g0
        at = 0
        if not expanding:  # the depthwise layer reads the input's own rows
            start = g1
        elif image == n and held_lo <= g0 < held_hi:  # the rows the last pass expanded and this one reads
            start = held_hi
            at = base + g0 - held_lo
            if at + g1 - g0 > capacity:
                for q in range((held_hi - g0) * wd):  # apart: at > capacity / 2 >= held_hi - g0 rows
                    for ch in range(e2.shape[1]):  # (a slice assignment costs seconds of first compile)
                        e2[q, ch] = e2[at * wd + q, ch]
                at = 0
        base = at
        if g1 > start:
            out = e2[(at + start - g0) * wd : (at + g1 - g0) * wd]
            src = x2[(n * h + start) * wd : (n * h + g1) * wd]
            call_at(_gemm_blocks, expand_at, (out, src, we, be, loe, hie, 0, (g1 - start) * wd, 0, we.shape[0], wide_e))
        image, held_lo, held_hi = n, g0, g1
        if expanding:
            ex = e4[at : at + g1 - g0][None]
        else:
            ex = x[n, g0:g1][None]
        fl = f4[: i1 - i0][None]
        shifted = top + g0 - i0 * sh  # the window's top padding, counted from the buffer's first row
        filtered = (ex, taps, bd, fl, kh, kw, sh, sw, dh, dw, shifted, left, lod, hid, 0, i1 - i0)
        if rows:
            call_at(_depthwise_rows, depthwise_at, filtered)
        else:
            call_at(_vector_rows, depthwise_at, (*filtered, wide_d))
        pixels = (i1 - i0) * ow
        dst = y2[(n * oh + i0) * ow : (n * oh + i1) * ow]
        call_at(_gemm_blocks, project_at, (dst, f2[:pixels], wp, bp, lop, hip, 0, pixels, 0, wp.shape[0], wide_p))
        if residual:  # the add after the block: the output rows' own input rows (stride 1, one shape)
            src = x2[(n * h + i0) * wd : (n * h + i1) * wd]
            for p in range(pixels):
                for q in range(dst.shape[1]):
                    dst[p, q] += src[p, q]
        r += i1 - i0


def _block(band, y2, x2, x, we, be, taps, bd, wp, bp, numbers, clamps, wide_e, wide_d, wide_p,
           e2, e4, f2, f4, parts):  # fmt: skip  # pragma: no cover - compiled
    """The block over ``parts`` bands of output rows, on numba's threads: ``_band`` at ``band``, its
    :func:`compiled.address` for these arguments."""
    total = x.shape[0] * numbers[9]
    run = -(-total // parts)
    for t in prange(parts):
        first = min(total, t * run)
        call_at(_band, band, (y2, x2, x, we, be, taps, bd, wp, bp, numbers, clamps, wide_e, wide_d, wide_p,
                              e2[t], e4[t], f2[t], f4[t], first, min(total, first + run)))  # fmt: skip


HELPERS = compiled.Helpers(
    globals(),
    compile=("_band",),
    build={
        "_gemm_blocks": lambda: gemm._gemm_blocks,
        "_depthwise_rows": lambda: depthwise._depthwise_rows,
        "_vector_rows": lambda: depthwise._vector_rows,
    },
    after=(gemm.HELPERS, depthwise.HELPERS),
)
