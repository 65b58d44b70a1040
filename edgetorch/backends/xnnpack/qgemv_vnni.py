"""A QD8 x QB4W GEMM on the host's int8 dot-product instruction (AVX512-VNNI ``vpdpbusd``, else AVX2's
``vpmaddubsw`` then ``vpmaddwd``): the prefill-shaped (many rows) counterpart of qgemv.py's integer GEMV:
``IntegerLinear.uses_vnni`` offers it to tuning as a third candidate next to the GEMV and dequantize + sgemm
(measurements: docs/benchmarks.md, "LLM prefill"); ``bench/llm_vnni_probe.py`` measures the instruction's ceiling.

A dot form (``Dot``) sums 4 products of an unsigned byte and a signed byte in each int32 lane: ``vpdpbusd`` in
one instruction on 16 lanes; on AVX2 ``vpmaddubsw`` sums the products in pairs into int16 lanes and ``vpmaddwd``
by ones sums those pairs into 8 int32 lanes. The int16 pair saturates, so the AVX2 form takes only the weights'
nibbles (0..15, at most 2 x 255 x 15 = 7650 a pair); the QC8W head (qgemv_vnni8.py) is VNNI's alone. The form is
the host's (``dot``: VNNI where the host has it); the tiles are the form's, sized to its vector registers. The
kernel gives each lane an output channel and broadcasts 4 input bytes of a row to all lanes:

* Inputs: the centred input ``xc`` (q - zero point, per row) is shifted by ``off`` = zero point + 128 into
  0..255 (the quantized value + 128, an unsigned byte), a = xc + off, in its order.
* Weights stay 4-bit, repacked at load: 4 bytes of a channel (8 inputs) are one int32 lane, the low nibbles the
  step's first 4 inputs, the high ones its last 4; ``& 0x0F0F0F0F`` and ``>> 4 & 0x0F0F0F0F`` give them (the
  stored value + 8), less 8 a byte: the signed weight.
* Per block of inputs the exact dot of xc = a - off and the weights is the lanes' sum minus off times the
  channel's sum of weights (made at load): all int32, exact.
* Then, as qgemv's ``_qb4w``, float32(dot) times the block's scale is added into a float32 total in block order
  (no fused multiply-add: the IR has separate fmul and fadd without fast-math flags), so the totals equal the
  GEMV's bit for bit; the caller scales by the row's input scale and adds the bias.

Tiles of ``Dot.rows`` rows x ``Dot.vectors`` vectors of channels (int32 and float32 accumulators for each);
rows are padded to the tile's rows and channels to its width (zero scales) in the buffers.

The GEMV (``VnniGemvQB4W``, a decode step's one row; ``IntegerLinear`` offers it to tuning beside its integer
GEMV) computes the same exact block dots for one row at a time, shaped for a call of a few microseconds: tiles
of ``Dot.gemv_vectors`` vectors of channels, the weights (in XNNPACK's nibble order, unsigned: the row's bytes
are reordered to the even four then the odd four of a step, and 8 times the block's sum of xc and off times the
channels' nibble sums, made in the kernel, are taken off) and the scales of a tile in one stream read front to
back; the input's bytes and block sums are made in the kernel, with the offset taken from
the row's least value (an int8 row's centred values span at most 255), so it needs no zero point; the scale,
bias and clamp are applied in the kernel; a call passes one pointer to a block of arguments fixed when the step
is made, and allocates nothing. Written as LLVM IR compiled by llvmlite's JIT (numba's
code generator, present with the [fast] tier), as no loop numba compiles becomes these instructions: numba types
an int32 product int64. Only on an x86 host whose flags include ``avx512_vnni`` or ``avx2`` (runtime/host.py).

Imports only NumPy at import time; llvmlite on the first compile.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from edgetorch.errors import InvalidInputError
from edgetorch.runtime.host import host
from edgetorch.runtime.kernels import llvm_jit

Buffer = Callable[[tuple[int, ...], np.dtype], np.ndarray]  # where a call's working arrays come from
_BYTES = np.dtype(np.uint8)


def _address(a: np.ndarray) -> int:
    """The address of a writable C-contiguous array's first byte: a third of the time ``a.ctypes.data`` takes."""
    return ctypes.addressof(ctypes.c_char.from_buffer(a))


@dataclass(frozen=True)
class Dot:
    """An int8 dot-product form the kernels are written in: ``lanes`` int32 lanes a vector, each summing 4
    products of an unsigned byte and a signed byte, and the tiles that fit the form's vector registers."""

    flag: str
    """The host flag it needs (runtime/host.py)."""
    lanes: int
    rows: int
    """The GEMM's tile: ``rows`` rows x ``vectors`` vectors of channels."""
    vectors: int
    gemv_vectors: int
    """The GEMV's tile: vectors of channels (even: a tile's bfloat16 scales keep the next tile's vectors aligned)."""
    ahead: int = 0
    """How far ahead (bytes) the GEMV prefetches its weight stream; 0: none (the hardware's prefetcher alone)."""

    @property
    def vec(self) -> str:
        """Its int32 vector type in LLVM IR."""
        return f"<{self.lanes} x i32>"

    @property
    def name(self) -> str:
        """Its kernels' names' suffix: the flag and the tiles."""
        return f"{self.flag}_{self.rows}x{self.vectors}_{self.gemv_vectors}_{self.ahead}"

    @property
    def tile(self) -> int:
        """The GEMM tile's channels."""
        return self.lanes * self.vectors

    @property
    def gemv_tile(self) -> int:
        """The GEMV tile's channels."""
        return self.lanes * self.gemv_vectors

    def declarations(self) -> list[str]:
        """IR declaring the intrinsics of :meth:`ir`."""
        if self.flag == VNNI.flag:
            return [f"declare {self.vec} @llvm.x86.avx512.vpdpbusd.512({self.vec}, {self.vec}, {self.vec})"]
        return [
            "declare <16 x i16> @llvm.x86.avx2.pmadd.ub.sw(<32 x i8>, <32 x i8>)",
            "declare <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16>, <16 x i16>)",
        ]

    @property
    def max_block(self) -> int:
        """The largest QB4W block (inputs) the GEMV takes: with AVX2 a block's nibble sums are int16 partial sums
        (``sums_ir``), at most 2 x 30 a step of 8 inputs."""
        return 1 << 30 if self.flag == VNNI.flag else 4096

    @property
    def partial(self) -> str:
        """The IR type of its partial sums (``sums_ir``): int32 lanes with VNNI, int16 pairs with AVX2."""
        return self.vec if self.flag == VNNI.flag else f"<{2 * self.lanes} x i16>"

    def sums_ir(self, out: str, acc: str, terms: list[tuple[str, str]]) -> list[str]:
        """IR making the partial sums %``out`` (type :attr:`partial`): ``acc`` plus, for each (a, w) of ``terms``
        (int32 vectors), the products of a's unsigned bytes with w's signed bytes, 4 a lane (VNNI) or 2 (AVX2, in
        int16: exact while a lane's sum stays within int16, as the sums of up to 4 terms of bytes by 4-bit
        weights (0..15 or -8..7) do, at most 2 x 255 x 15 = 7650 a term); ``widen_ir`` makes them int32 lanes."""
        lines, last = [], acc
        for i, (a, w) in enumerate(terms):
            name = out if i == len(terms) - 1 else f"{out}.{i}"
            if self.flag == VNNI.flag:
                lines.append(f"  %{name} = call {self.vec} @llvm.x86.avx512.vpdpbusd.512({self.vec} {last}, "
                             f"{self.vec} {a}, {self.vec} {w})")  # fmt: skip
            else:
                lines += [
                    f"  %{name}.a = bitcast {self.vec} {a} to <32 x i8>",
                    f"  %{name}.w = bitcast {self.vec} {w} to <32 x i8>",
                    f"  %{name}.p = call <16 x i16> @llvm.x86.avx2.pmadd.ub.sw(<32 x i8> %{name}.a, <32 x i8> %{name}.w)",
                    f"  %{name} = add <16 x i16> {last}, %{name}.p",
                ]
            last = f"%{name}"
        return lines

    def widen_ir(self, out: str, sums: str) -> list[str]:
        """IR making %``out``, the partial sums ``sums`` (``sums_ir``) added up into int32 lanes: each lane the sum
        of its 4 products."""
        if self.flag == VNNI.flag:
            return [f"  %{out} = add {self.vec} {sums}, zeroinitializer"]
        ones = ", ".join(["i16 1"] * 16)
        return [f"  %{out} = call <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16> {sums}, <16 x i16> <{ones}>)"]

    def ir(self, out: str, acc: str, terms: list[tuple[str, str]]) -> list[str]:
        """IR making %``out``, each int32 lane of ``acc`` plus, for each (a, w) of ``terms`` (int32 vectors), the
        dot of a's 4 unsigned bytes with w's 4 signed bytes (``sums_ir``'s bounds hold for the terms together)."""
        if self.flag == VNNI.flag:
            return self.sums_ir(out, acc, terms)
        return [
            *self.sums_ir(f"{out}.s", "zeroinitializer", terms),
            *self.widen_ir(f"{out}.w", f"%{out}.s"),
            f"  %{out} = add {self.vec} {acc}, %{out}.w",
        ]


VNNI = Dot("avx512_vnni", lanes=16, rows=4, vectors=2, gemv_vectors=4)
# On AVX2 (Zen 3 here) the GEMV on weights from memory ran 20-30% faster prefetching 4 KiB ahead, and no slower on
# weights in cache (docs/benchmarks.md); VNNI's is as it was measured, without.
AVX2 = Dot("avx2", lanes=8, rows=4, vectors=2, gemv_vectors=4, ahead=4096)


def forms(flags: frozenset[str]) -> tuple[Dot, ...]:
    """The dot forms a CPU with the extensions ``flags`` runs, the preferred first."""
    return tuple(d for d in (VNNI, AVX2) if d.flag in flags)


@functools.cache
def dots() -> tuple[Dot, ...]:
    """The dot forms this host runs (``forms``); none without llvmlite (asked once a process)."""
    return forms(host().flags) if llvm_jit.usable() else ()


def dot() -> Dot | None:
    """The dot form the kernels take on this host: VNNI where it has AVX512-VNNI, else AVX2; None without either
    (or without llvmlite)."""
    return next(iter(dots()), None)


def available() -> bool:
    """Whether this host runs a dot form (``dot``)."""
    return dot() is not None


def _ir(d: Dot) -> str:
    """The GEMM's LLVM IR: ``qb4w_gemm_<d.name>(A, P, cw, sc, off, out, Mp, Np, K8, kb8, nb)``, every argument
    an int64 (the arrays' addresses).

    A [Mp, K8, 2] int32 (a row's bytes a, 4 a word), P [K8, Np] int32 (4 bytes of a channel: the low nibbles for
    the step's first 4 inputs, the high ones for its last 4), cw [nb, Np] int32 (sum of nibble - 8 per block),
    sc [nb, Np] float32, off [Mp] int32, out [Mp, Np] float32; kb8 steps a block. The lanes multiply a by the
    signed nibble - 8 (a byte subtraction after the mask), so that a block's dot needs only off times cw
    subtracted: no sum of a."""
    vec, fvec, lanes = d.vec, f"<{d.lanes} x float>", d.lanes
    lines = [
        *d.declarations(),
        f"define void @qb4w_gemm_{d.name}(i64 %Ai, i64 %Pi, i64 %cwi, i64 %sci, i64 %offi, i64 %outi, i64 %M, i64 %N,"
        " i64 %K8, i64 %kb8, i64 %nb) {",
        "entry:",
    ]
    add = lines.append
    for name, kind in (("A", "i32"), ("P", "i32"), ("cw", "i32"), ("sc", "float"), ("off", "i32"), ("out", "float")):
        add(f"  %{name} = inttoptr i64 %{name}i to {kind}*")
    tiles = [(r, v) for r in range(d.rows) for v in range(d.vectors)]
    for r, v in tiles:
        add(f"  %acc{r}{v} = alloca {vec}, align 64")
        add(f"  %tot{r}{v} = alloca {fvec}, align 64")
    lines += splat_ir("mask", "252645135", width=lanes) + splat_ir("four", "4", width=lanes)  # 0x0F0F0F0F
    b8 = f"<{4 * lanes} x i8>"
    eights = f"<{', '.join(['i8 8'] * 4 * lanes)}>"
    add("  br label %mloop")
    add("mloop:\n  %m = phi i64 [0, %entry], [%mnext, %mend]\n  br label %nloop")
    add("nloop:\n  %n = phi i64 [0, %mloop], [%nnext, %nend]")
    for r, v in tiles:
        add(f"  store {fvec} zeroinitializer, {fvec}* %tot{r}{v}")
    add("  br label %bloop")
    add("bloop:\n  %b = phi i64 [0, %nloop], [%bnext, %bend]")
    for r, v in tiles:
        add(f"  store {vec} zeroinitializer, {vec}* %acc{r}{v}")
    add("  %k0 = mul i64 %b, %kb8\n  %k1 = add i64 %k0, %kb8\n  br label %kloop")
    add("kloop:\n  %k = phi i64 [%k0, %bloop], [%knext, %kloop]")
    add("  %kn = mul i64 %k, %N\n  %kn0 = add i64 %kn, %n")
    for v in range(d.vectors):
        add(f"  %wo{v} = add i64 %kn0, {lanes * v}")
        add(f"  %wp{v} = getelementptr inbounds i32, i32* %P, i64 %wo{v}")
        add(f"  %wvp{v} = bitcast i32* %wp{v} to {vec}*")
        add(f"  %w{v} = load {vec}, {vec}* %wvp{v}, align 4")
        add(f"  %ln{v} = and {vec} %w{v}, %mask")
        add(f"  %hs{v} = lshr {vec} %w{v}, %four")
        add(f"  %hn{v} = and {vec} %hs{v}, %mask")
        for half in ("l", "h"):
            add(f"  %{half}b{v} = bitcast {vec} %{half}n{v} to {b8}\n  %{half}x{v} = sub {b8} %{half}b{v}, {eights}")
        add(f"  %lo{v} = bitcast {b8} %lx{v} to {vec}\n  %hi{v} = bitcast {b8} %hx{v} to {vec}")
    for r in range(d.rows):
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
            lines += splat_ir(f"bc{half}{r}", f"%as{half}{r}", width=lanes)
        for v in range(d.vectors):
            add(f"  %o{r}{v} = load {vec}, {vec}* %acc{r}{v}")
            lines += d.ir(f"q{r}{v}", f"%o{r}{v}", [(f"%bce{r}", f"%lo{v}"), (f"%bco{r}", f"%hi{v}")])
            add(f"  store {vec} %q{r}{v}, {vec}* %acc{r}{v}")
    add("  %knext = add i64 %k, 1\n  %kdone = icmp eq i64 %knext, %k1\n  br i1 %kdone, label %bend, label %kloop")
    add("bend:")
    add("  %bn = mul i64 %b, %N\n  %bn0 = add i64 %bn, %n")
    for v in range(d.vectors):
        add(f"  %bo{v} = add i64 %bn0, {lanes * v}")
        add(f"  %cwp{v} = getelementptr inbounds i32, i32* %cw, i64 %bo{v}")
        add(f"  %cwvp{v} = bitcast i32* %cwp{v} to {vec}*")
        add(f"  %cwv{v} = load {vec}, {vec}* %cwvp{v}, align 4")
        add(f"  %scp{v} = getelementptr inbounds float, float* %sc, i64 %bo{v}")
        add(f"  %scvp{v} = bitcast float* %scp{v} to {fvec}*")
        add(f"  %scv{v} = load {fvec}, {fvec}* %scvp{v}, align 4")
    for r in range(d.rows):
        add(f"  %fp{r} = getelementptr inbounds i32, i32* %off, i64 %mr{r}")
        add(f"  %fs{r} = load i32, i32* %fp{r}, align 4")
        lines += splat_ir(f"fv{r}", f"%fs{r}", width=lanes)
        for v in range(d.vectors):
            add(f"  %t{r}{v} = load {vec}, {vec}* %acc{r}{v}")
            add(f"  %c{r}{v} = mul {vec} %fv{r}, %cwv{v}")
            add(f"  %x{r}{v} = sub {vec} %t{r}{v}, %c{r}{v}")
            add(f"  %xf{r}{v} = sitofp {vec} %x{r}{v} to {fvec}")
            add(f"  %xs{r}{v} = fmul {fvec} %xf{r}{v}, %scv{v}")
            add(f"  %to{r}{v} = load {fvec}, {fvec}* %tot{r}{v}")
            add(f"  %tn{r}{v} = fadd {fvec} %to{r}{v}, %xs{r}{v}")
            add(f"  store {fvec} %tn{r}{v}, {fvec}* %tot{r}{v}")
    add("  %bnext = add i64 %b, 1\n  %bdone = icmp eq i64 %bnext, %nb\n  br i1 %bdone, label %nend, label %bloop")
    add("nend:")
    for r, v in tiles:
        add(f"  %y{r}{v} = load {fvec}, {fvec}* %tot{r}{v}")
        add(f"  %ym{r}{v} = mul i64 %mr{r}, %N\n  %yn{r}{v} = add i64 %ym{r}{v}, %n")
        add(f"  %yo{r}{v} = add i64 %yn{r}{v}, {lanes * v}")
        add(f"  %yp{r}{v} = getelementptr inbounds float, float* %out, i64 %yo{r}{v}")
        add(f"  %yvp{r}{v} = bitcast float* %yp{r}{v} to {fvec}*")
        add(f"  store {fvec} %y{r}{v}, {fvec}* %yvp{r}{v}, align 4")
    add(f"  %nnext = add i64 %n, {d.tile}\n  %ndone = icmp uge i64 %nnext, %N")
    add("  br i1 %ndone, label %mend, label %nloop")
    add(f"mend:\n  %mnext = add i64 %m, {d.rows}\n  %mdone = icmp uge i64 %mnext, %M")
    add("  br i1 %mdone, label %exit, label %mloop")
    add("exit:\n  ret void\n}")
    return "\n".join(lines)


def kernel(d: Dot | None = None) -> Any:
    """The GEMM of the dot form ``d`` (the host's by default) as a ctypes function, compiled on the first call;
    None where the host does not run that form."""
    return _compiled("qb4w_gemm", d, _ir, ctypes.CFUNCTYPE(None, *([ctypes.c_int64] * 11)))


def gemv_kernel(bf16: bool = False, d: Dot | None = None) -> Any:
    """The GEMV ``qb4w_gemv(args)`` of the dot form ``d`` (the host's by default; a ctypes function) for scales
    stored as float32 or, with ``bf16``, as their upper halves; compiled on the first call; None where the host
    does not run that form."""
    name = "qb4w_gemv_bf16" if bf16 else "qb4w_gemv"
    return _compiled(name, d, partial(_gemv_ir, bf16=bf16), ctypes.CFUNCTYPE(None, ctypes.c_void_p))


def _compiled(name: str, d: Dot | None, ir: Any, proto: Any) -> Any:
    """The function ``name`` of the IR ``ir(d)`` as ``proto`` (named ``name_<d.name>`` in the code), compiled once
    per process; None where the host does not run the form ``d`` (the host's by default)."""
    d = d or dot()
    if d is None or d.flag not in (known.flag for known in dots()):
        return None
    return llvm_jit.function(f"{name}_{d.name}", partial(ir, d), proto)


class VnniQB4W:
    """QB4W weights laid out for the kernel: from XNNPACK's bytes [N, K / 2] (inputs 2j, 2j + 1 in byte j, low
    nibble first, + 8) and block scales [N, K / block], for the dot form ``d`` (the host's by default)."""

    def __init__(self, packed: np.ndarray, scales: np.ndarray, block: int, n: int, k: int, d: Dot | None = None):
        self.dot = d or dot() or VNNI
        b = _padded(packed, scales, block, n, k, self.dot.tile, "GEMM", "the sgemm path")
        self.n, self.k, self.block = n, k, block
        npad = b.shape[0]
        nibbles = np.stack([b & 15, b >> 4], axis=-1).reshape(npad, k // 8, 2, 4)  # a step's first 4, last 4
        words = nibbles[:, :, 0] | nibbles[:, :, 1] << 4
        self.p = np.ascontiguousarray(words.transpose(1, 0, 2)).view(np.int32)[..., 0]
        signed = nibbles.reshape(npad, k).astype(np.int32) - 8
        self.cw = np.ascontiguousarray(signed.reshape(npad, k // block, block).sum(axis=2).T, np.int32)
        sc = np.zeros((npad, k // block), np.float32)
        sc[:n] = scales
        self.sc = np.ascontiguousarray(sc.T)
        self.addresses = tuple(t.ctypes.data for t in (self.p, self.cw, self.sc))
        self.fn = kernel(self.dot)  # compiled now, with the layout (at load), not in a first call

    def bound(self, xc: np.ndarray, zp: np.ndarray, buffer: Buffer = np.empty) -> GemmCall:
        """The GEMM on the centred input ``xc`` [M, K] (q - zp, per row, any numeric dtype) and the rows' zero
        points ``zp`` [M] or [M, 1] (arrays read at each call, not now); its input bytes and totals in arrays
        from ``buffer(shape, dtype)`` (fresh ones by default; a schedule's scratch while one is built)."""
        if self.fn is None:
            raise InvalidInputError(f"int8-dot QB4W GEMM: expected a host with {self.dot.flag}; found none; use sgemm")
        m, k = xc.shape
        if k != self.k:
            raise InvalidInputError(f"int8-dot QB4W GEMM: expected {self.k} inputs a row, found {k}")
        return GemmCall(self, self.fn, xc, zp, buffer)

    def totals(self, xc: np.ndarray, zp: np.ndarray) -> np.ndarray:
        """For the centred input ``xc`` [M, K] (q - zp, per row, any numeric dtype) and the rows' zero points
        ``zp`` [M] or [M, 1]: [M, N] float32, sum over blocks of float32(int dot) times the block scale, in block
        order (multiply by the row's input scale and add the bias for the layer's output)."""
        call = self.bound(xc, zp)
        call.prepare()
        call.fn(*call.args)
        return call.totals


class GemmCall:
    """The GEMM of a ``VnniQB4W`` layer bound to its input ``xc`` [M, K] and zero points ``zp``, with buffers of its
    own: :meth:`prepare` writes the input's bytes, then ``fn(*args)`` (the kernel on all rows, ``args`` the
    addresses of its arrays then its sizes) writes :attr:`totals`.

    The input's bytes ``a`` and the totals ``out`` are taken from ``buffer``, and only read or written by this call's
    steps, so a schedule lays them in its shared scratch. The rows padding M up to the tile's are computed and not
    read: each row of ``out`` depends on its own row of ``a`` (any bytes) and its ``off`` (zero: private)."""

    def __init__(self, layer: VnniQB4W, fn: Any, xc: np.ndarray, zp: np.ndarray, buffer: Buffer = np.empty):
        m, k = xc.shape
        mp, np_ = -(-m // layer.dot.rows) * layer.dot.rows, layer.p.shape[1]
        self.fn, self.xc, self.zp = fn, xc, np.asarray(zp).reshape(-1)
        self.off = np.zeros(mp, np.int32)
        # ``a`` then ``out`` (on a cache line) in one buffer: one address to read, the costly part of binding a call
        at = -(-mp * k // 64) * 64
        both = buffer((at + 4 * mp * np_,), _BYTES)
        self.a, self.out = both[: mp * k].reshape(mp, k), np.ndarray((mp, np_), np.float32, both, at)
        self.totals = self.out[:m, : layer.n]
        a, off = _address(both), _address(self.off)
        self.args = (a, *layer.addresses, off, a + at, mp, np_, k // 8, layer.block // 8, k // layer.block)
        self.keep = layer  # its weights, which ``args`` points into

    def prepare(self) -> None:
        """The bytes a = xc + off (off = zero point + 128 a row: 0..255)."""
        m = self.xc.shape[0]
        np.add(self.zp, 128, out=self.off[:m], casting="unsafe")
        np.add(self.xc, self.off[:m, None], out=self.a[:m], casting="unsafe")


# The one-row GEMV (``VnniGemvQB4W``): inputs of up to GEMV_ROWS rows (a pass over the weights each, yet faster
# than the GEMM's NumPy input preparation up to 16 rows at SmolLM2's shapes) are offered to tuning
# (qgemv.IntegerLinear), larger ones are the GEMM's.
GEMV_ROWS = 16

# The GEMV's argument block (int64 each, ``VnniGemvQB4W.step``): pointers and sizes, in this order.
GEMV_ARGS = ("xc", "xstride", "w", "xscale", "sstride", "bias", "with_bias", "y", "ystride", "a", "e", "bounds",
             "rows", "channels", "k8", "kb8", "nb")  # fmt: skip


def _gemv_ir(d: Dot, bf16: bool) -> str:
    """The GEMV's LLVM IR in the dot form ``d``: ``qb4w_gemv_<d.name>(args)`` (``qb4w_gemv_bf16_<d.name>`` with
    ``bf16``), ``args`` the int64 block of GEMV_ARGS.

    Per row: the centred input's least value gives ``off`` (its negation), so a = xc + off is 0..255 (an int8
    row's values span at most 255), written as bytes (each 8 inputs' even four then odd four) into the scratch
    ``a``, and 8 times each block's sum of xc into ``e``; then a tile of ``d.gemv_tile`` channels at a time: per
    block the lanes' dot sums of a times nibble, minus e, minus off times the channels' sums of nibbles (one more
    dot a step, of its even plus odd nibbles with ones), which is the exact dot of xc and
    nibble - 8, as float32 times the block scale added into the total in block order; total times the row's
    scale, plus the bias (when ``with_bias``), clamped to ``bounds`` [lo, hi]; the last tile's missing channels
    are not stored. ``w`` is the tiles' stream of ``VnniGemvQB4W``: per tile, per block, kb8 steps of a tile's
    int32 (4 bytes of a channel), then the tile's scales, float32 or, with ``bf16``, their upper halves."""
    vs, lanes, tile = range(d.gemv_vectors), d.lanes, d.gemv_tile
    v16, f16 = d.vec, f"<{lanes} x float>"  # a vector of int32 and of float32 lanes
    lines = [
        *d.declarations(),
        *masked_store_declaration(d),
        "declare i32 @llvm.vector.reduce.smin.v8i32(<8 x i32>)",
        "declare i32 @llvm.vector.reduce.add.v8i32(<8 x i32>)",
        "declare void @llvm.prefetch.p0i8(i8*, i32, i32, i32)",
        f"define void @qb4w_gemv{'_bf16' if bf16 else ''}_{d.name}(i64* noalias %args) {{",
        "entry:",
    ]
    add = lines.append
    lines += gemv_prologue_ir(
        GEMV_ARGS,
        {"xc": "float", "w": "i8", "xscale": "float", "bias": "float", "y": "float", "a": "i8", "e": "i32"},
        d,
    )
    lines += splat_ir("mask", "252645135", width=lanes)  # 0x0F0F0F0F
    lines += splat_ir("four", "4", width=lanes)
    scale_bytes = (2 if bf16 else 4) * tile
    add(f"  %blockbytes0 = mul i64 %kb8, {4 * tile}\n  %blockbytes = add i64 %blockbytes0, {scale_bytes}")
    lines += splat_ir("ones", "16843009", width=lanes)  # 0x01010101
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
    lines += splat_ir("offv8", "%off", width=8) + splat_ir("offv", "%off", width=lanes)
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
    lines += tile_start_ir("block", d)
    add("block:\n  %b = phi i64 [0, %tile], [%bnext, %blockend]")
    for v in vs:
        add(f"  %tot{v} = phi {f16} [zeroinitializer, %tile], [%totn{v}, %blockend]")
    add("  %bb = mul i64 %b, %blockbytes\n  %bp = getelementptr inbounds i8, i8* %tp, i64 %bb")
    add("  %j0 = mul i64 %b, %kb8\n  br label %step")
    add("step:\n  %j = phi i64 [0, %block], [%jnext, %step]")
    for v in vs:
        add(f"  %acc{v} = phi {v16} [zeroinitializer, %block], [%q{v}, %step]")
        add(f"  %ns{v} = phi {d.partial} [zeroinitializer, %block], [%nsn{v}, %step]")
    add("  %jj = add i64 %j0, %j\n  %ab = mul i64 %jj, 8")
    add("  %ap8 = getelementptr inbounds i8, i8* %a.ptr, i64 %ab\n  %ap = bitcast i8* %ap8 to i32*")
    for half, at in (("e", 0), ("o", 1)):
        add(f"  %a{half}p = getelementptr inbounds i32, i32* %ap, i64 {at}\n  %a{half} = load i32, i32* %a{half}p")
        lines += splat_ir(f"a{half}v", f"%a{half}", width=lanes)
    add(f"  %wb = mul i64 %j, {4 * tile}\n  %wp8 = getelementptr inbounds i8, i8* %bp, i64 %wb")
    add(f"  %wp = bitcast i8* %wp8 to {v16}*")
    for line in range(0, 4 * tile, 64) if d.ahead else ():  # each cache line of the step's words, d.ahead on
        add(f"  %pf{line} = getelementptr i8, i8* %wp8, i64 {d.ahead + line}")  # past the stream's end: a no-op
        add(f"  call void @llvm.prefetch.p0i8(i8* %pf{line}, i32 0, i32 3, i32 1)")  # read, keep, data
    b8 = f"<{4 * lanes} x i8>"
    for v in vs:
        add(
            f"  %wp{v} = getelementptr inbounds {v16}, {v16}* %wp, i64 {v}\n"
            f"  %w{v} = load {v16}, {v16}* %wp{v}, align {4 * lanes}"
        )
        add(
            f"  %wl{v} = and {v16} %w{v}, %mask\n  %ws{v} = lshr {v16} %w{v}, %four\n  %wh{v} = and {v16} %ws{v}, %mask"
        )
        lines += d.ir(f"q{v}", f"%acc{v}", [("%aev", f"%wl{v}"), ("%aov", f"%wh{v}")])
        add(f"  %wlb{v} = bitcast {v16} %wl{v} to {b8}\n  %whb{v} = bitcast {v16} %wh{v} to {b8}")
        add(f"  %wnb{v} = add {b8} %wlb{v}, %whb{v}\n  %wn{v} = bitcast {b8} %wnb{v} to {v16}")
        lines += d.sums_ir(f"nsn{v}", f"%ns{v}", [(f"%wn{v}", "%ones")])
    add("  %jnext = add i64 %j, 1\n  %jdone = icmp eq i64 %jnext, %kb8\n  br i1 %jdone, label %blockend, label %step")
    add("blockend:")
    add(f"  %scb = mul i64 %kb8, {4 * tile}\n  %scp8 = getelementptr inbounds i8, i8* %bp, i64 %scb")
    scale = f"<{lanes} x i16>" if bf16 else f16
    add(f"  %scp = bitcast i8* %scp8 to {scale}*")
    add("  %eb = getelementptr inbounds i32, i32* %e.ptr, i64 %b\n  %ebs = load i32, i32* %eb")
    lines += splat_ir("ebv", "%ebs", width=lanes)
    for v in vs:
        add(f"  %scp{v} = getelementptr inbounds {scale}, {scale}* %scp, i64 {v}")
        if bf16:
            add(f"  %sch{v} = load {scale}, {scale}* %scp{v}, align {2 * lanes}")
            add(f"  %scw{v} = zext {scale} %sch{v} to {v16}")
            add(f"  %scs{v} = shl {v16} %scw{v}, <{', '.join(['i32 16'] * lanes)}>")
            add(f"  %sc{v} = bitcast {v16} %scs{v} to {f16}")
        else:
            add(f"  %sc{v} = load {f16}, {f16}* %scp{v}, align {4 * lanes}")
        lines += d.widen_ir(f"nsw{v}", f"%nsn{v}")
        add(
            f"  %x{v}a = sub {v16} %q{v}, %ebv\n  %x{v}c = mul {v16} %offv, %nsw{v}\n  %x{v} = sub {v16} %x{v}a, %x{v}c"
        )
        add(f"  %xf{v} = sitofp {v16} %x{v} to {f16}\n  %xs{v} = fmul {f16} %xf{v}, %sc{v}")
        add(f"  %totn{v} = fadd {f16} %tot{v}, %xs{v}")
    add("  %bnext = add i64 %b, 1\n  %bdone = icmp eq i64 %bnext, %nb\n  br i1 %bdone, label %tileend, label %block")
    # --- the epilogue: scale, bias, clamp, store the channels that exist
    add("tileend:")
    for v in vs:
        add(f"  %c{v} = add i64 %n, {lanes * v}")
        add(f"  %v{v}s = fmul {f16} %totn{v}, %sv")
        add(f"  %bip{v} = getelementptr inbounds float, float* %bias.ptr, i64 %c{v}")
        add(f"  %bivp{v} = bitcast float* %bip{v} to {f16}*\n  %bi{v} = load {f16}, {f16}* %bivp{v}")
        add(f"  %v{v}b = fadd {f16} %v{v}s, %bi{v}")
        add(f"  %v{v}u = select i1 %biased, {f16} %v{v}b, {f16} %v{v}s")
        lines += clamped_store_ir(v, f"%v{v}u", d)
    lines += tile_loop_end_ir(d)
    return "\n".join(lines)


def splat_ir(name: str, scalar: str, kind: str = "i32", width: int = 16) -> list[str]:
    """IR making %``name``, a vector of ``width`` ``kind`` lanes each ``scalar``."""
    vec = f"<{width} x {kind}>"
    return [
        f"  %{name}1 = insertelement {vec} undef, {kind} {scalar}, i32 0",
        f"  %{name} = shufflevector {vec} %{name}1, {vec} undef, <{width} x i32> zeroinitializer",
    ]


def masked_store_declaration(d: Dot) -> list[str]:
    """IR declaring the masked store of a vector of float32 in the dot form ``d`` (``clamped_store_ir``)."""
    f = f"<{d.lanes} x float>"
    return [f"declare void @llvm.masked.store.v{d.lanes}f32.p0v{d.lanes}f32({f}, {f}*, i32, <{d.lanes} x i1>)"]


def gemv_prologue_ir(names: tuple[str, ...], pointers: dict[str, str], d: Dot) -> list[str]:
    """IR of a GEMV's entry: each of ``names`` loaded from the int64 argument block %args (in that order), the
    ones in ``pointers`` also as %name.ptr of the element type given, and from the block's ``bounds``,
    ``with_bias`` and lane numbers: %lov / %hiv (the clamp's bounds in every lane of the form ``d``), %biased
    and %lanes."""
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
        lines += splat_ir(f"{name}v", f"%{name}", "float", d.lanes)
    lanes = ", ".join(f"i32 {i}" for i in range(d.lanes))
    return [*lines, "  %biased = icmp ne i64 %with_bias, 0", f"  %lanes = bitcast {d.vec} <{lanes}> to {d.vec}"]


def tile_start_ir(first: str, d: Dot) -> list[str]:
    """IR from a GEMV row's label ``rowready`` (its input prepared) to the start of a tile of ``d.gemv_tile``
    channels: the row's scale in every lane (%sv), its output row (%yrow), then label ``tile`` with %n its first
    channel and %tp its part of the weight stream (%tilebytes a tile), branching to label ``first``."""
    return [
        "rowready:",
        "  %sp0 = mul i64 %m, %sstride\n  %sp = getelementptr inbounds float, float* %xscale.ptr, i64 %sp0",
        "  %s = load float, float* %sp",
        *splat_ir("sv", "%s", "float", d.lanes),
        "  %yoff = mul i64 %m, %ystride\n  %yrow = getelementptr inbounds float, float* %y.ptr, i64 %yoff",
        "  br label %tile",
        "tile:\n  %n = phi i64 [0, %rowready], [%nnext, %tileend]",
        f"  %t = udiv i64 %n, {d.gemv_tile}\n  %tb = mul i64 %t, %tilebytes",
        f"  %tp = getelementptr inbounds i8, i8* %w.ptr, i64 %tb\n  br label %{first}",
    ]


def clamped_store_ir(v: int, value: str, d: Dot) -> list[str]:
    """IR of a GEMV's last step for the v-th vector of a tile in the dot form ``d``: ``value`` (a vector of
    float32) clamped to %lov / %hiv and stored at %yrow + %n + v lanes, masked to the channels that exist
    (%channels, %lanes)."""
    f, lanes = f"<{d.lanes} x float>", d.lanes
    return [
        f"  %st{v}l = fcmp olt {f} {value}, %lov",
        f"  %st{v}m = select <{lanes} x i1> %st{v}l, {f} %lov, {f} {value}",
        f"  %st{v}h = fcmp ogt {f} %st{v}m, %hiv",
        f"  %st{v} = select <{lanes} x i1> %st{v}h, {f} %hiv, {f} %st{v}m",
        f"  %st{v}c = add i64 %n, {lanes * v}\n  %st{v}left = sub i64 %channels, %st{v}c",
        f"  %st{v}lt = trunc i64 %st{v}left to i32",
        *splat_ir(f"st{v}lv", f"%st{v}lt", width=lanes),
        f"  %st{v}keep = icmp slt {d.vec} %lanes, %st{v}lv",
        f"  %st{v}p = getelementptr float, float* %yrow, i64 %st{v}c",
        f"  %st{v}vp = bitcast float* %st{v}p to {f}*",
        f"  call void @llvm.masked.store.v{lanes}f32.p0v{lanes}f32({f} %st{v}, {f}* %st{v}vp, i32 4, "
        f"<{lanes} x i1> %st{v}keep)",
    ]


def tile_loop_end_ir(d: Dot) -> list[str]:
    """IR that closes a GEMV's loops: the next tile of ``d.gemv_tile`` channels (label ``tile``) until %channels,
    the next row (label ``row``) until %rows, then return."""
    return [
        f"  %nnext = add i64 %n, {d.gemv_tile}\n  %ndone = icmp uge i64 %nnext, %channels",
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
    [N, K / block], for the dot form ``d`` (the host's by default), one stream that the kernel reads front to
    back: per tile of the form's ``gemv_tile`` channels (N padded with zero weights and scales), per block, the
    4-byte words of each step of 8 inputs, then the block scales, as bfloat16 when every scale is one (XNNPACK's
    QB4W programs store them so), else as float32."""

    def __init__(self, packed: np.ndarray, scales: np.ndarray, block: int, n: int, k: int, d: Dot | None = None):
        self.dot = d or dot() or VNNI
        tile = self.dot.gemv_tile
        b = _padded(packed, scales, block, n, k, tile, "GEMV", "the integer GEMV")
        if block > self.dot.max_block:
            raise InvalidInputError(
                f"int8-dot QB4W GEMV ({self.dot.flag}): expected blocks of up to {self.dot.max_block} inputs; "
                f"found {block}; use the integer GEMV"
            )
        self.n, self.k, self.block = n, k, block
        self.npad = b.shape[0]
        tiles, nb, kb8 = self.npad // tile, k // block, block // 8
        sc = np.zeros((self.npad, nb), np.float32)
        sc[:n] = scales
        self.bf16 = not (sc.view(np.uint32) & 0xFFFF).any()
        sc = np.ascontiguousarray(sc.reshape(tiles, tile, nb).transpose(0, 2, 1))
        scale_bytes = sc.view(np.uint16)[..., 1::2] if self.bf16 else sc  # the upper half of a little-endian float
        words_bytes = kb8 * 4 * tile
        self.stream = _aligned(tiles * nb * (words_bytes + scale_bytes.itemsize * tile)).reshape(tiles, nb, -1)
        words = b.reshape(tiles, tile, nb, kb8, 4).transpose(0, 2, 3, 1, 4)
        self.stream[..., :words_bytes] = words.reshape(tiles, nb, -1)
        self.stream[..., words_bytes:] = np.ascontiguousarray(scale_bytes).view(np.uint8)
        gemv_kernel(self.bf16, self.dot)  # compiled now, with the layout (at load), not in a first call

    def step(self, xc: np.ndarray, xscale: np.ndarray, bias: np.ndarray, y: np.ndarray, lo: float, hi: float) -> Any:
        """A call that computes y [M, N] = clamp(the node on the centred input ``xc`` [M, K] with row scales
        ``xscale`` [M, 1], ``lo``, ``hi``) with ``bias`` [N] (or empty): the float32 values of qgemv's integer
        GEMV. ``xc`` and ``y`` float32 with rows of contiguous values; the call allocates nothing."""
        fn = gemv_kernel(self.bf16, self.dot)
        padded, bounds = gemv_operands(
            f"QB4W ({self.dot.flag})", fn, xc, xscale, y, self.k, self.n, self.npad, bias, lo, hi
        )
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
    """What an int8-dot GEMV step of weights ``kind`` checks and makes before its argument block: the compiled
    kernel ``fn`` exists, the buffers are ones it takes (float32 xc [M, k], xscale [M, 1], y [M, n], contiguous rows);
    then the bias padded to the ``npad`` channels and the clamp's bounds [lo, hi] (float32 each)."""
    if fn is None:
        raise InvalidInputError(
            f"int8-dot {kind} GEMV: expected a host with its instructions; found none; use the GEMV"
        )
    arrays = (xc, xscale, y)
    if not gemv_fits(xc, xscale, y) or xc.shape[1] != k or y.shape[1] != n:
        raise InvalidInputError(
            f"int8-dot {kind} GEMV: expected float32 xc [M, {k}], xscale [M, 1] and y [M, {n}] with contiguous "
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
    shapes are checked to be ones the int8-dot ``kernel`` takes (the error names what to use ``instead``)."""
    if k % 8 or block % 8 or k % block or scales.shape != (n, k // block):
        raise InvalidInputError(
            f"int8-dot QB4W {kernel}: expected K and the block multiples of 8, the block dividing K and scales "
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
