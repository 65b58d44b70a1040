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
to 4 and channels to 32 (zero scales) in the buffers. Written as LLVM IR compiled by llvmlite's JIT (numba's
code generator, present with the [fast] tier), as no loop numba compiles becomes ``vpdpbusd``: numba types an
int32 product int64. Only on an x86 host whose flags include ``avx512_vnni`` (runtime/host.py).

Imports only NumPy at import time; llvmlite on the first compile.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from edgetorch.errors import InvalidInputError
from edgetorch.runtime.host import host

ROWS, LANES, VECTORS = 4, 16, 2  # a tile: ROWS rows x VECTORS * LANES channels
TILE_N = LANES * VECTORS

_lock = threading.Lock()
_kernel: Any = None


def available() -> bool:
    """Whether this host has AVX512-VNNI and llvmlite imports."""
    if "avx512_vnni" not in host().flags:
        return False
    try:
        import llvmlite.binding  # noqa: F401
    except ImportError:
        return False
    return True


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
    add("  %mask1 = insertelement <16 x i32> undef, i32 252645135, i32 0")  # 0x0F0F0F0F
    add("  %mask = shufflevector <16 x i32> %mask1, <16 x i32> undef, <16 x i32> zeroinitializer")
    add("  %four1 = insertelement <16 x i32> undef, i32 4, i32 0")
    add("  %four = shufflevector <16 x i32> %four1, <16 x i32> undef, <16 x i32> zeroinitializer")
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
            add(f"  %in{half}{r} = insertelement <16 x i32> undef, i32 %as{half}{r}, i32 0")
            add(f"  %bc{half}{r} = shufflevector <16 x i32> %in{half}{r}, <16 x i32> undef, <16 x i32> zeroinitializer")
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
        add(f"  %ei{r} = insertelement <16 x i32> undef, i32 %es{r}, i32 0")
        add(f"  %ev{r} = shufflevector <16 x i32> %ei{r}, <16 x i32> undef, <16 x i32> zeroinitializer")
        add(f"  %fp{r} = getelementptr inbounds i32, i32* %off, i64 %mr{r}")
        add(f"  %fs{r} = load i32, i32* %fp{r}, align 4")
        add(f"  %fi{r} = insertelement <16 x i32> undef, i32 %fs{r}, i32 0")
        add(f"  %fv{r} = shufflevector <16 x i32> %fi{r}, <16 x i32> undef, <16 x i32> zeroinitializer")
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
    """The compiled kernel (a ctypes function), compiled on the first call; None without VNNI or llvmlite."""
    global _kernel
    if not available():
        return None
    with _lock:
        if _kernel is None:
            engine, _ = jit(_ir(), assembly=False)
            ptr, i64 = ctypes.c_void_p, ctypes.c_int64
            proto = ctypes.CFUNCTYPE(None, *([ptr] * 7), *([i64] * 5))
            _kernel = (proto(engine.get_function_address("qb4w_vnni")), engine)  # the engine owns the code
    return _kernel[0]


def jit(ir: str, assembly: bool = True) -> tuple[Any, str | None]:
    """LLVM IR compiled for this host's CPU and features at -O3: the execution engine (which owns the code;
    keep it alive while its functions are called) and, when ``assembly``, the assembly text (for probes that
    check which instructions were emitted; None otherwise). Needs llvmlite."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = llvm.parse_assembly(ir)
    module.verify()
    cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    machine = llvm.Target.from_default_triple().create_target_machine(cpu=cpu, features=features, opt=3)
    passes = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=3))
    passes.getModulePassManager().run(module, passes)
    text = machine.emit_assembly(module) if assembly else None
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    return engine, text


class VnniQB4W:
    """QB4W weights laid out for the kernel: from XNNPACK's bytes [N, K / 2] (inputs 2j, 2j + 1 in byte j, low
    nibble first, + 8) and block scales [N, K / block]."""

    def __init__(self, packed: np.ndarray, scales: np.ndarray, block: int, n: int, k: int):
        if k % 8 or block % 8 or k % block or scales.shape != (n, k // block):
            raise InvalidInputError(
                f"VNNI QB4W GEMM: expected K and the block multiples of 8, the block dividing K and scales "
                f"[N, K / block]; found K={k}, block={block}, scales {scales.shape}; use the sgemm path"
            )
        self.n, self.k, self.block = n, k, block
        npad = -(-n // TILE_N) * TILE_N
        b = np.full((npad, k // 2), 0x88, np.uint8)
        b[:n] = np.asarray(packed, np.uint8).reshape(n, k // 2)
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
