"""A convolution whose packed weights fit in the L2 cache, as im2col and the packed GEMM (gemm.py) in one pass,
in the optional compiled tier (numba, ``pip install edgetorch[fast]``).

The two-step form writes every window's columns into a buffer of N x OH x OW rows of KH x KW x C values and
then multiplies it by the weights. For the first layer of an image model (3 input channels, 224 x 224 pixels,
a 3x3 stride-2 window: 12,544 rows of 27 values) the columns are 1.3 MB written and read back, and the copy is
a separate step, serial unless it has its own parallel loop. Here each thread takes a run of output pixels and
works through it in blocks: the block's columns go into a scratch buffer of the thread's (``block_bytes``, about
the L2 cache's share a thread keeps beside the weights), and the GEMM's tiles multiply them while they are in
cache. The weights are read once a block, which is why it is only taken where they fit in cache
(:func:`takes`): a layer whose weights are larger than ``gemm.GROUP_BYTES`` keeps the two-step form, whose
GEMM reads each group of weights once for all rows.

The input may be at any strides (a channel axis that is not the last in memory is read one value at a time,
slower than a contiguous NHWC input's runs). Each output is its K products summed in order by the same tiles
as the two-step form: the same bits.

Imports only NumPy, compiled.py, gemm.py and the policy (numba and llvmlite on the first compile).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edgetorch.runtime import policy
from edgetorch.runtime.kernels import compiled, gemm, windows

# Bytes of columns a block: with a group of weights (gemm.GROUP_BYTES) within a 512 KB share of L2 per thread.
BLOCK_BYTES = 64 * 1024
ROWS, WIDE_ROWS = gemm.ROWS, gemm.WIDE_ROWS  # rows a tile of the 8- and 16-lane kernels


def takes(packed: gemm.PackedGemm) -> bool:
    """Whether the layer's packed weights fit in one of the GEMM's cache groups, so that reading them once a
    block of columns costs less than writing the columns out."""
    return packed.wp.nbytes <= gemm.GROUP_BYTES


def step(
    packed: gemm.PackedGemm, x: np.ndarray, y2: np.ndarray, window: tuple, kernel: str = "packed"
) -> Callable[[], None] | None:
    """The step ``y2 = clamp(im2col(x) @ w + bias, lo, hi)`` for a float32 NHWC ``x`` [N, H, W, C] at any
    strides and the C-contiguous float32 ``y2`` [N * OH * OW, OC]; ``window`` is (oh, ow, kh, kw, sh, sw, dh, dw,
    top, left) and ``kernel`` one of ``gemm.packed_kernels()``. From the policy's ``split_macs`` multiply-adds on,
    the output pixels are split over the threads. None when the arrays do not fit the layer."""
    gemm.HELPERS.require("im2col GEMM")
    HELPERS.require("im2col GEMM")
    oh, ow, kh, kw = window[:4]
    nb, c = x.shape[0], x.shape[3]
    rows, k = nb * oh * ow, kh * kw * c
    if x.dtype != np.float32 or k != packed.k or y2.shape != (rows, packed.n) or not compiled.flat_float32(y2):
        return None
    wide = gemm.wide_tiles(kernel)
    tile = ROWS if wide is None else WIDE_ROWS
    block = max(tile, BLOCK_BYTES // (4 * k) // tile * tile)
    flat, strides = _flat(x)
    geometry = np.array([*strides, *window, block], np.int64)  # one argument: each costs the threaded build's compile
    cols = np.empty((0, 0), np.float32)  # a block's columns, as the kernel makes them (for their type)
    at = (
        compiled.address(_columns, flat, geometry, cols.reshape(-1), 0, 0),
        compiled.address(_gemm_blocks, y2, cols, packed.wp, packed.bias, packed.lo, packed.hi, 0, 0, 0, 0, wide),
    )
    args = (*at, y2, flat, geometry, packed.wp, packed.bias, packed.lo, packed.hi, wide)
    worth = rows * k * packed.n >= policy.current().split_macs
    return compiled.part_split_step(
        "im2col_gemm_split", _convolve_split, _convolve_rows, (*args, 0, rows), args, -(-rows // tile), worth
    )


def _flat(x: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """The memory ``x`` spans as a 1-D view from its first element, and its strides in elements followed by its
    height, width and channels, as :func:`_columns` reads them; ``x``'s strides are non-negative multiples of
    its item size (as every array a schedule holds)."""
    strides = [s // x.itemsize for s in x.strides]
    span = 1 + sum((d - 1) * s for d, s in zip(x.shape, strides))
    flat = np.lib.stride_tricks.as_strided(x, (span,), (x.itemsize,), writeable=False)
    return flat, [*strides, *x.shape[1:]]


# ------------------------------------------------------------------------------------------------ kernels

_gemm_blocks: Any = None
_kernel_row: Any = None
prange: Any = range
call_at: Any = None


def _columns(x, geometry, cols, first, last):  # pragma: no cover - compiled
    """cols[p - first, (ki, kj, c)] = x[n, i*sh - top + ki*dh, j*sw - left + kj*dw, c] for the output pixels
    p = (n * OH + i) * OW + j from ``first`` to ``last``, zero outside the input; ``x`` is the flat memory of an
    [N, H, W, C] array, ``geometry`` its strides (in elements), H, W and C, then the window (OH, OW, KH, KW,
    SH, SW, DH, DW, top, left); a kernel row at a time by windows.py's ``_kernel_row``, as its im2col."""
    h, wd, c, oh, ow, kh, kw, sh, sw, dh, dw, top, left = geometry[4:17]
    sn, sr, sc, sk = np.uint64(geometry[0]), np.uint64(geometry[1]), np.uint64(geometry[2]), np.uint64(geometry[3])
    run, width = kw * c, np.uint64(kh * kw * c)
    n, r = first // (oh * ow), first % (oh * ow)
    i, j = r // ow, r % ow
    for p in range(first, last):
        if j == ow:  # the next output row (and image): counted, not divided, at each pixel
            j, i = 0, i + 1
            if i == oh:
                i, n = 0, n + 1
        c0 = j * sw - left
        for ki in range(kh):
            row = i * sh - top + ki * dh
            o = np.uint64(p - first) * width + np.uint64(ki * run)
            at = np.uint64(n) * sn + np.uint64(row) * sr if 0 <= row < h else np.uint64(0)
            _kernel_row(x, cols, o, at, c0, kw, dw, wd, c, sc, sk, row < 0 or row >= h)
        j += 1


def _convolve_rows(columns, blocks, y, x, geometry, wp, bias, lo, hi, wide, r0, r1):  # pragma: no cover - compiled
    """Output pixels ``r0`` .. ``r1`` of the layer in blocks of ``block`` pixels (``geometry``'s last number,
    after :func:`_columns`' geometry): the block's columns into a scratch of its own, then the GEMM's tiles from
    it into the block's rows of ``y``, by ``_columns`` and ``_gemm_blocks`` at ``columns`` and ``blocks`` (their
    ``compiled.address``: compiled once, not again inside this build). The layer's serial step (all pixels);
    its threads call it at its address."""
    k, block = wp.shape[1], geometry[17]
    cols = np.empty((block, k), np.float32)
    for i0 in range(r0, r1, block):
        i1 = min(r1, i0 + block)
        call_at(_columns, columns, (x, geometry, cols.reshape(-1), i0, i1))
        call_at(_gemm_blocks, blocks, (y[i0:i1], cols, wp, bias, lo, hi, 0, i1 - i0, 0, wp.shape[0], wide))


def _convolve_split(rows, columns, blocks, y, x, geometry, wp, bias, lo, hi, wide, parts):  # noqa: E501 # pragma: no cover
    """The layer over ``parts`` runs of output pixels (whole tiles a run) on numba's threads, each by
    ``_convolve_rows`` at ``rows`` (its ``compiled.address`` for these arguments)."""
    m = y.shape[0]
    tile = ROWS if wide is None else WIDE_ROWS
    share = -(-m // parts)
    run = -(-share // tile) * tile
    for t in prange(parts):
        r0 = min(m, t * run)
        call_at(_convolve_rows, rows, (columns, blocks, y, x, geometry, wp, bias, lo, hi, wide, r0, min(m, r0 + run)))


HELPERS = compiled.Helpers(
    globals(),
    compile=("_columns", "_convolve_rows"),
    build={"_gemm_blocks": lambda: gemm._gemm_blocks, "_kernel_row": lambda: windows._kernel_row},
    after=(gemm.HELPERS, windows.HELPERS),
)
