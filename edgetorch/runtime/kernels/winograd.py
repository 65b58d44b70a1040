"""3x3 stride-1 convolutions by Winograd's minimal filtering, F(2x2, 3x3), in the optional compiled tier (numba,
``pip install edgetorch[fast]``): 16 multiplies for each 2x2 block of outputs and input channel, where the
direct convolution (im2col and a GEMM) takes 36, so 2.25x fewer multiply-adds.

Each 2x2 output tile reads a 4x4 input tile ``d``; with the constant matrices below,

    V = Bt d B        (the input transform: adds and subtracts only)
    U = G g Gt        (the 3x3 filter ``g`` of each input and output channel, transformed once at load)
    Y = At (U * V) A  (the output transform: adds and subtracts only)

and the 16 element-wise products summed over the input channels are 16 GEMMs, [tiles, C] x [C, OC]: the
packed GEMM of gemm.py on the transformed weights, packed once. The work runs in blocks of tiles that keep
the block's transformed inputs and products in the L2 cache: the input transform of a block, its 16 GEMMs,
then its output transform with the bias and the clamp, written straight into the NHWC output. From
the policy's ``split_macs`` on, the blocks are cut over the threads (``compiled.split``).

The two transforms are LLVM vector IR (``_transforms``), eight channels a vector: a loop numba compiles over
16 loads and 16 stores at run-time distances does not vectorise (its alias checks pass LLVM's limit), and
ran slower than the GEMMs it feeds. So the convolutions taken have channels in multiples of 8.

Numerics: the transforms add and subtract (and G halves), so the result differs from the direct sum by
rounding only, about 1e-6 of the output's scale on ResNet-18's layers (tests/runtime/kernels/test_winograd.py
compares it with float64). On the 7x7x512 layers of ResNet-18 the 16 transformed weight matrices (1.8x the
filter) are read for 16 tiles: split by output channels, so each thread reads half (``bench/gemm.py
--winograd``; figures in docs/benchmarks.md). Fewer tiles than the policy's ``winograd_min_tiles`` keep the
direct GEMM.

Imports only NumPy, compiled.py and gemm.py (numba and llvmlite on the first compile).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, partial
from typing import Any

import numpy as np

from edgetorch.runtime import policy
from edgetorch.runtime.kernels import compiled, gemm

LANES = 8  # float32 lanes a vector (AVX2)

# G [4, 3]: the filter transform.
_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])


def eligible(kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, groups: int, c: int, oc: int) -> bool:
    """Whether a convolution's shape is one this module computes: 3x3, stride 1, no dilation, one group, and
    channels in multiples of 8 on both sides."""
    return (kh, kw, sh, sw, dh, dw, groups) == (3, 3, 1, 1, 1, 1, 1) and c % LANES == 0 and oc % LANES == 0


def worth(nb: int, oh: int, ow: int) -> bool:
    """Whether an output of ``nb`` images of ``oh`` x ``ow`` has tiles enough (the policy's ``winograd_min_tiles``) to repay reading the
    transformed weights."""
    return nb * -(-oh // 2) * -(-ow // 2) >= policy.current().winograd_min_tiles


def prepare(w: np.ndarray) -> np.ndarray:
    """The transformed, packed weights of the filter ``w`` [OC, 3, 3, C] (XNNPACK's layout): 16 matrices
    U[k] [C, OC] in gemm.pack's panels, [16, ceil(OC / 16), C, 16] float32 (computed in float64)."""
    oc, _, _, c = w.shape
    u = np.einsum("ai,oijc,bj->abco", _G, w.astype(np.float64), _G).reshape(16, c, oc).astype(np.float32)
    return np.stack([gemm.pack(u[k], None)[0] for k in range(16)])


def step(
    x: np.ndarray, wp: np.ndarray, bias: np.ndarray | None, y: np.ndarray, top: int, left: int, lo: float, hi: float
) -> Callable[[], None] | None:
    """The step y = clamp(conv3x3(x, w) + bias, lo, hi) for NHWC float32 ``x`` [N, H, W, C] and ``y``
    [N, OH, OW, OC] (C-contiguous both), ``wp`` from :func:`prepare`, padding ``top`` and ``left`` (the
    bottom and right follow from the shapes); the tier must be on. None for arrays it cannot take."""
    HELPERS.require("winograd step")
    nb, h, wd, c = x.shape
    oc = y.shape[3]
    if wp.shape[2] != c or wp.shape[1] != -(-oc // gemm.WIDTH) or not compiled.flat_float32(x, y):
        return None
    if not c % LANES == oc % LANES == 0:
        return None
    th, tw = -(-y.shape[1] // 2), -(-y.shape[2] // 2)
    tiles = nb * th * tw
    block = max(gemm.ROWS, policy.current().winograd_block_bytes // (16 * 4 * max(c, oc)) // gemm.ROWS * gemm.ROWS)
    full_bias = np.zeros(wp.shape[1] * gemm.WIDTH, np.float32)
    if bias is not None:
        full_bias[:oc] = bias.reshape(-1)
    zero = np.zeros_like(full_bias)  # the GEMMs' bias: the output transform adds the layer's
    args = (y, x, wp, full_bias, zero, np.float32(lo), np.float32(hi), th, tw, top, left, block)
    serial = partial(compiled.compiled("winograd", _winograd), *args)
    parallel = compiled.compiled("winograd_split", _winograd_split, parallel=True)
    macs = tiles * 16 * c * oc
    limit = max(-(-tiles // block), wp.shape[1])  # parts of blocks, or of panels
    return compiled.split_step(serial, parallel, args, limit, macs >= policy.current().split_macs)


# ------------------------------------------------------------------------------------------------ kernels

_input_tile: Any = None
_output_tile: Any = None
_gemm_part: Any = None
prange: Any = range


def _blocks(y, x, wp, bias, zero, lo, hi, th, tw, top, left, block, first, last, p0, p1):  # pragma: no cover
    """Tiles ``first`` .. ``last`` (t = (n * TH + i) * TW + j, the tile of outputs 2i, 2j of image n) in blocks
    of ``block``, output channels 16 p0 .. 16 p1 (panels p0 .. p1): the input transform into V [16, block, C],
    16 GEMMs into M [16, block, OC] (their bias ``zero``), the output transform adding ``bias``."""
    nb, h, wd, c = x.shape
    oh, ow, oc = y.shape[1], y.shape[2], y.shape[3]
    xf, yf = x.reshape(-1), y.reshape(-1)
    v = np.empty(16 * block * c, np.float32)
    m = np.empty(16 * block * oc, np.float32)
    patch = np.zeros(16 * c, np.float32)
    inf = np.float32(np.inf)
    per_image = th * tw
    c0, channels = p0 * wp.shape[3], min(oc, p1 * wp.shape[3]) - p0 * wp.shape[3]
    for b0 in range(first, last, block):
        b1 = min(last, b0 + block)
        rows = b1 - b0
        plane = rows * c
        for t in range(b0, b1):
            n, r = t // per_image, t % per_image
            i0, j0 = 2 * (r // tw) - top, 2 * (r % tw) - left
            if i0 >= 0 and i0 + 4 <= h and j0 >= 0 and j0 + 4 <= wd:
                _input_tile(xf, ((n * h + i0) * wd + j0) * c, wd * c, c, v, (t - b0) * c, plane)
            else:  # a tile over the padding: its 4x4 pixels gathered first, zero outside the input
                for i in range(4):
                    for j in range(4):
                        at = np.uint64((i * 4 + j) * c)
                        row, col = i0 + i, j0 + j
                        if row < 0 or row >= h or col < 0 or col >= wd:
                            for q in range(np.uint64(c)):
                                patch[at + q] = 0.0
                        else:
                            src = np.uint64(((n * h + row) * wd + col) * c)
                            for q in range(np.uint64(c)):
                                patch[at + q] = xf[src + q]
                _input_tile(patch, 0, 4 * c, c, v, (t - b0) * c, plane)
        vb = v[: 16 * plane].reshape(16, rows, c)
        mb = m[: 16 * rows * oc].reshape(16, rows, oc)
        for k in range(16):
            _gemm_part(vb[k], wp[k], zero, -inf, inf, mb[k], 0, rows, p0, p1)
        mf = m.reshape(-1)
        for t in range(b0, b1):
            n, r = t // per_image, t % per_image
            i0, j0 = 2 * (r // tw), 2 * (r % tw)
            y00 = ((n * oh + i0) * ow + j0) * oc + c0
            y01 = y00 + oc if j0 + 1 < ow else -1
            y10 = y00 + ow * oc if i0 + 1 < oh else -1
            y11 = y10 + oc if y10 >= 0 and y01 >= 0 else -1
            _output_tile(mf, (t - b0) * oc + c0, rows * oc, bias[c0:], lo, hi, yf, y00, y01, y10, y11, channels)


def _winograd(y, x, wp, bias, zero, lo, hi, th, tw, top, left, block):  # pragma: no cover - compiled
    _blocks(y, x, wp, bias, zero, lo, hi, th, tw, top, left, block, 0, x.shape[0] * th * tw, 0, wp.shape[1])


def _winograd_split(y, x, wp, bias, zero, lo, hi, th, tw, top, left, block, parts):  # pragma: no cover - compiled
    """``_winograd`` cut into ``parts`` runs on numba's threads (same bits): runs of blocks of tiles, or, when
    the transformed weights outnumber the transformed inputs, runs of output panels, each part transforming
    every tile's input, so that a thread reads only its share of the weights (as gemm's split)."""
    tiles, panels = x.shape[0] * th * tw, wp.shape[1]
    blocks = -(-tiles // block)
    by_panels = wp.size > 16 * tiles * x.shape[3]
    run = -(-panels // parts) if by_panels else -(-blocks // parts) * block
    for p in prange(parts):
        if by_panels:
            p0 = min(panels, p * run)
            _blocks(y, x, wp, bias, zero, lo, hi, th, tw, top, left, block, 0, tiles, p0, min(panels, p0 + run))
        else:
            first = min(tiles, p * run)
            _blocks(y, x, wp, bias, zero, lo, hi, th, tw, top, left, block, first, min(tiles, first + run), 0, panels)


@cache
def _transforms() -> tuple[Any, Any]:
    """The two transforms as numba intrinsics over a run of channels, eight a vector (the run a multiple of 8);
    offsets in floats:

    ``input_tile(src, a, rs, cs, v, o, plane)``: d[i][j] = src[a + i rs + j cs + q], and
    v[o + k plane + q] = (Bt d B)[k // 4][k % 4] for the 16 k, for q < cs (a pixel's channels).

    ``output_tile(m, p, mp, bias, lo, hi, y, y00, y01, y10, y11, count)``: with M[k] = m[p + k mp + q], the
    2x2 outputs At M A plus bias[q], clamped to [lo, hi] (NaN kept, as the GEMM's clamp), stored at
    y[y00 + q] .. y[y11 + q]; an offset below 0 is a pixel past the output's edge, not stored."""
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    v8 = ir.VectorType(ir.FloatType(), LANES)

    def flat(t: Any) -> bool:
        return isinstance(t, types.Array) and t.ndim == 1 and t.layout == "C" and t.dtype == types.float32

    def helpers(context: Any, builder: Any) -> tuple[Any, Any, Any]:
        """An ``intp`` constant, the vector at an offset of an array, and a vector of one float in every lane."""
        const, vector, splat = compiled.ir_helpers(builder, v8, context.get_value_type(types.intp))

        def at(array: Any, offset: Any) -> Any:
            return vector(array.data, offset)

        return const, at, splat

    @intrinsic
    def input_tile(typingctx, src, a, rs, cs, v, o, plane):
        if not (flat(src) and flat(v)):
            return None
        sig = types.void(src, a, rs, cs, v, o, plane)

        def codegen(context, builder, signature, args):
            const, at, _ = helpers(context, builder)
            s, d = (context.make_array(signature.args[n])(context, builder, args[n]) for n in (0, 4))
            base, rstride, cstride, out, stride = (
                context.cast(builder, args[n], signature.args[n], types.intp) for n in (1, 2, 3, 5, 6)
            )
            count = builder.sdiv(cstride, const(LANES))
            with cgutils.for_range(builder, count) as loop:
                q = builder.mul(loop.index, const(LANES))
                start = builder.add(base, q)
                dd = [
                    [
                        builder.load(
                            at(
                                s,
                                builder.add(
                                    start, builder.add(builder.mul(const(i), rstride), builder.mul(const(j), cstride))
                                ),
                            ),
                            align=4,
                        )
                        for j in range(4)
                    ]
                    for i in range(4)
                ]
                add, sub = builder.fadd, builder.fsub
                e = [  # Bt d: rows d0 - d2, d1 + d2, d2 - d1, d1 - d3
                    [sub(dd[0][j], dd[2][j]) for j in range(4)],
                    [add(dd[1][j], dd[2][j]) for j in range(4)],
                    [sub(dd[2][j], dd[1][j]) for j in range(4)],
                    [sub(dd[1][j], dd[3][j]) for j in range(4)],
                ]
                first = builder.add(out, q)
                for i in range(4):  # (Bt d) B: the same combination of the columns
                    row = e[i]
                    values = (sub(row[0], row[2]), add(row[1], row[2]), sub(row[2], row[1]), sub(row[1], row[3]))
                    for j, value in enumerate(values):
                        where = builder.add(first, builder.mul(const(4 * i + j), stride))
                        builder.store(value, at(d, where), align=4)
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def output_tile(typingctx, m, p, mp, bias, lo, hi, y, y00, y01, y10, y11, count):
        if not (flat(m) and flat(bias) and flat(y)):
            return None
        sig = types.void(m, p, mp, bias, lo, hi, y, y00, y01, y10, y11, count)

        def codegen(context, builder, signature, args):
            const, at, splat = helpers(context, builder)
            mm, bb, yy = (context.make_array(signature.args[n])(context, builder, args[n]) for n in (0, 3, 6))
            first, stride = (context.cast(builder, args[n], signature.args[n], types.intp) for n in (1, 2))
            outs = [context.cast(builder, args[n], signature.args[n], types.intp) for n in (7, 8, 9, 10)]
            channels = context.cast(builder, args[11], signature.args[11], types.intp)

            low, high = splat(args[4]), splat(args[5])
            count = builder.sdiv(channels, const(LANES))
            with cgutils.for_range(builder, count) as loop:
                q = builder.mul(loop.index, const(LANES))
                start = builder.add(first, q)
                mk = [
                    builder.load(at(mm, builder.add(start, builder.mul(const(k), stride))), align=4) for k in range(16)
                ]
                add, sub = builder.fadd, builder.fsub
                s0 = [add(add(mk[j], mk[4 + j]), mk[8 + j]) for j in range(4)]  # At M: rows m0 + m1 + m2, m1 - m2 - m3
                s1 = [sub(sub(mk[4 + j], mk[8 + j]), mk[12 + j]) for j in range(4)]
                b = builder.load(at(bb, q), align=4)
                values = []
                for s in (s0, s1):  # (At M) A
                    values += [add(add(add(s[0], s[1]), s[2]), b), add(sub(sub(s[1], s[2]), s[3]), b)]
                for value, where in zip(values, outs):
                    value = builder.select(builder.fcmp_ordered("<", value, low), low, value)
                    value = builder.select(builder.fcmp_ordered(">", value, high), high, value)
                    with builder.if_then(builder.icmp_signed(">=", where, const(0))):
                        builder.store(value, at(yy, builder.add(where, q)), align=4)
            return context.get_dummy_value()

        return sig, codegen

    return input_tile, output_tile


HELPERS = compiled.Helpers(
    globals(),
    compile=("_blocks",),
    build={
        "_input_tile": lambda: _transforms()[0],
        "_output_tile": lambda: _transforms()[1],
        "_gemm_part": lambda: gemm._gemm_part,
    },
    after=(gemm.HELPERS,),
)
