"""The compiled tier's depthwise convolution over channels-last (NHWC) float32 arrays, channel multiplier 1.

One pass over the output: each output pixel's channels are summed in registers, tap by tap in the window's row
order and then the bias, with no fused multiply-add (numba compiles without fastmath), so the result has the
bits of the NumPy formulation in edgetorch/runtime/ops/conv.py; the clamp of the layer's activation is applied
in the same pass. From the policy's ``split_outputs`` outputs on, output rows are split over the runtime's
threads (numba's ``prange``; each output computed as on one thread).

Three kernels compute it, with the same bits (``DEPTHWISE_KERNELS``, chosen by measuring the host through
runtime/tuning.py, family ``"depthwise"``):

- ``"vector"``: a micro-kernel in LLVM vector IR (``_pixels_intrinsic``) computes up to ``PIXELS`` output
  pixels by ``LANES`` channels at a time, each tap's weights loaded once for the pixels and every sum kept in a
  register, the taps of a window as a list of (tap, input offset) so that one kernel serves every window size,
  stride and dilation, and border pixels run it on their in-range taps only. numba's own loops over channels do
  not vectorise here (the output may alias the input for all LLVM knows, and nineteen pointers are more than
  its run-time alias checks take). Channels past the last whole vector are summed by a scalar loop.
- ``"vector16"``: the same on 16-lane vectors first, where the CPU has AVX-512 (LLVM splits them elsewhere).
- ``"rows"``: numba loops, one output pixel at a time (``_depthwise_rows``).

Used through :func:`edgetorch.runtime.ops.conv.depthwise` by every runtime. Imports NumPy, the policy,
tuning.py and kernels/compiled.py (which imports numba, and llvmlite, on the first compile).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from edgetorch.runtime import policy, tuning
from edgetorch.runtime.host import host as this_host
from edgetorch.runtime.kernels import compiled as compiled_kernels

LANES = 8  # channels a vector: 256-bit registers
PIXELS = 8  # output pixels a call of the micro-kernel: eight accumulators, the loop's index work shared by them
CHAINS = 4  # independent sums the micro-kernel keeps at least (channel vectors x pixels), to hide the add latency
DEPTHWISE_KERNELS = ("vector", "vector16", "rows")

prange: Any = range  # numba's, bound before the first compile (importing this module must not import numba)
call_at: Any = None


def _depthwise_split(rows_at, x, taps, bias, y, kh, kw, sh, sw, dh, dw, top, left, lo, hi, parts):  # noqa: E501 # pragma: no cover
    """``_depthwise_rows`` over all output rows cut into ``parts`` runs, run on numba's threads (each output
    computed as on one thread); called at ``rows_at``, its ``compiled_kernels.address`` for these arguments,
    so that its code is compiled once, not again inside this build."""
    rows = y.shape[0] * y.shape[1]
    step = -(-rows // parts)
    for p in prange(parts):
        first = min(rows, p * step)
        last = min(rows, first + step)
        call_at(_depthwise_rows, rows_at, (x, taps, bias, y, kh, kw, sh, sw, dh, dw, top, left, lo, hi, first, last))


def _depthwise_rows(x, taps, bias, y, kh, kw, sh, sw, dh, dw, top, left, lo, hi, first, last):  # pragma: no cover
    """Output rows ``first`` .. ``last`` (of all images' rows, n * OH + i) of the convolution:
    y[n, i, j, c] = sum over taps (ki, kj) of x[n, i*sh - top + ki*dh, j*sw - left + kj*dw, c] * w[tap, c]
    (out-of-range input pixels read as zero), plus bias[c], clamped to [lo, hi]; channel multiplier 1.

    A 3x3 window whose taps all fall inside the input (every pixel but the border ones) is summed in one
    expression per channel: nine loads, one store, the sum in a register (faster than accumulating tap by tap
    into the output). The taps are added in the same order either way."""
    nb, h, wd, c = x.shape
    _, oh, ow, _ = y.shape
    with_bias = bias.shape[0] > 0
    for r in range(first, last):
        n = r // oh
        i = r % oh
        r0 = i * sh - top
        inner_rows = kh == 3 and kw == 3 and r0 >= 0 and r0 + 2 * dh < h
        for j in range(ow):
            c0 = j * sw - left
            out = y[n, i, j]
            if inner_rows and c0 >= 0 and c0 + 2 * dw < wd:
                x0, x1, x2 = x[n, r0], x[n, r0 + dh], x[n, r0 + 2 * dh]
                a, b, d = c0, c0 + dw, c0 + 2 * dw
                for ch in range(c):
                    v = x0[a, ch] * taps[0, ch]
                    v += x0[b, ch] * taps[1, ch]
                    v += x0[d, ch] * taps[2, ch]
                    v += x1[a, ch] * taps[3, ch]
                    v += x1[b, ch] * taps[4, ch]
                    v += x1[d, ch] * taps[5, ch]
                    v += x2[a, ch] * taps[6, ch]
                    v += x2[b, ch] * taps[7, ch]
                    v += x2[d, ch] * taps[8, ch]
                    if with_bias:
                        v += bias[ch]
                    if v < lo:
                        v = lo
                    elif v > hi:
                        v = hi
                    out[ch] = v
                continue
            out[:] = 0.0
            for ki in range(kh):
                row = r0 + ki * dh
                if row < 0 or row >= h:
                    continue
                for kj in range(kw):
                    col = c0 + kj * dw
                    if col < 0 or col >= wd:
                        continue
                    src = x[n, row, col]
                    for ch in range(c):
                        out[ch] += src[ch] * taps[ki * kw + kj, ch]
            for ch in range(c):  # a NaN stays NaN, as with np.clip
                v = out[ch] + bias[ch] if with_bias else out[ch]
                if v < lo:
                    v = lo
                elif v > hi:
                    v = hi
                out[ch] = v


def _pixels_intrinsic(lanes: int = LANES) -> Any:
    """``pixels(x, y, w, bias, with_bias, taps, offsets, ntaps, xo, xstep, yo, channels, lo, hi, count, ch0)``,
    a numba intrinsic over ``lanes``-float vectors (8, or 16 where the CPU has AVX-512): for ``count`` (a
    literal, 1 to ``PIXELS``) output pixels p and every whole vector of ``lanes`` channels from ``ch0`` on below
    ``channels``,
    y[yo + p * channels + ch] = clamp(sum over t < ntaps of x[xo + offsets[t] + p * xstep + ch] *
    w[taps[t] + ch] (+ bias[ch]), lo, hi) (``taps`` holds each tap's first weight: tap index x channels), the products and sums rounded one by one in the list's
    order (no fused multiply-add): the bits of the NumPy formulation. ``x``, ``y``, ``w`` and ``bias`` are flat
    float32 arrays, ``taps`` and ``offsets`` int64 (``ntaps`` >= 1 of them used); ``bias`` is read only where
    ``with_bias`` is true. The clamp keeps NaN (a compare and a select)."""
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    v8 = ir.VectorType(ir.FloatType(), lanes)

    @intrinsic(prefer_literal=True)
    def pixels(typingctx, x, y, w, bias, with_bias, taps, offsets, ntaps, xo, xstep, yo, channels, lo, hi, count, ch0):
        if not isinstance(count, types.IntegerLiteral) or not 1 <= count.literal_value <= PIXELS:
            return None
        if any(t.layout != "C" or t.ndim != 1 or t.dtype != types.float32 for t in (x, y, w, bias)):
            return None
        if any(t.layout != "C" or t.ndim != 1 or t.dtype != types.int64 for t in (taps, offsets)):
            return None
        number = count.literal_value
        sig = types.void(x, y, w, bias, with_bias, taps, offsets, ntaps, xo, xstep, yo, channels, lo, hi, count, ch0)

        def codegen(context, builder, signature, args):
            intp = context.get_value_type(types.intp)
            xa, ya, wa, ba, ta, oa = (
                context.make_array(signature.args[n])(context, builder, args[n]) for n in (0, 1, 2, 3, 5, 6)
            )
            has_bias = context.cast(builder, args[4], signature.args[4], types.boolean)
            ntap, base, step, out, width, start = (
                context.cast(builder, args[n], signature.args[n], types.intp) for n in (7, 8, 9, 10, 11, 15)
            )

            const, vector, splat = compiled_kernels.ir_helpers(builder, v8, intp)

            def tap(t, ch):
                """The weights of list entry ``t`` at channel ``ch`` and the input offset of its first pixel."""
                first = builder.load(builder.gep(ta.data, [t], inbounds=True))
                weights = builder.load(vector(wa.data, builder.add(first, ch)), align=4)
                at = builder.add(builder.add(base, builder.load(builder.gep(oa.data, [t], inbounds=True))), ch)
                return weights, at

            def inputs(at, p):
                return builder.load(vector(xa.data, builder.add(at, builder.mul(step, const(p)))), align=4)

            low, high = splat(args[12]), splat(args[13])

            def block(channels):
                """The ``number`` pixels at the channel offsets ``channels`` (one vector each): every sum its own
                register, so that a call of few pixels still keeps several add chains in flight."""
                acc = []
                for ch in channels:
                    weights, at = tap(const(0), ch)
                    acc.append([cgutils.alloca_once_value(builder, builder.fmul(inputs(at, p), weights))
                                for p in range(number)])  # fmt: skip
                with cgutils.for_range(builder, ntap, start=const(1)) as inner:
                    for g, ch in enumerate(channels):
                        weights, at = tap(inner.index, ch)
                        for p in range(number):
                            product = builder.fmul(inputs(at, p), weights)
                            builder.store(builder.fadd(builder.load(acc[g][p]), product), acc[g][p])
                with builder.if_then(has_bias):
                    for g, ch in enumerate(channels):
                        b = builder.load(vector(ba.data, ch), align=4)
                        for p in range(number):
                            builder.store(builder.fadd(builder.load(acc[g][p]), b), acc[g][p])
                for g, ch in enumerate(channels):
                    for p in range(number):
                        v = builder.load(acc[g][p])
                        v = builder.select(builder.fcmp_ordered("<", v, low), low, v)
                        v = builder.select(builder.fcmp_ordered(">", v, high), high, v)
                        dst = builder.add(builder.add(out, builder.mul(width, const(p))), ch)
                        builder.store(v, vector(ya.data, dst), align=4)

            group = max(1, CHAINS // number)  # channel vectors a pass, so that group x pixels >= CHAINS
            vectors = builder.sdiv(builder.sub(width, start), const(lanes))
            groups = builder.sdiv(vectors, const(group))
            with cgutils.for_range(builder, groups) as outer:
                first = builder.add(start, builder.mul(outer.index, const(group * lanes)))
                block([builder.add(first, const(g * lanes)) for g in range(group)])
            done = builder.add(start, builder.mul(groups, const(group * lanes)))
            with cgutils.for_range(builder, builder.sub(vectors, builder.mul(groups, const(group)))) as rest:
                block([builder.add(done, builder.mul(rest.index, const(lanes)))])
            return context.get_dummy_value()

        return sig, codegen

    return pixels


_pixels: Any = None
_pixels_wide: Any = None


def _vector_split(rows_at, x, taps, bias, y, kh, kw, sh, sw, dh, dw, top, left, lo, hi, wide, parts):  # noqa: E501 # pragma: no cover
    """``_vector_rows`` (16 lanes first where ``wide`` is True) over all output rows cut into ``parts`` runs, run on
    numba's threads; called at ``rows_at`` (as ``_depthwise_split`` calls its rows)."""
    rows = y.shape[0] * y.shape[1]
    step = -(-rows // parts)
    for p in prange(parts):
        first = min(rows, p * step)
        last = min(rows, first + step)
        call_at(_vector_rows, rows_at, (x, taps, bias, y, kh, kw, sh, sw, dh, dw, top, left, lo, hi, first, last, wide))


def _vector_rows(x, w, bias, y, kh, kw, sh, sw, dh, dw, top, left, lo, hi, first, last, wide):  # pragma: no cover
    """Output rows ``first`` .. ``last`` (of all images' rows) of ``_depthwise_rows``'s convolution by the
    vector micro-kernel (module docstring): per row, the run of columns whose windows lie inside the input in
    groups of ``PIXELS``, each border column on its own. ``wide`` is None for the 8-lane micro-kernel, True for
    16 lanes first: a type, not a value, so that numba prunes the 16-lane code from the 8-lane build (compiling
    it, on a CPU whose vectors LLVM splits, took a large share of this build)."""
    nb, h, wd, c = x.shape
    _, oh, ow, _ = y.shape
    xf, yf, wf = x.reshape(-1), y.reshape(-1), w.reshape(-1)
    with_bias = bias.shape[0] > 0
    b = bias if with_bias else np.zeros(c, np.float32)
    ids = np.empty(kh * kw, np.int64)
    offsets = np.empty(kh * kw, np.int64)
    inner_lo = min(ow, -(-left // sw))
    inner_hi = max(inner_lo, min(ow, (wd - 1 - (kw - 1) * dw + left) // sw + 1))
    step = sw * c
    count = 0
    for r in range(first, last):
        n = r // oh
        i = r % oh
        r0 = i * sh - top
        j = 0
        while j < ow:  # one call of the inlined _pixel_block, whose micro-kernels are most of this build's code
            if inner_lo <= j < inner_hi:  # the inner run: every column of the rows in range, one tap list
                if j == inner_lo:
                    count = _tap_list(ids, offsets, n, r0, inner_lo * sw - left, 0, kw, kh, kw, dh, dw, h, wd, c)
                xo = (j - inner_lo) * step
                left_over = inner_hi - j
                todo = 8 if left_over >= 8 else 4 if left_over >= 4 else 2 if left_over >= 2 else 1
            else:
                c0 = j * sw - left
                lo_kj = 0 if c0 >= 0 else -(c0 // dw)  # the first column in range: ceil(-c0 / dw)
                hi_kj = min(kw, (wd - 1 - c0) // dw + 1) if c0 < wd else 0
                count = _tap_list(ids, offsets, n, r0, c0, lo_kj, max(lo_kj, hi_kj), kh, kw, dh, dw, h, wd, c)
                xo, todo = 0, 1
            yo = (r * ow + j) * c
            _pixel_block(xf, yf, wf, b, with_bias, ids, offsets, count, xo, step, yo, c, lo, hi, todo, wide)
            j += todo


def _tap_list(ids, offsets, n, r0, c0, kj0, kj1, kh, kw, dh, dw, h, wd, c):  # pragma: no cover - compiled
    """Fill ``ids`` and ``offsets`` with the taps (in the window's row order) of the window at input row ``r0``
    and column ``c0`` whose rows fall inside the input and whose columns are ``kj0`` .. ``kj1``: each tap's
    first weight in the flat [taps, C] weights and the flat index of its input pixel; the number of taps."""
    count = 0
    for ki in range(kh):
        row = r0 + ki * dh
        if row < 0 or row >= h:
            continue
        for kj in range(kj0, kj1):
            ids[count] = (ki * kw + kj) * c
            offsets[count] = ((n * h + row) * wd + c0 + kj * dw) * c
            count += 1
    return count


def _pixel_block(
    xf, yf, wf, b, with_bias, ids, offsets, count, xo, step, yo, c, lo, hi, todo, wide
):  # pragma: no cover
    """``todo`` (1, 2, 4 or ``PIXELS``) pixels by the micro-kernel (16 lanes first where ``wide`` is True, then 8), the
    channels past its whole vectors by a scalar loop in the same order; a window with no tap in range is the
    bias alone."""
    if count == 0:
        for p in range(todo):
            for ch in range(c):
                v = np.float32(0.0) + b[ch] if with_bias else np.float32(0.0)
                yf[yo + p * c + ch] = min(max(v, lo), hi) if v == v else v
        return
    done = 0
    if wide is not None:
        done = c // 16 * 16
        if todo == 8:
            _pixels_wide(xf, yf, wf, b, with_bias, ids, offsets, count, xo, step, yo, c, lo, hi, 8, 0)
        elif todo == 4:
            _pixels_wide(xf, yf, wf, b, with_bias, ids, offsets, count, xo, step, yo, c, lo, hi, 4, 0)
        elif todo == 2:
            _pixels_wide(xf, yf, wf, b, with_bias, ids, offsets, count, xo, step, yo, c, lo, hi, 2, 0)
        else:
            _pixels_wide(xf, yf, wf, b, with_bias, ids, offsets, count, xo, step, yo, c, lo, hi, 1, 0)
    if c - done >= LANES:
        if todo == 8:
            _pixels(xf, yf, wf, b, with_bias, ids, offsets, count, xo, step, yo, c, lo, hi, 8, done)
        elif todo == 4:
            _pixels(xf, yf, wf, b, with_bias, ids, offsets, count, xo, step, yo, c, lo, hi, 4, done)
        elif todo == 2:
            _pixels(xf, yf, wf, b, with_bias, ids, offsets, count, xo, step, yo, c, lo, hi, 2, done)
        else:
            _pixels(xf, yf, wf, b, with_bias, ids, offsets, count, xo, step, yo, c, lo, hi, 1, done)
    for ch in range(c // LANES * LANES, c):
        for p in range(todo):
            at = xo + p * step + ch
            v = xf[offsets[0] + at] * wf[ids[0] + ch]
            for t in range(1, count):
                v += xf[offsets[t] + at] * wf[ids[t] + ch]
            if with_bias:
                v += b[ch]
            if v < lo:
                v = lo
            elif v > hi:
                v = hi
            yf[yo + p * c + ch] = v


def nhwc_step(x: Any, taps: Any, bias: Any, y: Any, *window: Any, where: str = "") -> Any:
    """The step of the convolution ``_depthwise_rows`` computes on all of ``y`` from ``x`` (``window`` is
    kh, kw, sh, sw, dh, dw, top, left, lo, hi; ``taps`` [KH*KW, C], ``bias`` [C] or empty) by the kernel of :func:`kernels` the
    host's measurement picks (:func:`choose`), its rows split over the threads ``compiled_kernels.split`` gives
    it at each call when the output is large enough; the tier must be on. ``where`` names the layer for
    ``edgetorch inspect --kernels``."""
    HELPERS.require("depthwise nhwc_step")
    kernel = choose(x, taps, bias, y, *window, where=where).kernel if compiled_kernels.flat_float32(x, y) else "rows"
    return _step(kernel, x, taps, bias, y, *window)


def kernels() -> tuple[str, ...]:
    """The kernels of ``DEPTHWISE_KERNELS`` this host may run: ``"vector16"`` (the micro-kernel on 16 lanes,
    then 8) only where the CPU has AVX-512."""
    return tuple(k for k in DEPTHWISE_KERNELS if k != "vector16" or this_host().vector_bits >= 512)


def _step(kernel: str, x: Any, taps: Any, bias: Any, y: Any, *window: Any) -> Any:
    """The step of ``kernel`` (a name of ``DEPTHWISE_KERNELS``) on these arrays; the tier must be on."""
    HELPERS.require(f"depthwise {kernel}")
    lo, hi = np.float32(window[8]), np.float32(window[9])  # the vector kernels' IR splats float32 bounds only
    args = (x, read_only(taps), read_only(bias), y, *window[:8], lo, hi)
    rows = y.shape[0] * y.shape[1]
    rows_kernel: Any = _depthwise_rows if kernel == "rows" else _vector_rows
    split_form: Any = _depthwise_split if kernel == "rows" else _vector_split
    name = "rows" if kernel == "rows" else "vector"
    wide: tuple[bool | None, ...] = () if kernel == "rows" else (wide_lanes(kernel),)
    worth = y.size >= policy.current().split_outputs
    whole = (*args, 0, rows, *wide)
    return compiled_kernels.part_split_step(
        f"depthwise_{name}_split", split_form, rows_kernel, whole, (*args, *wide), rows, worth
    )


def wide_lanes(kernel: str) -> bool | None:
    """``_vector_rows``'s ``wide`` for a vector kernel of ``DEPTHWISE_KERNELS``: True for ``"vector16"``, else
    None."""
    return True if kernel == "vector16" else None


def read_only(a: np.ndarray) -> np.ndarray:
    """``a`` as a read-only view: numba types a read-only array apart from a writable one, so that weights read
    from the file mapping and weights computed at load would each compile the kernels once more."""
    view = a.view()
    view.flags.writeable = False
    return view


def choose(x: Any, taps: Any, bias: Any, y: Any, *window: Any, where: str = "") -> tuning.Decision:
    """Which of :func:`kernels` runs this layer (one image of it), by the host's measurement
    (runtime/tuning.py, family ``"depthwise"``); each is timed on random inputs of the layer's shape and window."""
    kh, kw, sh, sw, dh, dw, top, left = window[:8]
    key = f"{x.shape[1]}x{x.shape[2]}x{x.shape[3]}:{kh}x{kw}/{sh}x{sw}/{dh}x{dw}/{top},{left}"
    names = kernels()

    def candidates() -> dict[str, Callable[[], object]]:
        rng = np.random.default_rng(0)
        xs = rng.standard_normal((1, *x.shape[1:]), dtype=np.float32)
        ys = np.empty((1, *y.shape[1:]), np.float32)
        return {name: _step(name, xs, taps, bias, ys, *window) for name in names}

    return tuning.choose("depthwise", key, names, candidates, where)


HELPERS = compiled_kernels.Helpers(
    globals(),
    compile=("_depthwise_rows", "_vector_rows"),
    inline=("_tap_list", "_pixel_block"),
    build={"_pixels": _pixels_intrinsic, "_pixels_wide": partial(_pixels_intrinsic, 16)},
)
