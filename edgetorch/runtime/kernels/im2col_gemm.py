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
from functools import partial
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
    cols = np.empty((0, 0), np.float32)  # a block's columns, as the kernel makes them (for their type)
    at = (
        compiled.address(_columns, flat, strides, cols.reshape(-1), *window, 0, 0),
        compiled.address(_gemm_blocks, y2, cols, packed.wp, packed.bias, packed.lo, packed.hi, 0, 0, 0, 0, wide),
    )
    args = (*at, y2, flat, strides, packed.wp, packed.bias, packed.lo, packed.hi, wide, *window, block)
    serial = partial(compiled.compiled("im2col_gemm", _convolve), *args, 1)
    parallel = compiled.compiled("im2col_gemm_split", _convolve, parallel=True)
    limit = -(-rows // tile)
    return compiled.split_step(serial, parallel, args, limit, rows * k * packed.n >= policy.current().split_macs)


def _flat(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The memory ``x`` spans as a 1-D view from its first element, and its strides in elements followed by its
    height, width and channels (int64), as :func:`_columns` reads them; ``x``'s strides are non-negative
    multiples of its item size (as every array a schedule holds)."""
    strides = [s // x.itemsize for s in x.strides]
    span = 1 + sum((d - 1) * s for d, s in zip(x.shape, strides))
    flat = np.lib.stride_tricks.as_strided(x, (span,), (x.itemsize,), writeable=False)
    return flat, np.array([*strides, *x.shape[1:]], np.int64)


# ------------------------------------------------------------------------------------------------ kernels

_gemm_blocks: Any = None
_kernel_row: Any = None
prange: Any = range
call_at: Any = None


def _columns(x, strides, cols, oh, ow, kh, kw, sh, sw, dh, dw, top, left, first, last):  # pragma: no cover
    """cols[p - first, (ki, kj, c)] = x[n, i*sh - top + ki*dh, j*sw - left + kj*dw, c] for the output pixels
    p = (n * OH + i) * OW + j from ``first`` to ``last``, zero outside the input; ``x`` is the flat memory of an
    [N, H, W, C] array whose ``strides`` (in elements) are given; a kernel row at a time by windows.py's
    ``_kernel_row``, as its im2col."""
    h, wd, c = strides[4], strides[5], strides[6]
    sn, sr, sc, sk = np.uint64(strides[0]), np.uint64(strides[1]), np.uint64(strides[2]), np.uint64(strides[3])
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


def _convolve(
    columns, blocks, y, x, strides, wp, bias, lo, hi, wide, oh, ow, kh, kw, sh, sw, dh, dw, top, left, block, parts
):  # noqa: E501 # pragma: no cover
    """The layer over ``parts`` runs of output pixels (whole tiles a run), each in blocks of ``block`` pixels:
    the block's columns into the part's scratch, then the GEMM's tiles from it into the block's rows of ``y``,
    by ``_columns`` and ``_gemm_blocks`` at ``columns`` and ``blocks`` (their ``compiled.address``: compiled
    once, not again inside both builds of this kernel). Compiled twice: serially (``prange`` runs as
    ``range``) and with numba's threads (whose build run with one part would still wake the threads)."""
    m, k = y.shape[0], wp.shape[1]
    tile = ROWS if wide is None else WIDE_ROWS
    share = -(-m // parts)
    run = -(-share // tile) * tile
    for t in prange(parts):
        cols = np.empty((block, k), np.float32)
        r0 = min(m, t * run)
        r1 = min(m, r0 + run)
        for i0 in range(r0, r1, block):
            i1 = min(r1, i0 + block)
            call_at(
                _columns, columns, (x, strides, cols.reshape(-1), oh, ow, kh, kw, sh, sw, dh, dw, top, left, i0, i1)
            )
            call_at(_gemm_blocks, blocks, (y[i0:i1], cols, wp, bias, lo, hi, 0, i1 - i0, 0, wp.shape[0], wide))


HELPERS = compiled.Helpers(
    globals(),
    compile=("_columns",),
    build={"_gemm_blocks": lambda: gemm._gemm_blocks, "_kernel_row": lambda: windows._kernel_row},
    after=(gemm.HELPERS, windows.HELPERS),
)
