"""A QD8 x QB4W GEMM on the host's int8 dot-product instruction (AVX512-VNNI ``vpdpbusd``): the prefill-shaped
(many rows) counterpart of qgemv.py's integer GEMV: ``IntegerLinear.uses_vnni`` offers it to tuning as a third
candidate next to the GEMV and dequantize + sgemm (measurements: docs/benchmarks.md, "LLM prefill");
``bench/llm_vnni_probe.py`` measures the instruction's ceiling.

``vpdpbusd`` multiplies 4 unsigned bytes by 4 signed bytes in each of 16 int32 lanes and adds the 4 products
to the lane. The kernel gives each lane an output channel and broadcasts 4 input bytes of a row to all lanes:

* Inputs: the centred input ``xc`` (q - zero point, per row) is shifted by ``off`` = zero point + 128 into
  0..255 (the quantized value + 128, an unsigned byte), and its 8 inputs of a step are reordered to the even
  four then the odd four, to match the nibbles below.
* Weights stay 4-bit: 4 bytes of a channel (8 inputs) are one int32 lane; ``& 0x0F0F0F0F`` gives the even
  inputs' nibbles, ``>> 4 & 0x0F0F0F0F`` the odd ones', each 0..15 (the stored value + 8), a signed byte.
* Per block of inputs the exact dot of (a - off) and (nibble - 8) is the lanes' sum minus 8 sum(a) (the row's
  block sum) minus off times sum(nibble - 8) (the channel's, at load): all int32, exact.
* Then, as qgemv's ``_qb4w``, float32(dot) times the block's scale is added into a float32 total in block order
  (no fused multiply-add: the IR has separate fmul and fadd without fast-math flags), so the totals equal the
  GEMV's bit for bit; the caller scales by the row's input scale and adds the bias.

Tiles of 4 rows x 32 channels (8 int32 and 8 float32 accumulators, 16 of the 32 zmm registers); rows are padded
to 4 and channels to 32 (zero scales) in the buffers.

The GEMV (``VnniGemvQB4W``, a decode step's one row; ``IntegerLinear`` offers it to tuning beside its integer
GEMV) is the same arithmetic for one row at a time, shaped for a call of a few microseconds: tiles of 64
channels (4 int32 and 4 float32 accumulators), the weights, the channels' sums and the scales of a tile in one
stream read front to back; the input's bytes and block sums are made in the kernel, with the offset taken from
the row's least value (an int8 row's centred values span at most 255), so it needs no zero point; the scale,
bias and clamp are applied in the kernel; a call passes one pointer to a block of arguments fixed when the step
is made, and allocates nothing. Written as LLVM IR compiled by llvmlite's JIT (numba's
code generator, present with the [fast] tier), as no loop numba compiles becomes ``vpdpbusd``: numba types an
int32 product int64. Only on an x86 host whose flags include ``avx512_vnni`` (runtime/host.py).

Imports only NumPy at import time; llvmlite on the first compile.
"""

from __future__ import annotations

import ctypes
import functools
from functools import partial
from typing import Any

import numpy as np

from edgetorch.errors import InvalidInputError
from edgetorch.runtime.host import host
from edgetorch.runtime.kernels import llvm_jit

ROWS, LANES, VECTORS = 4, 16, 2  # a tile: ROWS rows x VECTORS * LANES channels
TILE_N = LANES * VECTORS


@functools.cache
def available() -> bool:
    """Whether this host has AVX512-VNNI and llvmlite imports (asked once a process)."""
    return "avx512_vnni" in host().flags and llvm_jit.usable()


def _ir() -> str:
    """The kernel's LLVM IR: ``qb4w_vnni(A, P, cw, sc, e, off, out, Mp, Np, K8, kb8, nb)``.

    A [Mp, K8, 2] int32 (a row's 8 inputs of a step as the even four bytes then the odd four), P [K8, Np] int32
    (4 packed bytes of a channel), cw [nb, Np] int32 (sum of nibble - 8 per block), sc [nb, Np] float32, e [Mp, nb]
    int32 (8 times the row's block sum of a), off [Mp] int32, out [Mp, Np] float32; kb8 steps a block."""
    lines = [
        "declare <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32>, <16 x i32>, <16 x i32>)",
        "define void @qb4w_vnni(i32* noalias %A, i32* noalias %P, i32* noalias %cw, float* noalias %sc,"
        " i32* noalias %e, i32* noalias %off, float* noalias %out, i64 %M, i64 %N, i64 %K8, i64 %kb8, i64 %nb) {",
        "entry:",
    ]
    add = lines.append
    tiles = [(r, v) for r in range(ROWS) for v in range(VECTORS)]
    for r, v in tiles:
        add(f"  %acc{r}{v} = alloca <16 x i32>, align 64")
        add(f"  %tot{r}{v} = alloca <16 x float>, align 64")
    lines += splat_ir("mask", "252645135") + splat_ir("four", "4")  # 0x0F0F0F0F
    add("  br label %mloop")
    add("mloop:\n  %m = phi i64 [0, %entry], [%mnext, %mend]\n  br label %nloop")
    add("nloop:\n  %n = phi i64 [0, %mloop], [%nnext, %nend]")
    for r, v in tiles:
        add(f"  store <16 x float> zeroinitializer, <16 x float>* %tot{r}{v}")
    add("  br label %bloop")
    add("bloop:\n  %b = phi i64 [0, %nloop], [%bnext, %bend]")
    for r, v in tiles:
        add(f"  store <16 x i32> zeroinitializer, <16 x i32>* %acc{r}{v}")
    add("  %k0 = mul i64 %b, %kb8\n  %k1 = add i64 %k0, %kb8\n  br label %kloop")
    add("kloop:\n  %k = phi i64 [%k0, %bloop], [%knext, %kloop]")
    add("  %kn = mul i64 %k, %N\n  %kn0 = add i64 %kn, %n")
    for v in range(VECTORS):
        add(f"  %wo{v} = add i64 %kn0, {LANES * v}")
        add(f"  %wp{v} = getelementptr inbounds i32, i32* %P, i64 %wo{v}")
        add(f"  %wvp{v} = bitcast i32* %wp{v} to <16 x i32>*")
        add(f"  %w{v} = load <16 x i32>, <16 x i32>* %wvp{v}, align 4")
        add(f"  %lo{v} = and <16 x i32> %w{v}, %mask")
        add(f"  %hs{v} = lshr <16 x i32> %w{v}, %four")
        add(f"  %hi{v} = and <16 x i32> %hs{v}, %mask")
    for r in range(ROWS):
        add(f"  %mr{r} = add i64 %m, {r}")
        add(f"  %ar{r} = mul i64 %mr{r}, %K8")
        add(f"  %ak{r} = add i64 %ar{r}, %k")
        add(f"  %ai{r} = mul i64 %ak{r}, 2")
        for half in ("e", "o"):
            idx = f"%ai{r}" if half == "e" else f"%aio{r}"
            if half == "o":
                add(f"  %aio{r} = add i64 %ai{r}, 1")
            add(f"  %ap{half}{r} = getelementptr inbounds i32, i32* %A, i64 {idx}")
            add(f"  %as{half}{r} = load i32, i32* %ap{half}{r}, align 4")
            lines += splat_ir(f"bc{half}{r}", f"%as{half}{r}")
        for v in range(VECTORS):
            add(f"  %o{r}{v} = load <16 x i32>, <16 x i32>* %acc{r}{v}")
            call = "call <16 x i32> @llvm.x86.avx512.vpdpbusd.512"
            add(f"  %d{r}{v} = {call}(<16 x i32> %o{r}{v}, <16 x i32> %bce{r}, <16 x i32> %lo{v})")
            add(f"  %q{r}{v} = {call}(<16 x i32> %d{r}{v}, <16 x i32> %bco{r}, <16 x i32> %hi{v})")
            add(f"  store <16 x i32> %q{r}{v}, <16 x i32>* %acc{r}{v}")
    add("  %knext = add i64 %k, 1\n  %kdone = icmp eq i64 %knext, %k1\n  br i1 %kdone, label %bend, label %kloop")
    add("bend:")
    add("  %bn = mul i64 %b, %N\n  %bn0 = add i64 %bn, %n")
    for v in range(VECTORS):
        add(f"  %bo{v} = add i64 %bn0, {LANES * v}")
        add(f"  %cwp{v} = getelementptr inbounds i32, i32* %cw, i64 %bo{v}")
        add(f"  %cwvp{v} = bitcast i32* %cwp{v} to <16 x i32>*")
        add(f"  %cwv{v} = load <16 x i32>, <16 x i32>* %cwvp{v}, align 4")
        add(f"  %scp{v} = getelementptr inbounds float, float* %sc, i64 %bo{v}")
        add(f"  %scvp{v} = bitcast float* %scp{v} to <16 x float>*")
        add(f"  %scv{v} = load <16 x float>, <16 x float>* %scvp{v}, align 4")
    for r in range(ROWS):
        add(f"  %em{r} = mul i64 %mr{r}, %nb\n  %eb{r} = add i64 %em{r}, %b")
        add(f"  %ep{r} = getelementptr inbounds i32, i32* %e, i64 %eb{r}")
        add(f"  %es{r} = load i32, i32* %ep{r}, align 4")
        lines += splat_ir(f"ev{r}", f"%es{r}")
        add(f"  %fp{r} = getelementptr inbounds i32, i32* %off, i64 %mr{r}")
        add(f"  %fs{r} = load i32, i32* %fp{r}, align 4")
        lines += splat_ir(f"fv{r}", f"%fs{r}")
        for v in range(VECTORS):
            add(f"  %s{r}{v} = load <16 x i32>, <16 x i32>* %acc{r}{v}")
            add(f"  %t{r}{v} = sub <16 x i32> %s{r}{v}, %ev{r}")
            add(f"  %c{r}{v} = mul <16 x i32> %fv{r}, %cwv{v}")
            add(f"  %x{r}{v} = sub <16 x i32> %t{r}{v}, %c{r}{v}")
            add(f"  %xf{r}{v} = sitofp <16 x i32> %x{r}{v} to <16 x float>")
            add(f"  %xs{r}{v} = fmul <16 x float> %xf{r}{v}, %scv{v}")
            add(f"  %to{r}{v} = load <16 x float>, <16 x float>* %tot{r}{v}")
            add(f"  %tn{r}{v} = fadd <16 x float> %to{r}{v}, %xs{r}{v}")
            add(f"  store <16 x float> %tn{r}{v}, <16 x float>* %tot{r}{v}")
    add("  %bnext = add i64 %b, 1\n  %bdone = icmp eq i64 %bnext, %nb\n  br i1 %bdone, label %nend, label %bloop")
    add("nend:")
    for r, v in tiles:
        add(f"  %y{r}{v} = load <16 x float>, <16 x float>* %tot{r}{v}")
        add(f"  %ym{r}{v} = mul i64 %mr{r}, %N\n  %yn{r}{v} = add i64 %ym{r}{v}, %n")
        add(f"  %yo{r}{v} = add i64 %yn{r}{v}, {LANES * v}")
        add(f"  %yp{r}{v} = getelementptr inbounds float, float* %out, i64 %yo{r}{v}")
        add(f"  %yvp{r}{v} = bitcast float* %yp{r}{v} to <16 x float>*")
        add(f"  store <16 x float> %y{r}{v}, <16 x float>* %yvp{r}{v}, align 4")
    add(f"  %nnext = add i64 %n, {TILE_N}\n  %ndone = icmp uge i64 %nnext, %N")
    add("  br i1 %ndone, label %mend, label %nloop")
    add(f"mend:\n  %mnext = add i64 %m, {ROWS}\n  %mdone = icmp uge i64 %mnext, %M")
    add("  br i1 %mdone, label %exit, label %mloop")
    add("exit:\n  ret void\n}")
    return "\n".join(lines)


def kernel() -> Any:
    """The GEMM (a ctypes function), compiled on the first call; None without VNNI or llvmlite."""
    ptr, i64 = ctypes.c_void_p, ctypes.c_int64
    return _compiled("qb4w_vnni", _ir, ctypes.CFUNCTYPE(None, *([ptr] * 7), *([i64] * 5)))


def gemv_kernel(bf16: bool = False) -> Any:
    """The GEMV ``qb4w_gemv(args)`` (a ctypes function) for scales stored as float32 or, with ``bf16``, as
    their upper halves; compiled on the first call; None without VNNI or llvmlite."""
    name = "qb4w_gemv_bf16" if bf16 else "qb4w_gemv"
    return _compiled(name, partial(_gemv_ir, bf16), ctypes.CFUNCTYPE(None, ctypes.c_void_p))


def _compiled(name: str, ir: Any, proto: Any) -> Any:
    """The function ``name`` of the IR ``ir()`` as ``proto``, compiled once per process; None without VNNI."""
    return llvm_jit.function(name, ir, proto) if available() else None


class VnniQB4W:
    """QB4W weights laid out for the kernel: from XNNPACK's bytes [N, K / 2] (inputs 2j, 2j + 1 in byte j, low
    nibble first, + 8) and block scales [N, K / block]."""

    def __init__(self, packed: np.ndarray, scales: np.ndarray, block: int, n: int, k: int):
        b = _padded(packed, scales, block, n, k, TILE_N, "GEMM", "the sgemm path")
        self.n, self.k, self.block = n, k, block
        npad = b.shape[0]
        self.p = np.ascontiguousarray(b.reshape(npad, k // 8, 4).transpose(1, 0, 2)).view(np.int32)[..., 0]
        nibbles = np.stack([b & 15, b >> 4], axis=-1).reshape(npad, k).astype(np.int32) - 8
        self.cw = np.ascontiguousarray(nibbles.reshape(npad, k // block, block).sum(axis=2).T, np.int32)
        sc = np.zeros((npad, k // block), np.float32)
        sc[:n] = scales
        self.sc = np.ascontiguousarray(sc.T)

    def totals(self, xc: np.ndarray, zp: np.ndarray) -> np.ndarray:
        """For the centred input ``xc`` [M, K] (q - zp, per row, any numeric dtype) and the rows' zero points
        ``zp`` [M] or [M, 1]: [M, N] float32, sum over blocks of float32(int dot) times the block scale, in block
        order (multiply by the row's input scale and add the bias for the layer's output)."""
        fn = kernel()
        if fn is None:
            raise InvalidInputError("VNNI QB4W GEMM: expected a host with avx512_vnni; found none; use sgemm")
        m, k = xc.shape
        if k != self.k:
            raise InvalidInputError(f"VNNI QB4W GEMM: expected {self.k} inputs a row, found {k}")
        mp = -(-m // ROWS) * ROWS
        off = np.zeros(mp, np.int32)
        off[:m] = np.asarray(zp, np.int32).reshape(-1) + 128
        a = np.zeros((mp, k), np.uint8)
        np.add(xc, off[:m, None], out=a[:m], casting="unsafe")
        nb = k // self.block
        e = np.ascontiguousarray(a.reshape(mp, nb, self.block).sum(axis=2, dtype=np.int32) * 8)
        ar = np.ascontiguousarray(a.reshape(mp, k // 8, 4, 2).transpose(0, 1, 3, 2))
        out = np.empty((mp, self.p.shape[1]), np.float32)
        fn(*(t.ctypes.data for t in (ar, self.p, self.cw, self.sc, e, off, out)), mp, out.shape[1], k // 8,
           self.block // 8, nb)  # fmt: skip
        return out[:m, : self.n]


# The one-row GEMV (``VnniGemvQB4W``): GEMV_VECTORS * LANES output channels a tile; inputs of up to GEMV_ROWS
# rows (a pass over the weights each, yet faster than the GEMM's NumPy input preparation up to 16 rows at
# SmolLM2's shapes) are offered to tuning (qgemv.IntegerLinear), larger ones are the GEMM's.
GEMV_VECTORS = 4
GEMV_TILE = LANES * GEMV_VECTORS
GEMV_ROWS = 16

# The GEMV's argument block (int64 each, ``VnniGemvQB4W.step``): pointers and sizes, in this order.
GEMV_ARGS = ("xc", "xstride", "w", "xscale", "sstride", "bias", "with_bias", "y", "ystride", "a", "e", "bounds",
             "rows", "channels", "k8", "kb8", "nb")  # fmt: skip


def _gemv_ir(bf16: bool) -> str:
    """The GEMV's LLVM IR: ``qb4w_gemv(args)`` (``qb4w_gemv_bf16`` with ``bf16``), ``args`` the int64 block of
    GEMV_ARGS.

    Per row: the centred input's least value gives ``off`` (its negation), so a = xc + off is 0..255 (an int8
    row's values span at most 255), written as bytes (each 8 inputs' even four then odd four) into the scratch
    ``a``, and 8 times each block's sum of xc into ``e``; then a tile of GEMV_TILE channels at a time: per block
    the lanes' ``vpdpbusd`` sums of a times nibble, minus e, minus off times the channels' sums of nibbles (one
    more ``vpdpbusd`` a step, of its even plus odd nibbles with ones), which is the exact dot of xc and
    nibble - 8, as float32 times the block scale added into the total in block order; total times the row's
    scale, plus the bias (when ``with_bias``), clamped to ``bounds`` [lo, hi]; the last tile's missing channels
    are not stored. ``w`` is the tiles' stream of ``VnniGemvQB4W``: per tile, per block, kb8 steps of GEMV_TILE
    int32 (4 bytes of a channel), then GEMV_TILE scales, float32 or, with ``bf16``, their upper halves."""
    vs = range(GEMV_VECTORS)
    v16 = "<16 x i32>"
    lines = [
        f"declare {v16} @llvm.x86.avx512.vpdpbusd.512({v16}, {v16}, {v16})",
        "declare void @llvm.masked.store.v16f32.p0v16f32(<16 x float>, <16 x float>*, i32, <16 x i1>)",
        "declare i32 @llvm.vector.reduce.smin.v8i32(<8 x i32>)",
        "declare i32 @llvm.vector.reduce.add.v8i32(<8 x i32>)",
        f"define void @qb4w_gemv{'_bf16' if bf16 else ''}(i64* noalias %args) {{",
        "entry:",
    ]
    add = lines.append
    lines += gemv_prologue_ir(
        GEMV_ARGS,
        {"xc": "float", "w": "i8", "xscale": "float", "bias": "float", "y": "float", "a": "i8", "e": "i32"},
    )
    lines += splat_ir("mask", "252645135")  # 0x0F0F0F0F
    lines += splat_ir("four", "4")
    scale_bytes = (2 if bf16 else 4) * GEMV_TILE
    add(f"  %blockbytes0 = mul i64 %kb8, {4 * GEMV_TILE}\n  %blockbytes = add i64 %blockbytes0, {scale_bytes}")
    lines += splat_ir("ones", "16843009")  # 0x01010101
    add("  %tilebytes = mul i64 %blockbytes, %nb")
    add("  br label %row")
    # --- per row: the offset, the bytes and the block sums
    add("row:\n  %m = phi i64 [0, %entry], [%mnext, %rowend]")
    add("  %xoff = mul i64 %m, %xstride\n  %xrow = getelementptr inbounds float, float* %xc.ptr, i64 %xoff")
    add("  br label %minloop")
    add("minloop:")
    add("  %mj = phi i64 [0, %row], [%mjnext, %minloop]")
    add("  %mlow = phi <8 x i32> [<i32 2147483647, i32 2147483647, i32 2147483647, i32 2147483647, "
        "i32 2147483647, i32 2147483647, i32 2147483647, i32 2147483647>, %row], [%mlownext, %minloop]")  # fmt: skip
    add("  %mx0 = mul i64 %mj, 8\n  %mxp = getelementptr inbounds float, float* %xrow, i64 %mx0")
    add("  %mxv = bitcast float* %mxp to <8 x float>*\n  %mxf = load <8 x float>, <8 x float>* %mxv, align 4")
    add("  %mxi = fptosi <8 x float> %mxf to <8 x i32>")
    add("  %mlt = icmp slt <8 x i32> %mxi, %mlow\n  %mlownext = select <8 x i1> %mlt, <8 x i32> %mxi, <8 x i32> %mlow")
    add(
        "  %mjnext = add i64 %mj, 1\n  %mjdone = icmp eq i64 %mjnext, %k8\n  br i1 %mjdone, label %minend, label %minloop"
    )
    add("minend:")
    add("  %least = call i32 @llvm.vector.reduce.smin.v8i32(<8 x i32> %mlownext)\n  %off = sub i32 0, %least")
    lines += splat_ir("offv8", "%off", width=8) + splat_ir("offv", "%off")
    add("  br label %sumblock")
    add("sumblock:\n  %sb = phi i64 [0, %minend], [%sbnext, %sumend]")
    add("  %sj0 = mul i64 %sb, %kb8\n  %sj1 = add i64 %sj0, %kb8\n  br label %sumloop")
    add("sumloop:")
    add("  %sj = phi i64 [%sj0, %sumblock], [%sjnext, %sumloop]")
    add("  %ssum = phi <8 x i32> [zeroinitializer, %sumblock], [%ssumnext, %sumloop]")
    add("  %sx0 = mul i64 %sj, 8\n  %sxp = getelementptr inbounds float, float* %xrow, i64 %sx0")
    add("  %sxv = bitcast float* %sxp to <8 x float>*\n  %sxf = load <8 x float>, <8 x float>* %sxv, align 4")
    add("  %sxi = fptosi <8 x float> %sxf to <8 x i32>\n  %sa = add <8 x i32> %sxi, %offv8")
    add("  %ssumnext = add <8 x i32> %ssum, %sxi")
    add("  %sb8 = trunc <8 x i32> %sa to <8 x i8>")
    add("  %sbo = shufflevector <8 x i8> %sb8, <8 x i8> undef, <8 x i32> <i32 0, i32 2, i32 4, i32 6, i32 1, i32 3, "
        "i32 5, i32 7>")  # fmt: skip
    add("  %sap = getelementptr inbounds i8, i8* %a.ptr, i64 %sx0\n  %sav = bitcast i8* %sap to <8 x i8>*")
    add("  store <8 x i8> %sbo, <8 x i8>* %sav, align 1")
    add(
        "  %sjnext = add i64 %sj, 1\n  %sdone = icmp eq i64 %sjnext, %sj1\n  br i1 %sdone, label %sumend, label %sumloop"
    )
    add("sumend:")
    add("  %bsum = call i32 @llvm.vector.reduce.add.v8i32(<8 x i32> %ssumnext)\n  %bsum8 = mul i32 %bsum, 8")
    add("  %ep = getelementptr inbounds i32, i32* %e.ptr, i64 %sb\n  store i32 %bsum8, i32* %ep")
    add("  %sbnext = add i64 %sb, 1\n  %sbdone = icmp eq i64 %sbnext, %nb")
    add("  br i1 %sbdone, label %rowready, label %sumblock")
    # --- per tile of channels: the blocks' dots into float32 totals
    lines += tile_start_ir("block")
    add("block:\n  %b = phi i64 [0, %tile], [%bnext, %blockend]")
    for v in vs:
        add(f"  %tot{v} = phi <16 x float> [zeroinitializer, %tile], [%totn{v}, %blockend]")
    add("  %bb = mul i64 %b, %blockbytes\n  %bp = getelementptr inbounds i8, i8* %tp, i64 %bb")
    add("  %j0 = mul i64 %b, %kb8\n  br label %step")
    add("step:\n  %j = phi i64 [0, %block], [%jnext, %step]")
    for v in vs:
        add(f"  %acc{v} = phi {v16} [zeroinitializer, %block], [%q{v}, %step]")
        add(f"  %ns{v} = phi {v16} [zeroinitializer, %block], [%nsn{v}, %step]")
    add("  %jj = add i64 %j0, %j\n  %ab = mul i64 %jj, 8")
    add("  %ap8 = getelementptr inbounds i8, i8* %a.ptr, i64 %ab\n  %ap = bitcast i8* %ap8 to i32*")
    for half, at in (("e", 0), ("o", 1)):
        add(f"  %a{half}p = getelementptr inbounds i32, i32* %ap, i64 {at}\n  %a{half} = load i32, i32* %a{half}p")
        lines += splat_ir(f"a{half}v", f"%a{half}")
    add(f"  %wb = mul i64 %j, {4 * GEMV_TILE}\n  %wp8 = getelementptr inbounds i8, i8* %bp, i64 %wb")
    add(f"  %wp = bitcast i8* %wp8 to {v16}*")
    call = f"call {v16} @llvm.x86.avx512.vpdpbusd.512"
    for v in vs:
        add(
            f"  %wp{v} = getelementptr inbounds {v16}, {v16}* %wp, i64 {v}\n  %w{v} = load {v16}, {v16}* %wp{v}, align 64"
        )
        add(
            f"  %wl{v} = and {v16} %w{v}, %mask\n  %ws{v} = lshr {v16} %w{v}, %four\n  %wh{v} = and {v16} %ws{v}, %mask"
        )
        add(f"  %d{v} = {call}({v16} %acc{v}, {v16} %aev, {v16} %wl{v})")
        add(f"  %q{v} = {call}({v16} %d{v}, {v16} %aov, {v16} %wh{v})")
        add(f"  %wlb{v} = bitcast {v16} %wl{v} to <64 x i8>\n  %whb{v} = bitcast {v16} %wh{v} to <64 x i8>")
        add(f"  %wnb{v} = add <64 x i8> %wlb{v}, %whb{v}\n  %wn{v} = bitcast <64 x i8> %wnb{v} to {v16}")
        add(f"  %nsn{v} = {call}({v16} %ns{v}, {v16} %wn{v}, {v16} %ones)")
    add("  %jnext = add i64 %j, 1\n  %jdone = icmp eq i64 %jnext, %kb8\n  br i1 %jdone, label %blockend, label %step")
    add("blockend:")
    add(f"  %scb = mul i64 %kb8, {4 * GEMV_TILE}\n  %scp8 = getelementptr inbounds i8, i8* %bp, i64 %scb")
    scale = "<16 x i16>" if bf16 else "<16 x float>"
    add(f"  %scp = bitcast i8* %scp8 to {scale}*")
    add("  %eb = getelementptr inbounds i32, i32* %e.ptr, i64 %b\n  %ebs = load i32, i32* %eb")
    lines += splat_ir("ebv", "%ebs")
    for v in vs:
        add(f"  %scp{v} = getelementptr inbounds {scale}, {scale}* %scp, i64 {v}")
        if bf16:
            add(
                f"  %sch{v} = load <16 x i16>, <16 x i16>* %scp{v}, align 32\n  %scw{v} = zext <16 x i16> %sch{v} to {v16}"
            )
            add(f"  %scs{v} = shl {v16} %scw{v}, <{', '.join(['i32 16'] * 16)}>")
            add(f"  %sc{v} = bitcast {v16} %scs{v} to <16 x float>")
        else:
            add(f"  %sc{v} = load <16 x float>, <16 x float>* %scp{v}, align 64")
        add(
            f"  %x{v}a = sub {v16} %q{v}, %ebv\n  %x{v}c = mul {v16} %offv, %nsn{v}\n  %x{v} = sub {v16} %x{v}a, %x{v}c"
        )
        add(f"  %xf{v} = sitofp {v16} %x{v} to <16 x float>\n  %xs{v} = fmul <16 x float> %xf{v}, %sc{v}")
        add(f"  %totn{v} = fadd <16 x float> %tot{v}, %xs{v}")
    add("  %bnext = add i64 %b, 1\n  %bdone = icmp eq i64 %bnext, %nb\n  br i1 %bdone, label %tileend, label %block")
    # --- the epilogue: scale, bias, clamp, store the channels that exist
    add("tileend:")
    for v in vs:
        add(f"  %c{v} = add i64 %n, {LANES * v}")
        add(f"  %v{v}s = fmul <16 x float> %totn{v}, %sv")
        add(f"  %bip{v} = getelementptr inbounds float, float* %bias.ptr, i64 %c{v}")
        add(
            f"  %bivp{v} = bitcast float* %bip{v} to <16 x float>*\n  %bi{v} = load <16 x float>, <16 x float>* %bivp{v}"
        )
        add(f"  %v{v}b = fadd <16 x float> %v{v}s, %bi{v}")
        add(f"  %v{v}u = select i1 %biased, <16 x float> %v{v}b, <16 x float> %v{v}s")
        lines += clamped_store_ir(v, f"%v{v}u")
    lines += tile_loop_end_ir()
    return "\n".join(lines)


def splat_ir(name: str, scalar: str, kind: str = "i32", width: int = 16) -> list[str]:
    """IR making %``name``, a vector of ``width`` ``kind`` lanes each ``scalar``."""
    vec = f"<{width} x {kind}>"
    return [
        f"  %{name}1 = insertelement {vec} undef, {kind} {scalar}, i32 0",
        f"  %{name} = shufflevector {vec} %{name}1, {vec} undef, <{width} x i32> zeroinitializer",
    ]


def gemv_prologue_ir(names: tuple[str, ...], pointers: dict[str, str]) -> list[str]:
    """IR of a GEMV's entry: each of ``names`` loaded from the int64 argument block %args (in that order), the
    ones in ``pointers`` also as %name.ptr of the element type given, and from the block's ``bounds``,
    ``with_bias`` and lane numbers: %lov / %hiv (the clamp's bounds in every lane), %biased and %lanes."""
    lines = [
        f"  %{name}.p = getelementptr inbounds i64, i64* %args, i64 {i}\n  %{name} = load i64, i64* %{name}.p"
        for i, name in enumerate(names)
    ]
    lines += [
        f"  %{name}.ptr = inttoptr i64 %{name} to {kind}*" for name, kind in {**pointers, "bounds": "float"}.items()
    ]
    for name, at in (("lo", 0), ("hi", 1)):
        lines.append(
            f"  %{name}.q = getelementptr inbounds float, float* %bounds.ptr, i64 {at}\n"
            f"  %{name} = load float, float* %{name}.q"
        )
        lines += splat_ir(f"{name}v", f"%{name}", "float")
    lanes = ", ".join(f"i32 {i}" for i in range(16))
    return [*lines, "  %biased = icmp ne i64 %with_bias, 0", f"  %lanes = bitcast <16 x i32> <{lanes}> to <16 x i32>"]


def tile_start_ir(first: str) -> list[str]:
    """IR from a GEMV row's label ``rowready`` (its input prepared) to the start of a tile: the row's scale in
    every lane (%sv), its output row (%yrow), then label ``tile`` with %n its first channel and %tp its part of
    the weight stream (%tilebytes a tile), branching to label ``first``."""
    return [
        "rowready:",
        "  %sp0 = mul i64 %m, %sstride\n  %sp = getelementptr inbounds float, float* %xscale.ptr, i64 %sp0",
        "  %s = load float, float* %sp",
        *splat_ir("sv", "%s", "float"),
        "  %yoff = mul i64 %m, %ystride\n  %yrow = getelementptr inbounds float, float* %y.ptr, i64 %yoff",
        "  br label %tile",
        "tile:\n  %n = phi i64 [0, %rowready], [%nnext, %tileend]",
        f"  %t = udiv i64 %n, {GEMV_TILE}\n  %tb = mul i64 %t, %tilebytes",
        f"  %tp = getelementptr inbounds i8, i8* %w.ptr, i64 %tb\n  br label %{first}",
    ]


def clamped_store_ir(v: int, value: str) -> list[str]:
    """IR of a GEMV's last step for the v-th vector of a tile: ``value`` (16 floats) clamped to %lov / %hiv and
    stored at %yrow + %n + 16 v, masked to the channels that exist (%channels, %lanes)."""
    v16 = "<16 x i32>"
    return [
        f"  %st{v}l = fcmp olt <16 x float> {value}, %lov",
        f"  %st{v}m = select <16 x i1> %st{v}l, <16 x float> %lov, <16 x float> {value}",
        f"  %st{v}h = fcmp ogt <16 x float> %st{v}m, %hiv",
        f"  %st{v} = select <16 x i1> %st{v}h, <16 x float> %hiv, <16 x float> %st{v}m",
        f"  %st{v}c = add i64 %n, {LANES * v}\n  %st{v}left = sub i64 %channels, %st{v}c",
        f"  %st{v}lt = trunc i64 %st{v}left to i32",
        *splat_ir(f"st{v}lv", f"%st{v}lt"),
        f"  %st{v}keep = icmp slt {v16} %lanes, %st{v}lv",
        f"  %st{v}p = getelementptr float, float* %yrow, i64 %st{v}c",
        f"  %st{v}vp = bitcast float* %st{v}p to <16 x float>*",
        f"  call void @llvm.masked.store.v16f32.p0v16f32(<16 x float> %st{v}, <16 x float>* %st{v}vp, i32 4, "
        f"<16 x i1> %st{v}keep)",
    ]


def tile_loop_end_ir() -> list[str]:
    """IR that closes a GEMV's loops: the next tile of GEMV_TILE channels (label ``tile``) until %channels, the
    next row (label ``row``) until %rows, then return."""
    return [
        f"  %nnext = add i64 %n, {GEMV_TILE}\n  %ndone = icmp uge i64 %nnext, %channels",
        "  br i1 %ndone, label %rowend, label %tile",
        "rowend:\n  %mnext = add i64 %m, 1\n  %mdone = icmp eq i64 %mnext, %rows",
        "  br i1 %mdone, label %exit, label %row",
        "exit:\n  ret void\n}",
    ]


class _Arguments(ctypes.c_void_p):
    """The GEMV's argument block as the pointer it is passed by, holding the arrays it points into."""

    keep: tuple


class VnniGemvQB4W:
    """QB4W weights laid out for the GEMV (``_gemv_ir``): from XNNPACK's bytes [N, K / 2] and block scales
    [N, K / block], one stream that the kernel reads front to back: per tile of GEMV_TILE channels (N padded
    with zero weights and scales), per block, the 4-byte words of each step of 8 inputs, then the block scales,
    as bfloat16 when every scale is one (XNNPACK's QB4W programs store them so), else as float32."""

    def __init__(self, packed: np.ndarray, scales: np.ndarray, block: int, n: int, k: int):
        b = _padded(packed, scales, block, n, k, GEMV_TILE, "GEMV", "the integer GEMV")
        self.n, self.k, self.block = n, k, block
        self.npad = b.shape[0]
        tiles, nb, kb8 = self.npad // GEMV_TILE, k // block, block // 8
        sc = np.zeros((self.npad, nb), np.float32)
        sc[:n] = scales
        self.bf16 = not (sc.view(np.uint32) & 0xFFFF).any()
        sc = np.ascontiguousarray(sc.reshape(tiles, GEMV_TILE, nb).transpose(0, 2, 1))
        scale_bytes = sc.view(np.uint16)[..., 1::2] if self.bf16 else sc  # the upper half of a little-endian float
        words_bytes = kb8 * 4 * GEMV_TILE
        self.stream = _aligned(tiles * nb * (words_bytes + scale_bytes.itemsize * GEMV_TILE)).reshape(tiles, nb, -1)
        words = b.reshape(tiles, GEMV_TILE, nb, kb8, 4).transpose(0, 2, 3, 1, 4)
        self.stream[..., :words_bytes] = words.reshape(tiles, nb, -1)
        self.stream[..., words_bytes:] = np.ascontiguousarray(scale_bytes).view(np.uint8)

    def step(self, xc: np.ndarray, xscale: np.ndarray, bias: np.ndarray, y: np.ndarray, lo: float, hi: float) -> Any:
        """A call that computes y [M, N] = clamp(the node on the centred input ``xc`` [M, K] with row scales
        ``xscale`` [M, 1], ``lo``, ``hi``) with ``bias`` [N] (or empty): the float32 values of qgemv's integer
        GEMV. ``xc`` and ``y`` float32 with rows of contiguous values; the call allocates nothing."""
        fn = gemv_kernel(self.bf16)
        padded, bounds = gemv_operands("QB4W", fn, xc, xscale, y, self.k, self.n, self.npad, bias, lo, hi)
        m, nb, arrays = xc.shape[0], self.k // self.block, (xc, xscale, y)
        a, e = _aligned(self.k), np.zeros(nb, np.int32)
        fields = {
            "xc": xc.ctypes.data, "xstride": xc.strides[0] // 4, "w": self.stream.ctypes.data,
            "xscale": xscale.ctypes.data, "sstride": xscale.strides[0] // 4, "bias": padded.ctypes.data,
            "with_bias": int(bias.shape[0] > 0), "y": y.ctypes.data, "ystride": y.strides[0] // 4,
            "a": a.ctypes.data, "e": e.ctypes.data, "bounds": bounds.ctypes.data, "rows": m, "channels": self.n,
            "k8": self.k // 8, "kb8": self.block // 8, "nb": nb,
        }  # fmt: skip
        return bound_call(fn, [fields[name] for name in GEMV_ARGS], (padded, bounds, a, e, self.stream, *arrays))


def gemv_operands(
    kind: str, fn: Any, xc: np.ndarray, xscale: np.ndarray, y: np.ndarray, k: int, n: int, npad: int,
    bias: np.ndarray, lo: float, hi: float,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """What a VNNI GEMV step of weights ``kind`` checks and makes before its argument block: the compiled kernel
    ``fn`` exists, the buffers are ones it takes (float32 xc [M, k], xscale [M, 1], y [M, n], contiguous rows);
    then the bias padded to the ``npad`` channels and the clamp's bounds [lo, hi] (float32 each)."""
    if fn is None:
        raise InvalidInputError(f"VNNI {kind} GEMV: expected a host with avx512_vnni; found none; use the GEMV")
    arrays = (xc, xscale, y)
    if not gemv_fits(xc, xscale, y) or xc.shape[1] != k or y.shape[1] != n:
        raise InvalidInputError(
            f"VNNI {kind} GEMV: expected float32 xc [M, {k}], xscale [M, 1] and y [M, {n}] with contiguous "
            f"rows; found {[(a.dtype, a.shape, a.strides) for a in arrays]}; use the integer GEMV"
        )
    padded = np.zeros(npad, np.float32)
    padded[: bias.shape[0]] = bias
    return padded, np.array([lo, hi], np.float32)


def bound_call(fn: Any, values: list[int], keep: tuple) -> Any:
    """The call of the GEMV kernel ``fn`` (ctypes) on the argument block of ``values`` (int64 each, pointers into
    the arrays ``keep`` holds alive as long as the call)."""
    block = np.array(values, np.int64)
    args = _Arguments(block.ctypes.data)
    args.keep = (block, *keep)
    return partial(fn, args)


def _padded(
    packed: np.ndarray, scales: np.ndarray, block: int, n: int, k: int, tile: int, kernel: str, instead: str
) -> np.ndarray:
    """XNNPACK's QB4W bytes [N, K / 2] with N padded to a multiple of ``tile`` by zero weights (0x88), once the
    shapes are checked to be ones the VNNI ``kernel`` takes (the error names what to use ``instead``)."""
    if k % 8 or block % 8 or k % block or scales.shape != (n, k // block):
        raise InvalidInputError(
            f"VNNI QB4W {kernel}: expected K and the block multiples of 8, the block dividing K and scales "
            f"[N, K / block]; found K={k}, block={block}, scales {scales.shape}; use {instead}"
        )
    b = np.full((-(-n // tile) * tile, k // 2), 0x88, np.uint8)
    b[:n] = np.asarray(packed, np.uint8).reshape(n, k // 2)
    return b


def gemv_fits(xc: np.ndarray, xscale: np.ndarray, y: np.ndarray) -> bool:
    """Whether the GEMV takes these buffers: float32 2-D arrays of M rows with contiguous values in a row."""
    arrays = (xc, xscale, y)
    if any(a.dtype != np.float32 or a.ndim != 2 or a.strides[1] != 4 or a.strides[0] % 4 for a in arrays):
        return False
    return xc.shape[0] == xscale.shape[0] == y.shape[0]


def _aligned(size: int) -> np.ndarray:
    """``size`` zero bytes starting on a 64-byte boundary (a cache line: a vector load never straddles two)."""
    raw = np.zeros(size + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start : start + size]
