"""A one-row GEMV for QC8W weights (int8, a scale per channel) on AVX512-VNNI ``vpdpbusd`` (qgemv_vnni.py's
``VNNI`` dot form): a language model's head (SmolLM2's 49152 x 576, the largest layer of its decode step), which
ran qgemv.py's integer GEMV. ``IntegerLinear`` offers it to tuning as ``vnni-gemv`` beside that GEMV, as it does
qgemv_vnni.py's QB4W GEMV. Not in the AVX2 form: ``vpmaddubsw`` sums two products of an unsigned byte and an int8
weight in int16, which saturates (2 x 255 x 128 > 32767); on such a host the head keeps the integer GEMV, which
streams its 28 MB near the bandwidth one core gets.

Arithmetic: a row's centred input ``xc`` (integers spanning at most 255) is shifted by ``off`` = minus its
least value into unsigned bytes a = xc + off; per channel the lanes sum a times the int8 weights, 4 inputs a
``vpdpbusd``, in int32, and the exact dot of xc and the weights is that sum minus off times the channel's sum of
weights (made at load). Then as qgemv's ``_qc8w``: float32(dot) times the row's scale times the channel's scale
(in that order, no fused multiply-add), plus the bias, clamped: the same float32 bits.

Layout: per tile of GEMV_TILE channels, per step of 4 inputs, the 4 bytes of each channel (an int32 lane),
front to back; N padded with zero weights. K must be a multiple of 4 (``takes``).

Imports only NumPy at import time; llvmlite on the first compile.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from edgetorch.backends.xnnpack.qgemv_vnni import (
    VNNI,
    _aligned,
    bound_call,
    clamped_store_ir,
    dots,
    gemv_operands,
    gemv_prologue_ir,
    masked_store_declaration,
    splat_ir,
    tile_loop_end_ir,
    tile_start_ir,
)
from edgetorch.errors import InvalidInputError
from edgetorch.runtime.kernels import llvm_jit

GEMV_TILE, LANES, VECTORS = VNNI.gemv_tile, VNNI.lanes, VNNI.gemv_vectors
MAX_K = 60_000  # K x 255 x 128 stays within int32

# The argument block (int64 each), in this order.
ARGS = ("xc", "xstride", "w", "xscale", "sstride", "wscale", "csum", "bias", "with_bias", "y", "ystride", "a",
        "bounds", "rows", "channels", "k4")  # fmt: skip


def _ir() -> str:
    """``qc8w_gemv(args)``, ``args`` the int64 block of ARGS: per row, ``off`` and the bytes a (into the
    scratch ``a``), then per tile of GEMV_TILE channels the lanes' dots, corrected by off times
    ``csum``, scaled, biased (when ``with_bias``) and clamped to ``bounds``; channels past ``channels`` are not
    stored."""
    v16, vs = "<16 x i32>", range(VECTORS)
    lines = [
        *VNNI.declarations(),
        *masked_store_declaration(VNNI),
        "declare i32 @llvm.vector.reduce.smin.v4i32(<4 x i32>)",
        "define void @qc8w_gemv(i64* noalias %args) {",
        "entry:",
    ]
    add = lines.append

    pointers = {"xc": "float", "w": "i8", "xscale": "float", "wscale": "float", "csum": "i32", "bias": "float",
                "y": "float", "a": "i32"}  # fmt: skip
    lines += gemv_prologue_ir(ARGS, pointers, VNNI)
    add(f"  %tilebytes = mul i64 %k4, {4 * GEMV_TILE}\n  br label %row")
    # --- per row: off and the bytes
    add("row:\n  %m = phi i64 [0, %entry], [%mnext, %rowend]")
    add("  %xoff = mul i64 %m, %xstride\n  %xrow = getelementptr inbounds float, float* %xc.ptr, i64 %xoff")
    add("  br label %minloop")
    add("minloop:\n  %mj = phi i64 [0, %row], [%mjnext, %minloop]")
    add("  %mlow = phi <4 x i32> [<i32 2147483647, i32 2147483647, i32 2147483647, i32 2147483647>, %row], "
        "[%mlownext, %minloop]")  # fmt: skip
    add("  %mx0 = mul i64 %mj, 4\n  %mxp = getelementptr inbounds float, float* %xrow, i64 %mx0")
    add("  %mxv = bitcast float* %mxp to <4 x float>*\n  %mxf = load <4 x float>, <4 x float>* %mxv, align 4")
    add("  %mxi = fptosi <4 x float> %mxf to <4 x i32>")
    add("  %mlt = icmp slt <4 x i32> %mxi, %mlow\n  %mlownext = select <4 x i1> %mlt, <4 x i32> %mxi, <4 x i32> %mlow")
    add(
        "  %mjnext = add i64 %mj, 1\n  %mjdone = icmp eq i64 %mjnext, %k4\n  br i1 %mjdone, label %minend, label %minloop"
    )
    add("minend:")
    add("  %least = call i32 @llvm.vector.reduce.smin.v4i32(<4 x i32> %mlownext)\n  %off = sub i32 0, %least")
    lines += splat_ir("off4", "%off", width=4)
    lines += splat_ir("offv", "%off")
    add("  br label %bytes")
    add("bytes:\n  %bj = phi i64 [0, %minend], [%bjnext, %bytes]")
    add("  %bx0 = mul i64 %bj, 4\n  %bxp = getelementptr inbounds float, float* %xrow, i64 %bx0")
    add("  %bxv = bitcast float* %bxp to <4 x float>*\n  %bxf = load <4 x float>, <4 x float>* %bxv, align 4")
    add("  %bxi = fptosi <4 x float> %bxf to <4 x i32>\n  %bxa = add <4 x i32> %bxi, %off4")
    add("  %bx8 = trunc <4 x i32> %bxa to <4 x i8>\n  %bword = bitcast <4 x i8> %bx8 to i32")
    add("  %bap = getelementptr inbounds i32, i32* %a.ptr, i64 %bj\n  store i32 %bword, i32* %bap")
    add(
        "  %bjnext = add i64 %bj, 1\n  %bjdone = icmp eq i64 %bjnext, %k4\n  br i1 %bjdone, label %rowready, label %bytes"
    )
    # --- per tile: the dots over all K
    lines += tile_start_ir("step", VNNI)
    add("step:\n  %j = phi i64 [0, %tile], [%jnext, %step]")
    for v in vs:
        add(f"  %acc{v} = phi {v16} [zeroinitializer, %tile], [%d{v}, %step]")
    add("  %ap = getelementptr inbounds i32, i32* %a.ptr, i64 %j\n  %aw = load i32, i32* %ap")
    lines += splat_ir("av", "%aw")
    add(f"  %wb = mul i64 %j, {4 * GEMV_TILE}\n  %wp8 = getelementptr inbounds i8, i8* %tp, i64 %wb")
    add(f"  %wp = bitcast i8* %wp8 to {v16}*")
    for v in vs:
        add(
            f"  %wp{v} = getelementptr inbounds {v16}, {v16}* %wp, i64 {v}\n  %w{v} = load {v16}, {v16}* %wp{v}, align 64"
        )
        lines += VNNI.ir(f"d{v}", f"%acc{v}", [("%av", f"%w{v}")])
    add("  %jnext = add i64 %j, 1\n  %jdone = icmp eq i64 %jnext, %k4\n  br i1 %jdone, label %tileend, label %step")
    # --- the epilogue: correct, scale, bias, clamp, store the channels that exist
    add("tileend:")
    for v in vs:
        add(f"  %c{v} = add i64 %n, {LANES * v}")
        for name, kind in (("cs", "i32"), ("ws", "float"), ("bi", "float")):
            src = {"cs": "csum", "ws": "wscale", "bi": "bias"}[name]
            add(f"  %{name}p{v} = getelementptr inbounds {kind}, {kind}* %{src}.ptr, i64 %c{v}")
            add(f"  %{name}vp{v} = bitcast {kind}* %{name}p{v} to <16 x {kind}>*")
            add(f"  %{name}{v} = load <16 x {kind}>, <16 x {kind}>* %{name}vp{v}")
        add(f"  %fix{v} = mul {v16} %offv, %cs{v}\n  %dot{v} = sub {v16} %d{v}, %fix{v}")
        add(f"  %f{v} = sitofp {v16} %dot{v} to <16 x float>\n  %fs{v} = fmul <16 x float> %f{v}, %sv")
        add(f"  %fw{v} = fmul <16 x float> %fs{v}, %ws{v}\n  %fb{v} = fadd <16 x float> %fw{v}, %bi{v}")
        add(f"  %u{v} = select i1 %biased, <16 x float> %fb{v}, <16 x float> %fw{v}")
        lines += clamped_store_ir(v, f"%u{v}", VNNI)
    lines += tile_loop_end_ir(VNNI)
    return "\n".join(lines)


def available() -> bool:
    """Whether this host runs the GEMV: AVX512-VNNI and llvmlite. Not AVX2's dot form: its int16 pair sums of
    unsigned bytes times int8 weights saturate (2 x 255 x 128 > 32767)."""
    return VNNI in dots()


def kernel() -> Any:
    """The GEMV ``qc8w_gemv(args)`` (a ctypes function), compiled on the first call; None without VNNI."""
    return llvm_jit.function("qc8w_gemv", _ir, ctypes.CFUNCTYPE(None, ctypes.c_void_p)) if available() else None


def takes(n: int, k: int) -> bool:
    """Whether the GEMV takes a layer of ``n`` channels and ``k`` inputs: whole steps of 4 inputs, a sum that
    fits int32."""
    return n > 0 and 0 < k <= MAX_K and k % 4 == 0


class VnniGemvQC8W:
    """QC8W weights laid out for the GEMV (``_ir``): from int8 weights [N, K] and their scales [N]."""

    def __init__(self, w: np.ndarray, wscale: np.ndarray, n: int, k: int):
        if not takes(n, k) or w.shape != (n, k) or wscale.shape != (n,):
            raise InvalidInputError(
                f"VNNI QC8W GEMV: expected int8 weights [N, K], K a multiple of 4 up to {MAX_K}, and scales [N]; "
                f"found weights {w.shape}, scales {wscale.shape}; use the integer GEMV"
            )
        self.n, self.k, self.k4 = n, k, k // 4
        self.npad = -(-n // GEMV_TILE) * GEMV_TILE
        tiles = self.npad // GEMV_TILE
        padded = np.zeros((self.npad, k), np.int8)
        padded[:n] = w
        self.stream = _aligned(padded.size)  # written in place, tile by tile: no third copy of the weights
        self.stream.view(np.int8).reshape(tiles, self.k4, GEMV_TILE, 4)[...] = padded.reshape(
            tiles, GEMV_TILE, self.k4, 4
        ).transpose(0, 2, 1, 3)
        self.csum = np.zeros(self.npad, np.int32)
        self.csum[:n] = w.sum(axis=1, dtype=np.int32)  # no int32 copy of the weights
        self.wscale = np.zeros(self.npad, np.float32)
        self.wscale[:n] = wscale

    def step(self, xc: np.ndarray, xscale: np.ndarray, bias: np.ndarray, y: np.ndarray, lo: float, hi: float) -> Any:
        """A call that computes y [M, N] = clamp(the node on the centred input ``xc`` [M, K] with row scales
        ``xscale`` [M, 1]) with ``bias`` [N] (or empty): qgemv's ``_qc8w`` values bit for bit; allocates nothing
        a call."""
        fn = kernel()
        padded, bounds = gemv_operands("QC8W", fn, xc, xscale, y, self.k, self.n, self.npad, bias, lo, hi)
        m, arrays = xc.shape[0], (xc, xscale, y)
        a = _aligned(self.k)
        fields = {
            "xc": xc.ctypes.data, "xstride": xc.strides[0] // 4, "w": self.stream.ctypes.data,
            "xscale": xscale.ctypes.data, "sstride": xscale.strides[0] // 4, "wscale": self.wscale.ctypes.data,
            "csum": self.csum.ctypes.data, "bias": padded.ctypes.data, "with_bias": int(bias.shape[0] > 0),
            "y": y.ctypes.data, "ystride": y.strides[0] // 4, "a": a.ctypes.data, "bounds": bounds.ctypes.data,
            "rows": m, "channels": self.n, "k4": self.k4,
        }  # fmt: skip
        keep = (padded, bounds, a, self.stream, self.csum, self.wscale, *arrays)
        return bound_call(fn, [fields[name] for name in ARGS], keep)
