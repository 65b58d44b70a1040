"""Integer GEMV / small-M GEMM for XNNPACK's dynamically quantized fully connected, in the optional [fast]
tier (numba; see fast.py): QD8 activations (int8 per row) times QC8W (int8 per output channel) or QB4W (4-bit,
one scale per block of inputs) weights, with the weights kept as integers in memory.

Without it the node dequantizes its weights to float32 at load and runs sgemm, so an int8 layer holds 4x and a
4-bit one 8x its stored bytes and reads that much per call: a decode step (M = 1) is one pass over the
weights, memory bound, and runs no faster than the float32 model. Here each output is an exact int32 dot
product of the centred input (q - zero point, in [-255, 255], held as int16) with the weights, then scaled:

* QC8W: ``float(dot) * input scale * channel scale + bias``, the weights as the program stores them
  ([N, K] int8, no copy).
* QB4W: one int32 dot per block of ``block`` inputs, each times its block scale into a float32 sum (in block
  order), then times the input scale, plus the bias. The weights stay 4-bit, two a byte (byte j of a channel
  holds inputs 2j and 2j + 1, low nibble first, + 8, as XNNPACK packs them), regrouped at load so that the 8
  bytes (16 inputs) of a group of channels that the kernel takes in one pass are one run of memory
  (``arrange_qb4w``), in a tile of channels a thread; no other copy, and no padding when N is a multiple
  of 64 a tile.

Only integer sums are vectorised (they are exact in any order; numba compiles without fastmath, so LLVM
leaves the float32 sums in their written order). The QB4W loops are written in the shapes LLVM vectorises,
checked by timing them against the same code compiled with vectorisation off (``NUMBA_LOOP_VECTORIZE=0
NUMBA_SLP_VECTORIZE=0``, bench/qgemv_ab.py --gemv); QC8W's dot products are LLVM vector IR
(``_madd_intrinsic``), checked in the assembly (numba's ``inspect_asm``: 256-bit vpmaddwd, AVX2):

* QC8W: per output channel an int16 x int8 reduction along K, 16 inputs a step: the weights widened once
  and multiplied with 4, 2 or 1 input rows, each summed in pairs into 8 int32 lanes (vpmaddwd); the plain
  loop (``acc += x[j] * w[j]``) gives 128-bit vpmaddwd only (8 products an instruction, not 16) and one row
  a pass over the weights. The float epilogue is a separate loop: inside the dot product's loop it makes
  LLVM vectorise the dot worse.
* QB4W: the innermost loop runs across output channels (a block's 16 bytes along K are too short for the
  loop vectoriser: unrolled and left scalar), in 16-bit lanes (16 a vector, vpmullw, twice int32's), 8 bytes
  of a channel at a time: e b + d (b >> 4) per byte, with e the even input, d = odd - 16 even and b the byte,
  equals e (lo - 8) + o (hi - 8) + 8 (e + o), so there is no nibble mask and the offset is one subtraction
  per 8 bytes; 8 bytes' true sum fits int16, so the wrapping 16-bit sums are exact; then widened into int32
  per block. numba types the products int64, but when only their int16 store is used LLVM narrows them.
  Each 8 bytes of GROUP channels are stored together ([K / 16, N / GROUP, 8, GROUP]) so that every pass is
  one sequential run the hardware prefetcher follows (short rows of a [K / 2, N] layout stream poorly);
  from the policy's ``gemv_wide`` channels on (an LLM's output head) the group is all N. Several rows (M = 2-16) take one pass
  over the weights each: past one row the multiplies bound it, not the bytes. QB4W blocks must be multiples
  of 16 inputs (8 bytes a partial sum); for other blocks the node dequantizes at load. Unpacking to int8 at
  load would double the memory and does not vectorise better.
* Threads (``edgetorch.runtime.set_num_threads``, read at each call): in a large program (one that does not
  keep float32 weights, the policy's ``gemv_float_budget``: an LLM's decode), from the policy's ``gemv_split_macs`` multiply-adds a call is cut into runs
  of output channels, one a thread, run by a ``prange`` over the runs (numba's OpenMP layer, its default
  here; its threads spin a while after a loop, so the next call wakes them cheaply), each run through the
  serial code on views of its channels, so every output is computed exactly as on one thread
  (bit-identical). QB4W runs are whole tiles of the load-time layout (one a thread as
  ``get_num_threads()`` was at load), each with its own scratch rows, so two threads never store to one
  cache line. A Python-level split (a persistent worker thread woken through a lock) costs more in the
  hand-off than a decode GEMV takes. The spinning OpenMP worker competes with BLAS's second thread, which
  is why a small program does not split.

The measurements behind these choices: docs/benchmarks.md, "Integer GEMV for dynamically quantized linears".

Imports only NumPy and edgetorch.runtime's compiled tier (numba on first compile, through fast.py).
"""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

import numpy as np

from edgetorch.backends.xnnpack import fast, qgemv_vnni, qgemv_vnni8
from edgetorch.runtime import policy, tuning
from edgetorch.runtime.kernels import compiled as compiled_kernels

# QB4W output channels whose 8 bytes are stored together (``arrange_qb4w``): GROUP, or all N from the policy's
# ``gemv_wide`` on.
GROUP = 64

# How far ahead (bytes) the QC8W kernel prefetches its weights in a large program (one that does not keep
# float32 weights, the policy's ``gemv_float_budget``: its layers come from memory, not cache). In cache prefetching costs time, so
# a small program makes none.
AHEAD = 4096

# The fewest multiply-adds (M N K) a GEMV call splits across threads at; below it the call stays on the calling
# thread: waking the other costs more than it saves (bench/qgemv_ab.py --split).


def _qc8w(xc, xi, w, xscale, wscale, bias, lo, hi, y, dots, ahead, parts):  # pragma: no cover - compiled
    """y[m, n] = clamp(float(sum_k xc[m, k] * w[n, k]) * xscale[m] * wscale[n] + bias[n], lo, hi).

    ``xc`` [M, K] float32 centred input (integers in [-255, 255]), ``xi`` an int16 [M, K] scratch, ``w`` [N, K]
    int8, ``xscale`` [M, 1], ``wscale`` [N] float32, ``bias`` [N] float32 or empty, ``y`` [M, N] float32,
    ``dots`` an int32 [M * N] scratch, ``ahead`` the prefetch distance in bytes (0: none; ``_madd``), ``parts``
    how many runs of channels the work is cut into (``_qc8w_run``), here one after another."""
    _qc8w_input(xc, xi)
    for p in range(parts):
        _qc8w_run(p, parts, xi, w, xscale, wscale, bias, lo, hi, y, dots, ahead)


def _qc8w_threaded(xc, xi, w, xscale, wscale, bias, lo, hi, y, dots, ahead, parts):  # pragma: no cover - compiled
    """``_qc8w`` with its parts run on numba's threads (``prange``, compiled with ``parallel=True``)."""
    _qc8w_input(xc, xi)
    for p in prange(parts):
        _qc8w_run(p, parts, xi, w, xscale, wscale, bias, lo, hi, y, dots, ahead)


def _share(p, parts, count):  # pragma: no cover - compiled
    """Part ``p``'s share of ``count`` items cut into ``parts``: items first .. last - 1, (first, last). The
    shares of p = 0 .. parts - 1 take every item once, in order, their sizes at most one apart."""
    return p * count // parts, (p + 1) * count // parts


def _qc8w_input(xc, xi):  # pragma: no cover - compiled
    """xi = xc as int16."""
    m, k = xc.shape
    for i in range(m):
        for j in range(k):
            xi[i, j] = np.int16(xc[i, j])


def _qc8w_run(p, parts, xi, w, xscale, wscale, bias, lo, hi, y, dots, ahead):  # pragma: no cover - compiled
    """Part ``p`` of ``parts``: channels p N // parts up to (p + 1) N // parts, through ``_qc8w_part``."""
    m = xi.shape[0]
    first, last = _share(p, parts, w.shape[0])
    out = dots[m * first : m * last].reshape((m, last - first))
    _qc8w_part(xi, w[first:last], xscale, wscale[first:last], bias[first:last], lo, hi, y, first, out, ahead)


def _qc8w_part(xi, w, xscale, wscale, bias, lo, hi, y, first, dots, ahead):  # pragma: no cover - compiled
    """``_qc8w`` for the channels first .. first + len(w) - 1: ``w``, ``wscale``, ``bias`` (or empty) and the
    int32 [M, len(w)] scratch ``dots`` are theirs, ``y`` is all [M, N]. Each channel's dot products come from
    ``_madd`` over the first 16 (K // 16) inputs, 4, 2 then 1 rows a call (the weights read and widened once for
    the rows), plus the last K % 16 inputs here. The float epilogue is a second loop: inside the dot product's
    loop it made LLVM vectorise the dot worse. Every loop indexes from 0 (views, not offsets):
    an index LLVM cannot prove non-negative keeps numba's negative-index wraparound in the loop, which then
    vectorises worse (``_qb4w_tile``)."""
    m, k = xi.shape
    n = w.shape[0]
    chunks = k // 16
    for c in range(n):
        i = 0
        while i + 4 <= m:
            _madd(xi, i, w, c, dots, chunks, ahead, 4)
            i += 4
        if i + 2 <= m:
            _madd(xi, i, w, c, dots, chunks, ahead, 2)
            i += 2
        if i < m:
            _madd(xi, i, w, c, dots, chunks, ahead, 1)
        if 16 * chunks < k:
            row = w[c]
            for i in range(m):
                acc = dots[i, c]
                for j in range(16 * chunks, k):
                    acc += np.int32(xi[i, j]) * np.int32(row[j])
                dots[i, c] = acc
    with_bias = bias.shape[0] > 0
    for i in range(m):
        out = y[i, first : first + n]
        for c in range(n):
            v = np.float32(dots[i, c]) * xscale[i, 0] * wscale[c]
            if with_bias:
                v = v + bias[c]
            if v < lo:
                v = lo
            if v > hi:
                v = hi
            out[c] = v


_madd: Any = None


def _madd_intrinsic() -> Any:
    """``madd(xi, i, w, c, dots, chunks, ahead, rows)``, a numba intrinsic: dots[i + r, c] = the int32 dot
    product of xi[i + r, :16 chunks] (int16) and w[c, :16 chunks] (int8) for r < rows (a literal, at most 4
    accumulators and the widened weights in registers); first, when ``ahead`` > 0, a prefetch of each 64-byte
    line of the weights ``ahead`` bytes further on (a channel's length of them: with consecutive channels, every
    line once).

    Written as LLVM vector IR because no loop numba compiles gives LLVM this shape: per 16 inputs the 16
    products as int32 lanes, then the even lanes plus the odd ones, which the x86 backend turns into one 256-bit
    vpmaddwd (16 products summed in pairs into 8 int32 lanes; the pairs' sums fit, at most 2 * 255 * 128) after
    a vpmovsxbw of the 16 weight bytes, shared by the rows. The plain loop (``acc += x[j] * w[j]``) is
    vectorised at 8 int32 lanes, the width of its widest type, so the backend only makes 128-bit vpmaddwd of it,
    half of each 256-bit accumulator idle; the even/odd loop over pairs of inputs came out as 128-bit vpmaddwd
    plus shuffles (slower still), and loops of explicit lanes need numba's SLP vectoriser, off by default
    (``NUMBA_SLP_VECTORIZE``). The IR is generic (other targets pick their own instructions), exact in any
    order, as every sum wraps modulo 2**32 like the loop it replaces."""
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    i32, bytes_ = ir.IntType(32), ir.IntType(8).as_pointer()
    lanes, pairs = ir.VectorType(i32, 16), ir.VectorType(i32, 8)
    even = ir.Constant(pairs, [ir.Constant(i32, 2 * t) for t in range(8)])
    odd = ir.Constant(pairs, [ir.Constant(i32, 2 * t + 1) for t in range(8)])
    zero = ir.Constant(pairs, [ir.Constant(i32, 0)] * 8)

    @intrinsic(prefer_literal=True)
    def madd(typingctx, xi, i, w, c, dots, chunks, ahead, rows):
        if not isinstance(rows, types.IntegerLiteral) or any(a.layout != "C" for a in (xi, w, dots)):
            return None
        count = rows.literal_value
        sig = types.void(xi, i, w, c, dots, chunks, ahead, rows)

        def codegen(context, builder, signature, args):
            intp = context.get_value_type(types.intp)
            x, wt, d = (context.make_array(signature.args[a])(context, builder, args[a]) for a in (0, 2, 4))
            first, channel, n16, skip = (
                context.cast(builder, args[a], signature.args[a], types.intp) for a in (1, 3, 5, 6)
            )

            def row(arr, index, offset, item):
                """A pointer to row ``index + offset`` of the 2-D ``arr``, as ``item`` elements."""
                at = builder.mul(builder.add(index, ir.Constant(intp, offset)), builder.extract_value(arr.strides, 0))
                start = builder.gep(builder.bitcast(arr.data, bytes_), [at], inbounds=True)
                return builder.bitcast(start, item.as_pointer())

            def load16(start, j, item):
                """Elements j .. j + 15 from ``start``, widened to 16 int32 lanes."""
                at = builder.bitcast(builder.gep(start, [j], inbounds=True), ir.VectorType(item, 16).as_pointer())
                return builder.sext(builder.load(at, align=item.width // 8), lanes)

            xs = [row(x, first, r, ir.IntType(16)) for r in range(count)]
            ws = row(wt, channel, 0, ir.IntType(8))
            with builder.if_then(builder.icmp_signed(">", skip, ir.Constant(intp, 0))):
                prefetch = cgutils.get_or_insert_function(
                    builder.module, ir.FunctionType(ir.VoidType(), [bytes_, i32, i32, i32]), "llvm.prefetch.p0"
                )
                lines = builder.udiv(builder.add(n16, ir.Constant(intp, 3)), ir.Constant(intp, 4))
                with cgutils.for_range(builder, lines) as line:
                    at = builder.add(skip, builder.mul(line.index, ir.Constant(intp, 64)))
                    # read, keep in every cache level, data; past the weights' end it is a no-op (never faults)
                    flags = [ir.Constant(i32, v) for v in (0, 3, 1)]
                    builder.call(prefetch, [builder.gep(builder.bitcast(ws, bytes_), [at]), *flags])
            acc = [cgutils.alloca_once_value(builder, zero) for _ in range(count)]
            with cgutils.for_range(builder, n16) as loop:
                j = builder.mul(loop.index, ir.Constant(intp, 16))
                wv = load16(ws, j, ir.IntType(8))
                for r in range(count):
                    p = builder.mul(load16(xs[r], j, ir.IntType(16)), wv, flags=["nsw"])
                    s = builder.add(builder.shuffle_vector(p, p, even), builder.shuffle_vector(p, p, odd))
                    builder.store(builder.add(builder.load(acc[r]), s), acc[r])
            total = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(i32, [pairs]), "llvm.vector.reduce.add.v8i32"
            )
            for r in range(count):
                out = builder.gep(row(d, first, r, i32), [channel], inbounds=True)
                builder.store(builder.call(total, [builder.load(acc[r])]), out)
            return context.get_dummy_value()

        return sig, codegen

    return madd


def _qb4w(
    xc, xe, xd, fix, w, block, scales, xscale, bias, lo, hi, y, part, acc, total, parts
):  # pragma: no cover - compiled
    """y[m, n] = clamp(xscale[m] * sum over blocks b of float(int dot of block b) * scale[b, n] + bias[n], lo, hi).

    ``w`` [T, K / 16, P / G, 8, G] uint8 and ``scales`` [T, K / block, P] float32: T tiles of P channels
    (``arrange_qb4w``; N rounded up to T P), ``block`` the inputs per scale (a multiple of 16, dividing K).
    Scratch: ``xe``, ``xd`` int16 [M, K / 2] for each row's e (its even inputs) and d (odd - 16 even), ``fix``
    int16 [M, K / 16]; ``part`` int16, ``acc`` int32 and ``total`` float32 [T, at least P], a row a tile.
    ``parts``: how many runs of whole tiles the work is cut into (``_qb4w_run``), here one after another.

    Byte b = lo + 16 hi times inputs (e, o) is e (lo - 8) + o (hi - 8) = e b + d hi - 8 (e + o): two 16-bit
    multiplies a byte and no mask. Eight bytes' sum is within int16 (at most 16 * 255 * 8), so it is summed
    in wrapping 16-bit lanes, ``fix`` = 8 sum(e + o) of those bytes taken off, then widened into the block's
    int32 sum. (numba types the products int64, but as they are only stored as int16 LLVM computes them 16
    bits wide: 16 lanes a vector, vpmullw.)"""
    _qb4w_input(xc, xe, xd, fix)
    for p in range(parts):
        _qb4w_run(p, parts, xe, xd, fix, w, block, scales, xscale, bias, lo, hi, y, part, acc, total)


def _qb4w_threaded(
    xc, xe, xd, fix, w, block, scales, xscale, bias, lo, hi, y, part, acc, total, parts
):  # pragma: no cover - compiled
    """``_qb4w`` with its parts run on numba's threads (``prange``, compiled with ``parallel=True``)."""
    _qb4w_input(xc, xe, xd, fix)
    for p in prange(parts):
        _qb4w_run(p, parts, xe, xd, fix, w, block, scales, xscale, bias, lo, hi, y, part, acc, total)


def _qb4w_input(xc, xe, xd, fix):  # pragma: no cover - compiled
    """Each row's even inputs ``xe``, odd - 16 even ``xd`` and 8 times each 16 inputs' sum ``fix``."""
    m, k = xc.shape
    half = k // 2
    for i in range(m):
        for j in range(half):
            ev = np.int32(xc[i, 2 * j])
            xe[i, j] = ev
            xd[i, j] = np.int32(xc[i, 2 * j + 1]) - 16 * ev
        for q in range(half // 8):
            s = np.int32(0)
            for j in range(16 * q, 16 * q + 16):
                s += np.int32(xc[i, j])
            fix[i, q] = 8 * s


def _qb4w_run(
    p, parts, xe, xd, fix, w, block, scales, xscale, bias, lo, hi, y, part, acc, total
):  # pragma: no cover - compiled
    """Part ``p`` of ``parts``: tiles p T // parts up to (p + 1) T // parts, each through ``_qb4w_tile``."""
    per, n = w.shape[2] * w.shape[4], y.shape[1]
    first, last = _share(p, parts, w.shape[0])
    for t in range(first, last):
        a, b = t * per, min(t * per + per, n)
        _qb4w_tile(xe, xd, fix, w[t], block, scales[t], xscale, bias[a:b], lo, hi, y[:, a:b], part[t], acc[t], total[t])


def _qb4w_tile(xe, xd, fix, w, block, scales, xscale, bias, lo, hi, y, part, acc, total):  # pragma: no cover - compiled
    """``_qb4w`` for one tile: its channels' ``w`` [K / 16, P / G, 8, G] and ``scales`` [K / block, P], the
    tile's share of ``bias`` (or empty) and ``y`` (N' <= P columns: the last tile's padding is not computed),
    its scratch rows ``part``, ``acc`` and ``total``, all given as views. The loops are those of the kernel
    before it was tiled; each indexes from 0: in a loop over first + c (an index LLVM cannot prove
    non-negative, so numba's negative-index wraparound stays in the loop) it vectorised worse.
    """
    m, half = xe.shape
    n = y.shape[1]
    hb = block // 2
    group = w.shape[3]
    with_bias = bias.shape[0] > 0
    for i in range(m):
        e = xe[i]
        d = xd[i]
        for c in range(n):
            total[c] = 0
        for b in range(half // hb):
            for c in range(n):
                acc[c] = 0
            for j in range(b * hb, b * hb + hb, 8):
                e0, e1, e2, e3 = e[j], e[j + 1], e[j + 2], e[j + 3]
                e4, e5, e6, e7 = e[j + 4], e[j + 5], e[j + 6], e[j + 7]
                d0, d1, d2, d3 = d[j], d[j + 1], d[j + 2], d[j + 3]
                d4, d5, d6, d7 = d[j + 4], d[j + 5], d[j + 6], d[j + 7]
                f = fix[i, j // 8]
                eight = w[j // 8]
                for g in range(-(-n // group)):
                    rows = eight[g]
                    first = g * group
                    for c in range(group):
                        b0, b1, b2, b3 = rows[0, c], rows[1, c], rows[2, c], rows[3, c]
                        b4, b5, b6, b7 = rows[4, c], rows[5, c], rows[6, c], rows[7, c]
                        s = e0 * b0 + d0 * (b0 >> 4) + e1 * b1 + d1 * (b1 >> 4) + e2 * b2 + d2 * (b2 >> 4)
                        s += e3 * b3 + d3 * (b3 >> 4) + e4 * b4 + d4 * (b4 >> 4) + e5 * b5 + d5 * (b5 >> 4)
                        s += e6 * b6 + d6 * (b6 >> 4) + e7 * b7 + d7 * (b7 >> 4)
                        part[first + c] = s - f
                for c in range(n):
                    acc[c] += np.int32(part[c])
            scale = scales[b]
            for c in range(n):
                total[c] += np.float32(acc[c]) * scale[c]
        for c in range(n):
            v = total[c] * xscale[i, 0]
            if with_bias:
                v = v + bias[c]
            if v < lo:
                v = lo
            if v > hi:
                v = hi
            y[i, c] = v


def arrange_qb4w(
    packed: np.ndarray, scales: np.ndarray, n: int, k: int, tiles: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """XNNPACK's QB4W weights ([N, K / 2] bytes, two inputs a byte, + 8) and block scales [N, K / block] as the
    kernel reads them: ``tiles`` runs of channels (threads take whole tiles), each [K / 16, P / G, 8, G] bytes,
    so that the 8 bytes of the G channels it multiplies in one pass are one run of memory (G = GROUP, P the
    tile's channels rounded up to it with zero weights, 0x88; G = P from the policy's ``gemv_wide`` channels on), and [tiles, K /
    block, P] float32."""
    per = -(-n // tiles)
    if tiles > 1 or n < policy.current().gemv_wide:
        per = -(-per // GROUP) * GROUP
    group = per if n >= policy.current().gemv_wide else GROUP
    w = np.full((tiles * per, k // 2), 0x88, np.uint8)
    w[:n] = np.asarray(packed, np.uint8).reshape(n, k // 2)
    w = np.ascontiguousarray(w.reshape(tiles, per // group, group, k // 16, 8).transpose(0, 3, 1, 4, 2))
    s = np.zeros((tiles * per, scales.shape[1]), np.float32)
    s[:n] = scales
    return w, np.ascontiguousarray(s.reshape(tiles, per, -1).transpose(0, 2, 1))


# Bound by ``HELPERS`` before the kernels' first compile (making them imports numba, which importing this module
# must not): numba's ``prange`` for the threaded drivers, the dot products of ``_qc8w`` (``_madd_intrinsic``)
# and the compiled parts the drivers call.
prange: Any = range


HELPERS = compiled_kernels.Helpers(
    globals(),
    compile=("_share", "_qc8w_input", "_qc8w_run", "_qc8w_part", "_qb4w_input", "_qb4w_run", "_qb4w_tile"),
    build={"_madd": _madd_intrinsic},
)


def qc8w(parallel: bool = False) -> Any:
    """The compiled ``f(xc, xi, w, xscale, wscale, bias, lo, hi, y, dots, ahead, parts)`` of ``_qc8w``, its parts
    run on numba's threads when ``parallel``; the tier must be on."""
    HELPERS.require("qc8w GEMV")
    if parallel:  # a function of its own: numba's disk cache keys compiled code by function, not by options
        return fast.compiled("qc8w_gemv_threaded", _qc8w_threaded, parallel=True)
    return fast.compiled("qc8w_gemv", _qc8w)


def qb4w(parallel: bool = False) -> Any:
    """The compiled ``f(xc, xe, xd, fix, w, block, scales, xscale, bias, lo, hi, y, part, acc, total, parts)`` of
    ``_qb4w``, its parts run on numba's threads when ``parallel``; the tier must be on."""
    HELPERS.require("qb4w GEMV")
    if parallel:
        return fast.compiled("qb4w_gemv_threaded", _qb4w_threaded, parallel=True)
    return fast.compiled("qb4w_gemv", _qb4w)


def _dequantize_qb4w(w, block, scales, bias, out):  # pragma: no cover - compiled
    """out[:K, n] = channel n's weights dequantized (nibble - 8 times its block scale), out[K, n] = bias[n] (0
    without a bias): the [K + 1, N] float32 matrix of the sgemm path, from ``_qb4w``'s bytes, a group of
    channels at a time, so the bytes read and the floats written are contiguous; one loop per output row (the
    even and odd inputs of a byte written in one loop did not vectorise)."""
    n = out.shape[1]
    hb = block // 2
    per, group = w.shape[2] * w.shape[4], w.shape[4]
    for q in range(w.shape[1]):  # 16 inputs (rows of out) at a time, all tiles: each row written in one pass
        for t in range(w.shape[0]):
            wt, st = w[t], scales[t]  # (views of the tile: indexing w[t, q, g, r] below is slower)
            for g in range(w.shape[2]):
                first = t * per + g * group
                width = min(group, n - first)
                for r in range(8):
                    j = 8 * q + r
                    row = wt[q, g, r]
                    s = st[j // hb, g * group : g * group + width]
                    even = out[2 * j, first : first + width]
                    for c in range(width):
                        even[c] = np.float32((np.int32(row[c]) & 15) - 8) * s[c]
                    odd = out[2 * j + 1, first : first + width]
                    for c in range(width):
                        odd[c] = np.float32((np.int32(row[c]) >> 4) - 8) * s[c]
    last = out[out.shape[0] - 1]
    for c in range(n):
        last[c] = bias[c] if bias.shape[0] else np.float32(0)


def _dequantize_qc8w(w, wscale, bias, out):  # pragma: no cover - compiled
    """out[n, :K] = w[n] * wscale[n], out[n, K] = bias[n] (0 without a bias): one pass, where NumPy's
    int8 x float32 multiply is a slower casting loop."""
    n, k = w.shape
    for c in range(n):
        row = w[c]
        o = out[c]
        s = wscale[c]
        for j in range(k):
            o[j] = np.float32(row[j]) * s
        o[k] = bias[c] if bias.shape[0] else np.float32(0)


_scratch = threading.local()


def _scratch_buffer(size: int) -> np.ndarray:
    """A float32 buffer of at least ``size`` entries, one per thread, kept between calls: the dequantized
    weights of one call live only until its sgemm has run, and a fresh allocation of a few MB each call
    cost more in page faults than the dequantizing itself."""
    buf = getattr(_scratch, "buf", None)
    if buf is None or buf.size < size:
        buf = _scratch.buf = np.empty(size, np.float32)
    return buf[:size]


def _run_all(steps: list) -> None:
    for step in steps:
        step()


def _row_bucket(rows: int, cap: int) -> int:
    """The power of two at or above ``rows``, at most ``cap``: the row count one tuning decision is measured at and
    serves."""
    return min(cap, 1 << max(0, rows - 1).bit_length())


class IntegerLinear:
    """A dynamically quantized fully connected's weights held as integers, with the kernel that multiplies them.

    ``steps`` computes the node for a centred input of ``rows`` <= ``max_rows`` with the integer kernel;
    ``matmul`` runs a larger input with sgemm on the weights dequantized: kept after the first call when
    ``keep`` (a small model), else made for each call into a per-thread scratch buffer (the size of the
    largest layer), so no float32 copy of each layer's weights is held: dequantizing takes a fraction of
    the sgemm's time."""

    def __init__(
        self,
        kernel: Any,
        weights: tuple | None,
        shape: tuple[int, int],
        bias: np.ndarray | None,
        max_rows: int,
        keep: bool,
        source: tuple | None = None,
    ):
        # ``kernel(parallel)``: the serial or the threaded compiled kernel (``qc8w`` or ``qb4w``)
        self.kernel, self.max_rows, self.keep = kernel, max_rows, keep
        self.four_bit = kernel is qb4w
        # QB4W: XNNPACK's bytes, the block scales, the block and the tiles, from which the integer GEMV's layout
        # is made when first needed (``weights``) and made again after ``_release`` dropped it
        self.source = source
        self._weights = weights
        self.block = source[2] if source is not None else weights[1] if self.four_bit and weights else 0
        self.n, self.k = shape
        self.floats: np.ndarray | None = None  # the dequantized weights, once made, when ``keep``
        self.vnni: Any = None  # the VNNI GEMM's layout of QB4W weights, once made (``vnni_layer``)
        self.vnni_gemv: Any = None  # the VNNI GEMV's, once made (``vnni_gemv_layer``)
        # (rows or their bucket, whether the GEMV takes them untuned) -> the host's choice (``_few_rows``), once asked
        self.chosen: dict[tuple[int, bool], str] = {}
        self.gemm_buckets: dict[tuple[int, bool], bool] = {}  # (bucket, tune) -> ``uses_vnni``'s answer, once asked
        self.gemm_chosen = False  # whether ``uses_vnni`` chose the VNNI GEMM for more rows than tuned one by one
        self.sgemm_chosen = False  # whether it chose sgemm (on weights dequantized from the integer GEMV's layout)
        self.bias = np.zeros(0, np.float32) if bias is None else np.ascontiguousarray(bias, np.float32).reshape(-1)

    @property
    def weights(self) -> tuple:
        """The integer GEMV's layout: QC8W (weights, channel scales); QB4W (``arrange_qb4w``'s bytes, the block,
        its scales), made from ``source`` when first needed since the int8-dot layouts were chosen."""
        if self._weights is None:
            packed, scales, block, tiles = self.source
            w, s = arrange_qb4w(packed, scales, self.n, self.k, tiles)
            self._weights = (w, block, s)
        return self._weights

    @classmethod
    def qc8w(
        cls, w: np.ndarray, wscale: np.ndarray, bias: np.ndarray | None, keep: bool = False
    ) -> IntegerLinear | None:
        """From int8 weights [N, K] (kept as given: the program's own bytes when they are C-contiguous) and
        their per-channel scales [N]; ``keep``: see ``dequantized``; the tier must be on. None when the policy's
        ``gemv_max_rows`` gives the case 0 rows (the node then dequantizes its weights at load)."""
        HELPERS.require("the QC8W integer GEMV")
        rows = policy.current().gemv_max_rows["qc8w", keep]
        if rows <= 0:
            return None
        w = np.ascontiguousarray(w, np.int8)
        return cls(qc8w, (w, np.ascontiguousarray(wscale, np.float32)), w.shape, bias, rows, keep)

    @classmethod
    def qb4w(
        cls,
        packed: np.ndarray,
        scales: np.ndarray,
        block: int,
        n: int,
        k: int,
        bias: np.ndarray | None,
        keep: bool = False,
    ) -> IntegerLinear | None:
        """From XNNPACK's QB4W bytes ([N, K / 2]) and block scales [N, K / block] (the tier must be on); None when
        the policy's ``gemv_max_rows`` gives the case 0 rows, or for a block that is not a multiple of 16 inputs (the kernel sums
        8 bytes at a time)."""
        HELPERS.require("the QB4W integer GEMV")
        rows = policy.current().gemv_max_rows["qb4w", keep]
        if rows <= 0 or block % 16:
            return None
        # a tile a thread (get_num_threads() now), when a call of one row would be split (the policy's ``gemv_split_macs``; never in a
        # small program, see steps)
        split = n * k >= policy.current().gemv_split_macs and not keep
        tiles = min(compiled_kernels.get_num_threads(), -(-n // GROUP)) if split else 1
        if tiles > 1 and not cls._tiles_pay(packed, scales, block, n, k, tiles):
            tiles = 1
        scales = np.ascontiguousarray(scales, np.float32)
        return cls(qb4w, None, (n, k), bias, rows, keep, (packed, scales, block, tiles))

    @classmethod
    def _tiles_pay(cls, packed: np.ndarray, scales: np.ndarray, block: int, n: int, k: int, tiles: int) -> bool:
        """Whether a one-row call on ``tiles`` tiles, a thread each, beats the one-tile layout on the calling
        thread, as the host measures it (runtime/tuning.py, family ``qb4w-tiles``; without tuning: split).
        The layout is fixed at load, and a split that does not repay its threads' wake-up leaves the tiled
        layout slower than the untiled one even when the call site then runs serially."""

        def candidates() -> dict[str, Any]:
            xc = np.random.default_rng(0).integers(-128, 128, (1, k)).astype(np.float32)
            xscale, y = np.full((1, 1), 0.01, np.float32), np.empty((1, n), np.float32)
            runs = {}
            for name, t in (("split", tiles), ("one-tile", 1)):
                w, s = arrange_qb4w(packed, scales, n, k, t)
                args = cls(qb4w, (w, block, s), (n, k), None, 1, False)._arguments(xc, xscale, y, -np.inf, np.inf)
                runs[name] = partial(qb4w(parallel=t > 1), *args, t)
            return runs

        decision = tuning.choose("qb4w-tiles", f"{n}x{k}:{tiles}", ("split", "one-tile"), candidates, threaded=True)
        return decision.kernel == "split"

    def steps(self, xc: np.ndarray, xscale: np.ndarray, y: np.ndarray, lo: float, hi: float) -> list:
        """Steps for y [M, N] = clamp(the node on the centred input ``xc`` [M, K] with row scales ``xscale``
        [M, 1]), M <= ``max_rows``: the VNNI GEMV where the host measured it fastest for M rows (``uses_gemv``),
        else the integer GEMV, split across threads (``get_num_threads()`` when called) from the policy's
        ``gemv_split_macs`` multiply-adds on; results identical either way (each output's arithmetic is the same)."""
        m = xc.shape[0]
        tuned = policy.current().tune and m <= min(policy.current().gemv_tuned_rows, qgemv_vnni.GEMV_ROWS)
        if tuned and qgemv_vnni.gemv_fits(xc, xscale, y) and self._few_rows(m, "") == "vnni-gemv":
            return [self.vnni_gemv_layer().step(xc, xscale, self.bias, y, lo, hi)]
        return self._gemv_steps(xc, xscale, y, lo, hi)

    def _gemv_steps(self, xc: np.ndarray, xscale: np.ndarray, y: np.ndarray, lo: float, hi: float) -> list:
        """:meth:`steps` on the integer GEMV."""
        m = xc.shape[0]
        args = self._arguments(xc, xscale, y, lo, hi)
        serial = partial(self.kernel(), *args, 1)
        # Not in a small program (``keep``: one that holds float32 weights), whose float layers run sgemm on BLAS's
        # threads between its GEMVs: OpenMP's worker spins a while after each split and takes the core BLAS's
        # second thread needs (bench/models.py's MLP as 8da4w ran several times slower at 2 threads than at 1).
        limit = self.weights[0].shape[0] if self.four_bit else self.n // GROUP  # whole tiles
        if self.keep or limit < 2 or m * self.n * self.k < policy.current().gemv_split_macs:
            return [serial]
        return [partial(compiled_kernels.split, serial, partial(self.kernel(parallel=True), *args), limit)]

    def _arguments(self, xc: np.ndarray, xscale: np.ndarray, y: np.ndarray, lo: float, hi: float) -> tuple:
        """The kernel's arguments on these buffers, but for the part count."""
        m = xc.shape[0]
        lo32, hi32 = np.float32(lo), np.float32(hi)
        if not self.four_bit:
            w, wscale = self.weights
            xi, dots = np.empty((m, self.k), np.int16), np.empty(m * self.n, np.int32)
            ahead = 0 if self.keep else AHEAD
            args: tuple = (xc, xi, w, xscale, wscale, self.bias, lo32, hi32, y, dots, ahead)
        else:
            w, block, s = self.weights
            xe, xd, fix = (np.empty((m, self.k // size), np.int16) for size in (2, 2, 16))
            # a row a tile, 64 bytes longer than its channels: two threads' tiles never write one cache line (sharing
            # one made the split slower than one thread)
            tiles, per = w.shape[0], w.shape[2] * w.shape[4]
            scratch = tuple(np.empty((tiles, per + 64 // t.itemsize), t) for t in map(np.dtype, "i2 i4 f4".split()))
            args = (xc, xe, xd, fix, w, block, s, xscale, self.bias, lo32, hi32, y, *scratch)
        return args

    def uses_gemv(self, rows: int, where: str = "") -> bool:
        """Whether an input of ``rows`` rows runs the integer kernel (:meth:`steps`) rather than sgemm on the
        dequantized weights (:meth:`matmul`) or the VNNI GEMM: up to ``max_rows`` rows, or, with the policy's
        ``tune``, what the host measured for the shape (runtime/tuning.py) up to the policy's ``gemv_tuned_rows`` rows."""
        if not policy.current().tune or rows > policy.current().gemv_tuned_rows:
            return rows <= self.max_rows
        return self._few_rows(rows, where) in ("gemv", "vnni-gemv")

    def _few_rows(self, rows: int, where: str) -> str:
        """The host's choice for ``rows`` up to the policy's ``gemv_tuned_rows``: ``gemv``, ``sgemm`` or, for QB4W on a host with
        a dot form of qgemv_vnni.py (AVX512-VNNI or AVX2), ``vnni`` (the GEMM) or, up to ``qgemv_vnni.GEMV_ROWS`` rows, ``vnni-gemv`` (family ``qgemv``;
        the decision is cached, so asking again is cheap). Above ``GEMV_ROWS`` rows one decision serves a power-of-two
        bucket of row counts, measured at its top (at most ``gemv_tuned_rows``): a prompt of a length not seen
        before then costs no new measurement. Asked again for the same bucket (the GEMV's and the GEMM's questions of
        one schedule, or another length in it), the layer's first answer, without asking tuning again."""
        fixed = rows <= self.max_rows
        measured = _row_bucket(rows, policy.current().gemv_tuned_rows) if rows > qgemv_vnni.GEMV_ROWS else rows
        asked = (measured, fixed)
        if asked in self.chosen:
            return self.chosen[asked]
        kind = "qb4w" if self.four_bit else "qc8w"
        names: tuple[str, ...] = ("gemv", "sgemm") if fixed else ("sgemm", "gemv")
        vnni = self._takes_vnni()
        if vnni:
            names += ("vnni",)
        vnni_gemv = self._takes_vnni_gemv() and measured <= qgemv_vnni.GEMV_ROWS
        if vnni_gemv:
            names += ("vnni-gemv",)

        def candidates() -> dict[str, Any]:
            xc, zp, xscale, xa, y = self._operands(measured)
            gemv = self._gemv_steps(xc, xscale, y, -np.inf, np.inf)
            runs = {"gemv": partial(_run_all, gemv), "sgemm": partial(self.matmul, xa, y)}
            if vnni:
                runs["vnni"] = partial(_run_all, self.vnni_steps(xc, zp, xscale, y))
            if vnni_gemv:
                runs["vnni-gemv"] = self.vnni_gemv_layer().step(xc, xscale, self.bias, y, -np.inf, np.inf)
            return runs

        key = f"{kind}{'-kept' if self.keep else ''}:{measured}x{self.k}x{self.n}{'+vnni' if vnni or vnni_gemv else ''}"
        chosen = self.chosen[asked] = tuning.choose("qgemv", key, names, candidates, where).kernel
        self._release()
        # the chosen layout made now, while the schedule is built (at load for the declared shapes), also when
        # the decision came from the cache: not in the first call, where it would count in the first token's time
        if chosen == "vnni":
            self.vnni_layer()
        elif chosen == "vnni-gemv":
            self.vnni_gemv_layer()
        return chosen

    def _operands(self, rows: int) -> tuple[np.ndarray, ...]:
        """Private operands of ``rows`` rows for timing this layer's candidates: the centred input (int8 values),
        its zero points and scales, the input with its ones column for sgemm, and the output."""
        xc = np.random.default_rng(0).integers(-128, 128, (rows, self.k)).astype(np.float32)
        zp, xscale = np.zeros((rows, 1), np.float32), np.full((rows, 1), 0.01, np.float32)
        return xc, zp, xscale, np.ones((rows, self.k + 1), np.float32), np.empty((rows, self.n), np.float32)

    def _takes_vnni(self) -> bool:
        """Whether the int8-dot ("VNNI") GEMM takes this layer: QB4W (blocks of 16, K a multiple of them) on a host
        with a dot form of qgemv_vnni.py (AVX512-VNNI or AVX2)."""
        return self.four_bit and qgemv_vnni.available()

    def _takes_vnni_gemv(self) -> bool:
        """Whether an int8-dot ("VNNI") GEMV takes this layer: the QB4W one where the GEMM does, for blocks up to
        its dot form's ``max_block``; the QC8W one (qgemv_vnni8.py) for the shapes it takes (``qgemv_vnni8.takes``)
        on a host with AVX512-VNNI."""
        d = qgemv_vnni.dot()
        if self.four_bit:
            return d is not None and self._takes_vnni() and self.block <= d.max_block
        return qgemv_vnni8.available() and qgemv_vnni8.takes(self.n, self.k)

    def _release(self) -> None:
        """Drops the layouts (each a copy of the weights) that no decision so far runs: the VNNI ones made to be
        measured, or never asked for since they are made on first use; the integer GEMV's QB4W layout where the
        int8-dot kernels took every row count (SmolLM2 8da4w: 41 MB less anonymous memory, of 445), made again from
        ``source`` if a later decision wants it."""
        chosen = set(self.chosen.values())
        if "vnni-gemv" not in chosen:
            self.vnni_gemv = None
        if "vnni" not in chosen and not self.gemm_chosen:
            self.vnni = None
        if self.source is not None and not chosen & {"gemv", "sgemm"} and not self.sgemm_chosen:
            self._weights = None

    def vnni_layer(self) -> Any:
        """The QB4W weights laid out for the VNNI GEMM (qgemv_vnni.py), made on first use; None for QC8W or on a
        host without a dot form (AVX512-VNNI or AVX2)."""
        if not self._takes_vnni():
            return None
        if self.vnni is None:
            self.vnni = qgemv_vnni.VnniQB4W(*self._xnnpack_qb4w(), self.n, self.k)
        return self.vnni

    def vnni_gemv_layer(self) -> Any:
        """The weights laid out for a VNNI GEMV (qgemv_vnni.py for QB4W, qgemv_vnni8.py for QC8W), made on first
        use; None where none takes the layer (``_takes_vnni_gemv``)."""
        if not self._takes_vnni_gemv():
            return None
        if self.vnni_gemv is None:
            if self.four_bit:
                self.vnni_gemv = qgemv_vnni.VnniGemvQB4W(*self._xnnpack_qb4w(), self.n, self.k)
            else:
                w, wscale = self.weights
                self.vnni_gemv = qgemv_vnni8.VnniGemvQC8W(w, wscale, self.n, self.k)
        return self.vnni_gemv

    def _xnnpack_qb4w(self) -> tuple[np.ndarray, np.ndarray, int]:
        """This QB4W layer's weights back in XNNPACK's form, which the VNNI layouts start from: the bytes [N, K / 2],
        the block scales [N, K / block] and the block."""
        packed, scales, block, _ = self.source
        return np.asarray(packed, np.uint8).reshape(self.n, self.k // 2), scales, block

    def uses_vnni(self, rows: int, where: str = "") -> bool:
        """Whether an input of ``rows`` rows (more than the GEMV takes) runs the VNNI GEMM rather than sgemm on
        the dequantized weights: where the host has the instruction, as tuning measures it (runtime/tuning.py,
        family ``qb4w-vnni``, one decision per power-of-two bucket of rows up to 128) with the VNNI GEMM the
        default; never with the policy's ``tune`` off and no ``kernel_choices`` entry (sgemm, as before). Asked
        again for the same bucket, the layer's first answer, as in ``_few_rows``."""
        if not self._takes_vnni():
            return False
        tune = policy.current().tune
        if tune and rows <= policy.current().gemv_tuned_rows:
            return self._few_rows(rows, where) == "vnni"
        bucket = _row_bucket(rows, 128)
        if (bucket, tune) in self.gemm_buckets:
            return self.gemm_buckets[bucket, tune]
        names = ("vnni", "sgemm") if tune else ("sgemm", "vnni")

        def candidates() -> dict[str, Any]:
            xc, zp, xscale, xa, y = self._operands(bucket)
            vnni = partial(_run_all, self.vnni_steps(xc, zp, xscale, y))
            return {"vnni": vnni, "sgemm": partial(self.matmul, xa, y)}

        key = f"{self.n}x{self.k}:{bucket}"
        chosen = self.gemm_buckets[bucket, tune] = (
            tuning.choose("qb4w-vnni", key, names, candidates, where).kernel == "vnni"
        )
        self.gemm_chosen |= chosen
        self.sgemm_chosen |= not chosen
        self._release()
        if chosen:  # made now, while the schedule is built, as in _few_rows
            self.vnni_layer()
        return chosen

    def vnni_steps(
        self, xc: np.ndarray, zp: np.ndarray, xscale: np.ndarray, y: np.ndarray, buffer: qgemv_vnni.Buffer = np.empty
    ) -> list:
        """Steps for y [M, N] = the node (before its clamp) on the centred input ``xc`` [M, K] (q - zp) with the
        rows' zero points ``zp`` and scales ``xscale`` [M, 1] by the VNNI GEMM, the same float32 values as
        :meth:`steps`; on these buffers (read at each run), with working buffers from ``buffer`` (made once, not
        at each call; ``VnniQB4W.bound``): the input's bytes, the GEMM, its totals times the row scales, plus the bias. On
        one thread: split across two (by tiles of rows) it gave the same bits and lost or tied, on VNNI and on
        AVX2 (docs/benchmarks.md)."""
        call = self.vnni_layer().bound(xc, zp, buffer)
        steps = [call.prepare, partial(call.fn, *call.args), partial(np.multiply, call.totals, xscale, out=y)]
        if self.bias.shape[0]:
            steps.append(partial(np.add, y, self.bias, out=y))
        return steps

    def dequantized(self) -> np.ndarray:
        """The float32 weights as [N, K + 1], bias in column K: what the sgemm path multiplies, ``x_ones @
        it.T``. Kept after the first call when ``keep``, else written into this thread's scratch buffer
        (valid until the next call)."""
        if self.floats is not None:
            return self.floats
        size = self.n * (self.k + 1)
        buf = np.empty(size, np.float32) if self.keep else _scratch_buffer(size)
        if not self.four_bit:
            w, wscale = self.weights
            out = buf.reshape(self.n, self.k + 1)
            fast.compiled("qc8w_dequantize", _dequantize_qc8w)(w, wscale, self.bias, out)
        else:
            w, block, s = self.weights
            out = buf.reshape(self.k + 1, self.n)
            fast.compiled("qb4w_dequantize", _dequantize_qb4w)(w, block, s, self.bias, out)
            out = out.T
        if self.keep:  # held as [K + 1, N], C-contiguous: sgemm on the transposed [N, K + 1] is slower
            self.floats = out = np.ascontiguousarray(out.T).T
        return out

    def matmul(self, xa: np.ndarray, y: np.ndarray) -> None:
        """y = xa @ the dequantized weights, where xa [M, K + 1] is the scaled input with a column of ones."""
        np.matmul(xa, self.dequantized().T, out=y)
