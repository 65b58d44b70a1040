"""A float32 GEMM on weights packed once at load, with the bias and a clamp in the same pass, in the optional
compiled tier (numba, ``pip install edgetorch[fast]``): ``y = clamp(x @ w + bias, lo, hi)`` for the fully
connected and convolution layers whose weights are constants.

NumPy's ``matmul`` calls OpenBLAS's sgemm, which copies (packs) both operands into its own layout on every
call. For the shapes of small models (few rows, as in an MLP on a batch of 8, or few inputs, as in
MobileNetV2's pointwise convolutions with K = 16-160) that copy and OpenBLAS's blocking for large matrices
cost as much as the arithmetic, and the bias and clamp are two more passes over the output. Here the weights
are packed at load into panels of ``WIDTH`` = 16 output channels, [N / 16, K, 16] (the last panel padded with
zeros), so that a micro-kernel reads one panel front to back; the input rows are read where they are.

Reading the [K, N] weights in place instead (panel p as columns 16p .. 16p + 15 of each row, no copy) ran
slower wherever the weights are larger than the input: each k then touches another cache line and, past
N = 1024, another page.

The micro-kernel (``_tile_intrinsic``) is LLVM vector IR, since no loop numba compiles keeps a tile of
accumulators in registers (local arrays stay in memory, an order of magnitude slower than OpenBLAS):
up to 6 rows by 16 columns, 12 ``<8 x float>`` accumulators, per input k two vector loads of the panel, six
broadcasts of the inputs and twelve fused multiply-adds (``llvm.fma``: 256-bit vfmadd on AVX2), then the bias,
the clamp and the store. Each output is its K products summed in order with one rounding each, so results
differ from sgemm's (which sums in blocks) within float32 rounding, as they do between BLAS libraries.

Blocking: the panels are taken in groups whose weights fit in half the L2 cache (GROUP_BYTES), each group over
blocks of rows that fit in half the L1 cache (ROW_BYTES), so a panel is read from L2 and a row block from L1
while the tiles run. With more than one thread (``compiled.get_num_threads``, read at each call) and at least
the policy's ``split_macs`` multiply-adds, the work is cut in two: by panels when the weights are the larger operand, by rows
otherwise, run by numba's ``prange``; each output is computed as on one thread (same bits).

:func:`batch_matmul` runs the same tiles on products whose right operand changes at every call (attention's
scores and weighted values): each batch's [K, N] operand is packed into a scratch buffer per call, which costs
K x N copies against M x K x N multiply-adds, so it is taken from 6 rows on, where it beats OpenBLAS on the
one thread OpenBLAS keeps beside numba's (and on two).

Which of the packed GEMM and NumPy's sgemm a layer runs is measured on the host (:func:`choose_linear`, through
runtime/tuning.py): the packed GEMM is faster for few rows or few inputs on one CPU, sgemm on large products
on another.

Imports only NumPy, compiled.py and tuning.py (numba and llvmlite on the first compile).
"""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from edgetorch.runtime import policy, tuning
from edgetorch.runtime.host import host as this_host
from edgetorch.runtime.kernels import compiled

WIDTH = 16  # output channels a panel: two 8-lane vectors
ROWS = 6  # rows a tile: 12 accumulators, 2 panel vectors and a broadcast fill 15 of AVX2's 16 registers
WIDE_ROWS = 8  # rows a tile of the 16-lane kernel: one panel vector and a broadcast a row, 8 accumulators
GROUP_BYTES = 256 * 1024
ROW_BYTES = 16 * 1024


def pack(w: np.ndarray, bias: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``w`` [K, N] (so that ``x @ w`` is the layer) and ``bias`` [N] or None as the kernel reads them: panels
    [ceil(N / 16), K, 16] and a bias of ceil(N / 16) * 16, both float32 and zero-padded."""
    k, n = w.shape
    panels = -(-n // WIDTH)
    wp = np.zeros((k, panels * WIDTH), np.float32)
    wp[:, :n] = w
    bp = np.zeros(panels * WIDTH, np.float32)
    if bias is not None:
        bp[:n] = bias.reshape(-1)
    return np.ascontiguousarray(wp.reshape(k, panels, WIDTH).transpose(1, 0, 2)), bp


def _tile_intrinsic(lanes: int = 8) -> Any:
    """``tile(a, i, wp, p, bias, lo, hi, y, rows, halves)``, a numba intrinsic over ``lanes``-float vectors (8:
    AVX2's registers, 16: AVX-512's, which LLVM splits in two where the CPU has no AVX-512, correct but slow):
    for r < rows (a literal, 1-6 with 8 lanes, 1-8 with 16),
    y[i + r, 16 p : 16 p + 8 halves] = clamp(a[i + r] @ wp[p] + bias[16 p : 16 p + 8 halves], lo, hi), the
    columns past y's last one left out; ``halves`` (a literal, 1 or 2) is 1 only for a last panel of at most 8
    columns, whose second half would multiply the packing's zeros. ``a`` [M, K] and ``y`` [M, N] float32 with contiguous rows, ``wp`` [P, K, 16] and
    ``bias`` [16 P] from :func:`pack`. The clamp keeps NaN (a compare and a select, as ``if v < lo: v = lo``)."""
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    f32 = ir.FloatType()
    v8 = ir.VectorType(f32, lanes)
    zero = ir.Constant(v8, [ir.Constant(f32, 0.0)] * lanes)
    most = ROWS if lanes == 8 else WIDE_ROWS

    @intrinsic(prefer_literal=True)
    def tile(typingctx, a, i, wp, p, bias, lo, hi, y, rows, halves):
        if not isinstance(rows, types.IntegerLiteral) or not 1 <= rows.literal_value <= most:
            return None
        if not isinstance(halves, types.IntegerLiteral) or halves.literal_value * 8 < lanes:
            return None
        if any(t.layout != "C" or t.dtype != types.float32 for t in (a, wp, bias, y)):
            return None
        count, used = rows.literal_value, halves.literal_value * 8 // lanes
        sig = types.void(a, i, wp, p, bias, lo, hi, y, rows, halves)

        def codegen(context, builder, signature, args):
            intp = context.get_value_type(types.intp)
            x, w, b, out = (context.make_array(signature.args[n])(context, builder, args[n]) for n in (0, 2, 4, 7))
            first, panel = (context.cast(builder, args[n], signature.args[n], types.intp) for n in (1, 3))
            k = builder.extract_value(x.shape, 1)
            n = builder.extract_value(out.shape, 1)
            fma = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(v8, [v8, v8, v8]), f"llvm.fma.v{lanes}f32"
            )

            const, vector, splat = compiled.ir_helpers(builder, v8, intp)

            def row(arr, r):
                """A float pointer to row ``first + r`` of the 2-D ``arr``."""
                at = builder.mul(builder.add(first, const(r)), builder.extract_value(arr.strides, 0))
                start = builder.gep(builder.bitcast(arr.data, ir.IntType(8).as_pointer()), [at], inbounds=True)
                return builder.bitcast(start, f32.as_pointer())

            xs = [row(x, r) for r in range(count)]
            base = builder.gep(w.data, [builder.mul(panel, builder.mul(k, const(WIDTH)))], inbounds=True)
            acc = [[cgutils.alloca_once_value(builder, zero) for _ in range(used)] for _ in range(count)]
            with cgutils.for_range(builder, k) as loop:
                at = builder.mul(loop.index, const(WIDTH))
                halves = [builder.load(vector(base, builder.add(at, const(lanes * h))), align=4) for h in range(used)]
                for r in range(count):
                    xb = splat(builder.load(builder.gep(xs[r], [loop.index], inbounds=True)))
                    for h in range(used):
                        builder.store(builder.call(fma, [xb, halves[h], builder.load(acc[r][h])]), acc[r][h])

            col = builder.mul(panel, const(WIDTH))
            bb = builder.gep(b.data, [col], inbounds=True)
            biases = [builder.load(vector(bb, const(lanes * h)), align=4) for h in range(used)]
            low, high = splat(args[5]), splat(args[6])
            results = []
            for r in range(count):
                for h in range(used):
                    v = builder.fadd(builder.load(acc[r][h]), biases[h])
                    v = builder.select(builder.fcmp_ordered("<", v, low), low, v)
                    results.append(builder.select(builder.fcmp_ordered(">", v, high), high, v))
            width = builder.sub(n, col)
            with builder.if_else(builder.icmp_signed(">=", width, const(lanes * used))) as (whole, partial_):
                with whole:
                    for r in range(count):
                        start = builder.gep(row(out, r), [col], inbounds=True)
                        for h in range(used):
                            builder.store(results[used * r + h], vector(start, const(lanes * h)), align=4)
                with partial_:  # the last panel of an N that is not a multiple of 16: through a stack tile
                    spill = builder.bitcast(cgutils.alloca_once(builder, ir.ArrayType(f32, WIDTH)), f32.as_pointer())
                    for r in range(count):
                        for h in range(used):
                            builder.store(results[used * r + h], vector(spill, const(lanes * h)), align=4)
                        start = builder.gep(row(out, r), [col], inbounds=True)
                        with cgutils.for_range(builder, width) as c:
                            builder.store(builder.load(builder.gep(spill, [c.index])), builder.gep(start, [c.index]))
            return context.get_dummy_value()

        return sig, codegen

    return tile


_tile: Any = None
_tile_wide: Any = None
prange: Any = range
call_at: Any = None


def _gemm_part(a, wp, bias, lo, hi, y, r0, r1, p0, p1):  # pragma: no cover - compiled
    """Rows r0 .. r1 and panels p0 .. p1 of the product by the 8-lane tiles."""
    _gemm_blocks(y, a, wp, bias, lo, hi, r0, r1, p0, p1, None)


def _gemm_blocks(y, a, wp, bias, lo, hi, r0, r1, p0, p1, wide):  # pragma: no cover - compiled
    """Rows r0 .. r1 and panels p0 .. p1 of y = clamp(a @ w + bias, lo, hi), blocked for the caches (module
    docstring), by the 8-lane tiles where ``wide`` is None and by the 16-lane ones where it is True: a type, not a
    value, so that numba prunes the 16-lane code from the 8-lane build (on a CPU without AVX-512, LLVM splits
    those vectors, and compiling them took a large share of this build). A last panel of at most 8 columns
    (N = 24, 40, ...) computes its first half only, by the 8-lane tiles. The packed GEMM's serial step (``y``
    first, as the other kernels' steps); its threads and the fused kernels call it at its address."""
    k = a.shape[1]
    tile = ROWS if wide is None else WIDE_ROWS
    group = max(1, GROUP_BYTES // (k * 4 * WIDTH))
    block = max(tile, ROW_BYTES // (4 * k) // tile * tile)
    half = wp.shape[0] * WIDTH - y.shape[1] >= WIDTH // 2
    for g0 in range(p0, p1, group):
        g1 = min(p1, g0 + group)
        for i0 in range(r0, r1, block):
            i1 = min(r1, i0 + block)
            for p in range(g0, g1):
                if half and p == wp.shape[0] - 1:
                    _half_panel(a, wp, p, bias, lo, hi, y, i0, i1)
                elif wide is not None:
                    _wide_panel(a, wp, p, bias, lo, hi, y, i0, i1)
                else:
                    _panel(a, wp, p, bias, lo, hi, y, i0, i1)


def _wide_panel(a, wp, p, bias, lo, hi, y, i0, i1):  # pragma: no cover - compiled
    """``_panel`` by the 16-lane tiles: whole tiles of 8 rows, then the rows left."""
    i = i0
    while i + WIDE_ROWS <= i1:
        _tile_wide(a, i, wp, p, bias, lo, hi, y, 8, 2)
        i += WIDE_ROWS
    left = i1 - i
    if left == 1:
        _tile_wide(a, i, wp, p, bias, lo, hi, y, 1, 2)
    elif left == 2:
        _tile_wide(a, i, wp, p, bias, lo, hi, y, 2, 2)
    elif left == 3:
        _tile_wide(a, i, wp, p, bias, lo, hi, y, 3, 2)
    elif left == 4:
        _tile_wide(a, i, wp, p, bias, lo, hi, y, 4, 2)
    elif left == 5:
        _tile_wide(a, i, wp, p, bias, lo, hi, y, 5, 2)
    elif left == 6:
        _tile_wide(a, i, wp, p, bias, lo, hi, y, 6, 2)
    elif left == 7:
        _tile_wide(a, i, wp, p, bias, lo, hi, y, 7, 2)


def _panel(a, wp, p, bias, lo, hi, y, i0, i1):  # pragma: no cover - compiled
    """Rows i0 .. i1 of panel ``p``: whole tiles of 6 rows, then the rows left."""
    i = i0
    while i + ROWS <= i1:
        _tile(a, i, wp, p, bias, lo, hi, y, 6, 2)
        i += ROWS
    left = i1 - i
    if left == 1:
        _tile(a, i, wp, p, bias, lo, hi, y, 1, 2)
    elif left == 2:
        _tile(a, i, wp, p, bias, lo, hi, y, 2, 2)
    elif left == 3:
        _tile(a, i, wp, p, bias, lo, hi, y, 3, 2)
    elif left == 4:
        _tile(a, i, wp, p, bias, lo, hi, y, 4, 2)
    elif left == 5:
        _tile(a, i, wp, p, bias, lo, hi, y, 5, 2)


def _half_panel(a, wp, p, bias, lo, hi, y, i0, i1):  # pragma: no cover - compiled
    """``_panel`` on the first 8 columns of panel ``p`` only."""
    i = i0
    while i + ROWS <= i1:
        _tile(a, i, wp, p, bias, lo, hi, y, 6, 1)
        i += ROWS
    left = i1 - i
    if left == 1:
        _tile(a, i, wp, p, bias, lo, hi, y, 1, 1)
    elif left == 2:
        _tile(a, i, wp, p, bias, lo, hi, y, 2, 1)
    elif left == 3:
        _tile(a, i, wp, p, bias, lo, hi, y, 3, 1)
    elif left == 4:
        _tile(a, i, wp, p, bias, lo, hi, y, 4, 1)
    elif left == 5:
        _tile(a, i, wp, p, bias, lo, hi, y, 5, 1)


def _gemm_split(blocks, out, a, wp, bias, lo, hi, wide, parts):  # pragma: no cover - compiled
    """The product cut into ``parts`` runs of panels (weights larger than the input) or of rows (in whole
    tiles), each run by ``_gemm_blocks`` at ``blocks``, its ``compiled.address`` for these arguments (compiled
    once, not again inside this build), on numba's threads."""
    m, panels = a.shape[0], wp.shape[0]
    tile = ROWS if wide is None else WIDE_ROWS
    by_panels = out.shape[1] >= m or m < 2 * tile * parts
    if by_panels:
        run = -(-panels // parts)
    else:
        share = -(-m // parts)
        run = -(-share // tile) * tile  # whole tiles a thread
    for t in prange(parts):
        if by_panels:
            p0 = min(panels, t * run)
            call_at(_gemm_blocks, blocks, (out, a, wp, bias, lo, hi, 0, m, p0, min(panels, p0 + run), wide))
        else:
            r0 = min(m, t * run)
            call_at(_gemm_blocks, blocks, (out, a, wp, bias, lo, hi, r0, min(m, r0 + run), 0, panels, wide))


def _pack_batch(b, wp, bi):  # pragma: no cover - compiled
    """wp[bi] = batch ``bi`` of ``b`` [B, K, N] (any strides) in panels, as :func:`pack` lays them out."""
    k, n = b.shape[1], b.shape[2]
    for p in range(wp.shape[1]):
        for kk in range(k):
            for j in range(WIDTH):
                c = p * WIDTH + j
                wp[bi, p, kk, j] = b[bi, kk, c] if c < n else 0.0


def _bmm(out, a, b, wp, bias, parts):  # pragma: no cover - compiled
    """out[i] = a[i] @ b[i] for every batch i: ``b`` [B, K, N] packed into the scratch ``wp`` [B, P, K, 16],
    then the tiles of all batches (batch by batch, rows in whole tiles) cut into ``parts`` runs. Compiled
    twice: serially (``prange`` runs as ``range``) and with numba's threads."""
    batches, m = a.shape[0], a.shape[1]
    for bi in prange(batches):
        _pack_batch(b, wp, bi)
    tiles = -(-m // ROWS)
    run = -(-(batches * tiles) // parts)
    inf = np.float32(np.inf)
    for t in prange(parts):
        first, last = t * run, min(batches * tiles, (t + 1) * run)
        while first < last:
            bi = first // tiles
            upto = min(last, (bi + 1) * tiles)
            r0, r1 = (first - bi * tiles) * ROWS, min(m, (upto - bi * tiles) * ROWS)
            _gemm_part(a[bi], wp[bi], bias, -inf, inf, out[bi], r0, r1, 0, wp.shape[1])
            first = upto


ROW_PANELS = 8  # panels a call of the one-row kernel


def _row_intrinsic(lanes: int = 8) -> Any:
    """``row(x, wp, p, count, bias, lo, hi, out)``, a numba intrinsic over ``lanes``-float vectors (8 or 16):
    for the ``count`` (a literal, 1 to ``ROW_PANELS``) panels from ``p`` on,
    out[16 q : 16 q + 16] = clamp(x @ wp[q] + bias[16 q : 16 q + 16], lo, hi), the whole padded panel. ``x``
    [K] and ``out`` [16 P] float32, ``wp`` and ``bias`` from :func:`pack`. The tiles' arithmetic (each output
    its K fused multiply-adds in order from zero, then the bias, then the clamp), so the same bits; but one
    row of a tile is one chain of dependent multiply-adds, waiting on each one's latency, where here the
    vectors of 8 panels (16 lanes; of 4 panels a pass over K on 8 lanes) are chains of their own, in flight
    together while the weights stream from memory."""
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    f32 = ir.FloatType()
    vec = ir.VectorType(f32, lanes)
    zero = ir.Constant(vec, [ir.Constant(f32, 0.0)] * lanes)
    per_panel = WIDTH // lanes
    most = ROW_PANELS * lanes // WIDTH  # panels a pass over K: 8 accumulators

    @intrinsic(prefer_literal=True)
    def row(typingctx, x, wp, p, count, bias, lo, hi, out):
        if not isinstance(count, types.IntegerLiteral) or not 1 <= count.literal_value <= ROW_PANELS:
            return None
        if any(t.layout != "C" or t.dtype != types.float32 for t in (x, wp, bias, out)):
            return None
        panels = count.literal_value
        sig = types.void(x, wp, p, count, bias, lo, hi, out)

        def codegen(context, builder, signature, args):
            intp = context.get_value_type(types.intp)
            xa, wa, ba, oa = (context.make_array(signature.args[n])(context, builder, args[n]) for n in (0, 1, 4, 7))
            first = context.cast(builder, args[2], signature.args[2], types.intp)
            k = builder.extract_value(xa.shape, 0)
            fma = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(vec, [vec] * 3), f"llvm.fma.v{lanes}f32"
            )

            const, vector, splat = compiled.ir_helpers(builder, vec, intp)
            stride = builder.mul(k, const(WIDTH))  # floats a panel
            low, high = splat(args[5]), splat(args[6])
            for g0 in range(0, panels, most):
                group = range(g0, min(panels, g0 + most))
                starts = [builder.mul(builder.add(first, const(g)), stride) for g in group]
                acc = [cgutils.alloca_once_value(builder, zero) for _ in range(len(group) * per_panel)]
                with cgutils.for_range(builder, k) as loop:
                    xb = splat(builder.load(builder.gep(xa.data, [loop.index], inbounds=True)))
                    at = builder.mul(loop.index, const(WIDTH))
                    for j, a in enumerate(acc):
                        w = vector(
                            wa.data,
                            builder.add(starts[j // per_panel], builder.add(at, const(lanes * (j % per_panel)))),
                        )
                        builder.store(builder.call(fma, [xb, builder.load(w, align=4), builder.load(a)]), a)
                col = builder.mul(builder.add(first, const(g0)), const(WIDTH))
                for j, a in enumerate(acc):
                    at = builder.add(col, const(lanes * j))
                    v = builder.fadd(builder.load(a), builder.load(vector(ba.data, at), align=4))
                    v = builder.select(builder.fcmp_ordered("<", v, low), low, v)
                    v = builder.select(builder.fcmp_ordered(">", v, high), high, v)
                    builder.store(v, vector(oa.data, at), align=4)
            return context.get_dummy_value()

        return sig, codegen

    return row


_row: Any = None


def _row_panels(x, wp, bias, lo, hi, out, p0, p1):  # pragma: no cover - compiled
    """Panels p0 .. p1 of the one-row product into the padded ``out``, ``ROW_PANELS`` at a time, then the
    panels left in calls of 4, 2 and 1."""
    p = p0
    while p + ROW_PANELS <= p1:
        _row(x, wp, p, 8, bias, lo, hi, out)
        p += ROW_PANELS
    if p1 - p >= 4:
        _row(x, wp, p, 4, bias, lo, hi, out)
        p += 4
    if p1 - p >= 2:
        _row(x, wp, p, 2, bias, lo, hi, out)
        p += 2
    if p1 - p == 1:
        _row(x, wp, p, 1, bias, lo, hi, out)


def _gemv_part(y, x, wp, bias, lo, hi, out, p0, p1):  # pragma: no cover - compiled
    """Panels p0 .. p1 of ``y`` [1, N] = clamp(x @ w + bias, lo, hi), through the padded row ``out``: the
    one-row product's serial step (all panels); its threads call it at its address."""
    _row_panels(x[0], wp, bias, lo, hi, out, p0, p1)
    n = y.shape[1]
    for c in range(min(n, p0 * WIDTH), min(n, p1 * WIDTH)):
        y[0, c] = out[c]


def _gemv_split(part, y, x, wp, bias, lo, hi, out, parts):  # pragma: no cover - compiled
    """The one-row product cut into ``parts`` runs of panels, each by ``_gemv_part`` at ``part`` (its
    ``compiled.address`` for these arguments), on numba's threads."""
    panels = wp.shape[0]
    run = -(-panels // parts)
    for t in prange(parts):
        p0 = min(panels, t * run)
        call_at(_gemv_part, part, (y, x, wp, bias, lo, hi, out, p0, min(panels, p0 + run)))


def row_step(packed: PackedGemm, x2: np.ndarray, y2: np.ndarray) -> Callable[[], None]:
    """The call that computes the one row ``y2`` [1, N] from ``x2`` [1, K] (both float32, C-contiguous) as
    ``packed.step`` does, with its bits, by the one-row kernel: a layer with one input row (a classifier, a
    decode step) reads each weight once, so the product runs at the speed the weights stream in when many
    panels are summed at once. On the host's widest vectors (16 lanes with AVX-512, else 8; the same bits).
    Split over the threads ``compiled.split`` gives it, by panels, from the policy's ``split_macs``
    multiply-adds."""
    if x2.shape != (1, packed.k) or y2.shape != (1, packed.n) or not compiled.flat_float32(x2, y2):
        raise ValueError(f"one-row product of [1, {packed.k}] x [{packed.k}, {packed.n}]: got {x2.shape} -> {y2.shape}")
    HELPERS.require("row_step")
    out = np.empty(packed.wp.shape[0] * WIDTH, np.float32)
    args = (y2, x2, packed.wp, packed.bias, packed.lo, packed.hi, out)
    worth = packed.k * packed.n >= policy.current().split_macs
    whole = (*args, 0, packed.wp.shape[0])
    return compiled.part_split_step("gemv_split", _gemv_split, _gemv_part, whole, args, packed.wp.shape[0], worth)


def linear_step(packed: PackedGemm, x2: np.ndarray, y2: np.ndarray, kernel: str = "packed") -> Callable[[], None]:
    """The packed layer's step from ``x2`` [M, K] to ``y2`` [M, N]: :func:`row_step` for one float32 row,
    ``packed.step`` by ``kernel`` otherwise; the same bits either way."""
    if x2.shape[0] == 1 and compiled.flat_float32(x2):
        return row_step(packed, x2, y2)
    return packed.step(x2, y2, kernel)


class PackedGemm:
    """``y = clamp(x @ w + bias, lo, hi)`` for a constant ``w`` [K, N], packed once at construction (which
    requires the tier: ``policy.compiled_tier()``); :meth:`step` binds it to an input and an output."""

    def __init__(self, w: np.ndarray, bias: np.ndarray | None, lo: float = -np.inf, hi: float = np.inf) -> None:
        HELPERS.require("PackedGemm")
        self.k, self.n = w.shape
        self.wp, self.bias = pack(w, bias)
        self.has_bias = bias is not None
        self.lo, self.hi = np.float32(lo), np.float32(hi)

    def first(self, n: int) -> PackedGemm:
        """The layer's first ``n`` output channels (``n`` a multiple of 16, or all of them), sharing the packed
        weights: what tuning times in place of a large layer."""
        if n == self.n:
            return self
        part = copy.copy(self)
        part.n, part.wp, part.bias = n, self.wp[: -(-n // WIDTH)], self.bias[: -(-n // WIDTH) * WIDTH]
        return part

    def step(self, x2: np.ndarray, y2: np.ndarray, kernel: str = "packed") -> Callable[[], None]:
        """The call that computes ``y2`` [M, N] (float32, C-contiguous) from ``x2`` [M, K] (copied first when
        it is not float32 and C-contiguous) by ``kernel`` (one of :func:`packed_kernels`: ``"packed16"`` runs
        the 16-lane tiles, the same bits); from the policy's ``split_macs`` multiply-adds on, split over the
        threads ``compiled.split`` gives it at each call."""
        if y2.shape != (x2.shape[0], self.n) or x2.shape[1] != self.k or not compiled.flat_float32(y2):
            raise ValueError(f"packed GEMM of [M, {self.k}] x [{self.k}, {self.n}]: got {x2.shape} -> {y2.shape}")
        if not compiled.flat_float32(x2):
            flat = np.empty(x2.shape, np.float32)
            return partial(_in_turn, partial(np.copyto, flat, x2), self.step(flat, y2, kernel))
        args = (y2, x2, self.wp, self.bias, self.lo, self.hi)
        wide = wide_tiles(kernel)
        whole = (*args, 0, x2.shape[0], 0, self.wp.shape[0], wide)
        limit = max(self.wp.shape[0], -(-x2.shape[0] // ROWS))
        worth = x2.shape[0] * self.k * self.n >= policy.current().split_macs
        return compiled.part_split_step("gemm_split", _gemm_split, _gemm_blocks, whole, (*args, wide), limit, worth)


def wide_tiles(kernel: str) -> bool | None:
    """``_gemm_blocks``'s ``wide`` for ``kernel`` (one of :func:`packed_kernels`): True for ``"packed16"``,
    else None."""
    return True if kernel == "packed16" else None


def packed_kernels() -> tuple[str, ...]:
    """The packed GEMM's variants this host may run: ``"packed"`` (8-lane tiles), and ``"packed16"`` (16-lane
    tiles) where the CPU has AVX-512; which one is faster is measured (:func:`choose_packed`)."""
    return ("packed", "packed16") if this_host().vector_bits >= 512 else ("packed",)


def choose_packed(packed: PackedGemm, rows: int, where: str = "") -> tuning.Decision:
    """Which of :func:`packed_kernels` computes ``rows`` rows of the layer ``packed`` holds, by the host's
    measurement (runtime/tuning.py, family ``"packed-gemm"``; one candidate, not timed, without AVX-512);
    timed as :func:`choose_linear` times them."""

    def candidates() -> dict[str, Callable[[], object]]:
        part, x, y = _tuning_operands(packed, rows)
        return {name: part.step(x, y, name) for name in packed_kernels()}

    return tuning.choose("packed-gemm", f"{rows}x{packed.k}x{packed.n}", packed_kernels(), candidates, where)


def _tuning_operands(packed: PackedGemm, rows: int) -> tuple[PackedGemm, np.ndarray, np.ndarray]:
    """The layer, or past the policy's ``tune_macs`` its first output channels (a whole number of panels), and
    random operands of ``rows`` rows to time it on."""
    x = np.random.default_rng(0).standard_normal((rows, packed.k), dtype=np.float32)
    n = min(packed.n, max(WIDTH, policy.current().tune_macs // max(1, rows * packed.k) // WIDTH * WIDTH))
    part = packed.first(n)
    return part, x, np.empty((rows, n), np.float32)


def sgemm_step(
    x2: np.ndarray, w: np.ndarray, bias: np.ndarray | None, lo: float, hi: float, y2: np.ndarray
) -> Callable[[], None]:
    """``y2 = clamp(x2 @ w + bias, lo, hi)`` with NumPy's matmul (sgemm on ``w`` as stored, transposed views
    included) and the bias and clamp as two more passes: the packed GEMM's other candidate."""
    steps: list[Callable[[], Any]] = [partial(np.matmul, x2, w, out=y2)]
    if bias is not None:
        steps.append(partial(np.add, y2, bias, out=y2))
    if lo > -np.inf or hi < np.inf:
        steps.append(partial(np.clip, y2, lo, hi, out=y2))
    return steps[0] if len(steps) == 1 else partial(_all, steps)


def _all(steps: list[Callable[[], Any]]) -> None:
    for step in steps:
        step()


def linear_kernels() -> tuple[str, ...]:
    """What a layer whose weights are constants may run on this host: :func:`packed_kernels`, then sgemm."""
    return (*packed_kernels(), "sgemm")


def choose_linear(packed: PackedGemm, w: np.ndarray, rows: int, where: str = "") -> tuning.Decision:
    """Which of :func:`linear_kernels` computes ``rows`` rows of the layer ``packed`` holds
    (``w`` [K, N]: its weights as sgemm would read them), by the host's measurement (runtime/tuning.py); the
    packed GEMM unless measured slower. All are timed on random inputs of the shape, with the layer's bias and
    clamp; a product of more than the policy's ``tune_macs`` multiply-adds on its first output channels only (a
    whole number of panels, at least one), so that a language model's head is not run in full four times at
    load."""
    names = linear_kernels()

    def candidates() -> dict[str, Callable[[], object]]:
        part, x, y = _tuning_operands(packed, rows)
        bias = part.bias[: part.n] if packed.has_bias else None
        sgemm = sgemm_step(x, w[:, : part.n], bias, float(packed.lo), float(packed.hi), y)
        return {**{name: part.step(x, y, name) for name in packed_kernels()}, "sgemm": sgemm}

    return tuning.choose("gemm", f"{rows}x{packed.k}x{packed.n}", names, candidates, where)


def batch_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> Callable[[], None] | None:
    """The step ``out[i] = a[i] @ b[i]`` over the leading dimensions of float32 operands that change at every
    call (attention's scores and weighted values): each batch of ``b`` packed into a scratch buffer per call
    (K x N floats against M x K x N multiply-adds), then the packed GEMM's tiles, over the threads from
    the policy's ``split_macs``. ``a`` [..., M, K] and ``b`` [..., K, N] have the same leading dimensions, ``b``
    at any strides (e.g. a transposed view); the tier must be on. None (the caller keeps ``np.matmul``) for other
    dtypes or shapes, for fewer than 6 rows, or where ``a`` or ``out`` would need copying to be read as
    [B, M, K] and [B, M, N]."""
    HELPERS.require("batch_matmul")
    if a.ndim < 3 or a.shape[:-2] != b.shape[:-2] or out.shape != a.shape[:-1] + b.shape[-1:]:
        return None
    if a.shape[-1] != b.shape[-2] or b.dtype != np.float32 or not compiled.flat_float32(a, out):
        return None
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    if (
        out.size * k < policy.current().batch_macs or m < ROWS
    ):  # packing B costs K x N: a decode step's one row would not repay it
        return None
    a3, out3 = a.reshape(-1, m, k), out.reshape(-1, m, n)
    try:
        b3 = np.reshape(b, (a3.shape[0], k, n), copy=False)
    except ValueError:  # only a copy could merge its leading axes
        return None
    panels = (a3.shape[0], -(-n // WIDTH), k, WIDTH)
    args = (out3, a3, b3, panels, math.prod(panels), np.zeros(panels[1] * WIDTH, np.float32))
    serial = partial(_batched, compiled.compiled("bmm", _bmm), *args, 1)
    parallel = partial(_batched, compiled.compiled("bmm_split", _bmm, parallel=True))
    limit = a3.shape[0] * -(-m // ROWS)
    return compiled.split_step(serial, parallel, args, limit, a3.shape[0] * m * k * n >= policy.current().split_macs)


_SCRATCH = threading.local()


def _batched(
    kernel: Any, out: np.ndarray, a: np.ndarray, b: np.ndarray, panels: tuple, size: int, bias: np.ndarray, parts: int
) -> None:
    """``kernel`` (``_bmm``) with ``b``'s panels packed into the calling thread's scratch buffer, which every
    batched product shares (grown to the largest): an LLM prefill's attention, one product per layer, would
    otherwise hold a buffer each. ``size`` is the panels' element count (computed at load)."""
    buffer = getattr(_SCRATCH, "buffer", None)
    if buffer is None or buffer.size < size:
        buffer = _SCRATCH.buffer = np.empty(size, np.float32)
    kernel(out, a, b, buffer[:size].reshape(panels), bias, parts)


def _in_turn(first: Callable[[], Any], then: Callable[[], Any]) -> None:
    first()
    then()


HELPERS = compiled.Helpers(
    globals(),
    compile=("_gemm_part", "_gemm_blocks", "_pack_batch", "_gemv_part"),
    inline=("_panel", "_half_panel", "_wide_panel", "_row_panels"),  # each called at one place: no build of its own
    build={
        "_tile": _tile_intrinsic,
        "_tile_wide": partial(_tile_intrinsic, 16),
        "_row": lambda: _row_intrinsic(16 if this_host().vector_bits >= 512 else 8),
    },
)
