"""Ceiling probe for a VNNI int8 GEMM on this host: a register-tiled kernel (4 rows x 32 channels, one
``vpdpbusd`` per row and 16 channels per 4 inputs) written as LLVM IR, JIT-compiled through llvmlite, checked
exactly against NumPy's int64 product, then timed against NumPy's sgemm (one BLAS thread) on SmolLM2-135M's
linear shapes. Needs an x86 CPU with AVX512-VNNI. Example::

    OPENBLAS_NUM_THREADS=1 python bench/llm_vnni_probe.py
"""

import ctypes
import time
from functools import partial

import numpy as np

from edgetorch.runtime.kernels.llvm_jit import jit

R, V = 4, 2  # rows, 16-channel vectors per tile


def ir():
    L = []
    L.append("declare <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32>, <16 x i32>, <16 x i32>)")
    L.append("define void @gemm(i8* noalias %a, i8* noalias %w, i32* noalias %c, i64 %M, i64 %N, i64 %K) {")
    L.append("entry:")
    for r in range(R):
        for v in range(V):
            L.append(f"  %acc{r}_{v} = alloca <16 x i32>, align 64")
    L.append("  %k4n = udiv i64 %K, 4")
    L.append("  br label %mloop")
    L.append("mloop:\n  %m = phi i64 [0, %entry], [%mnext, %mend]\n  br label %nloop")
    L.append("nloop:\n  %n = phi i64 [0, %mloop], [%nnext, %nend]")
    for r in range(R):
        for v in range(V):
            L.append(f"  store <16 x i32> zeroinitializer, <16 x i32>* %acc{r}_{v}")
    L.append("  br label %kloop")
    L.append("kloop:\n  %k = phi i64 [0, %nloop], [%knext, %kloop]")
    # weights [K/4, N, 4] bytes: i32 index k*N + n
    L.append("  %wi = bitcast i8* %w to i32*")
    L.append("  %kn = mul i64 %k, %N")
    for v in range(V):
        L.append(f"  %wo{v} = add i64 %kn, %n")
        L.append(f"  %wo{v}b = add i64 %wo{v}, {16 * v}")
        L.append(f"  %wp{v} = getelementptr inbounds i32, i32* %wi, i64 %wo{v}b")
        L.append(f"  %wvp{v} = bitcast i32* %wp{v} to <16 x i32>*")
        L.append(f"  %wv{v} = load <16 x i32>, <16 x i32>* %wvp{v}, align 4")
    L.append("  %ai = bitcast i8* %a to i32*")
    for r in range(R):
        # a rows [M, K] bytes: i32 index (m+r)*K/4 + k
        L.append(f"  %mr{r} = add i64 %m, {r}")
        L.append(f"  %ar{r} = mul i64 %mr{r}, %k4n")
        L.append(f"  %ao{r} = add i64 %ar{r}, %k")
        L.append(f"  %ap{r} = getelementptr inbounds i32, i32* %ai, i64 %ao{r}")
        L.append(f"  %as{r} = load i32, i32* %ap{r}, align 4")
        L.append(f"  %ins{r} = insertelement <16 x i32> undef, i32 %as{r}, i32 0")
        L.append(f"  %bc{r} = shufflevector <16 x i32> %ins{r}, <16 x i32> undef, <16 x i32> zeroinitializer")
        for v in range(V):
            L.append(f"  %o{r}_{v} = load <16 x i32>, <16 x i32>* %acc{r}_{v}")
            L.append(
                f"  %d{r}_{v} = call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> %o{r}_{v}, <16 x i32> %bc{r}, <16 x i32> %wv{v})"
            )
            L.append(f"  store <16 x i32> %d{r}_{v}, <16 x i32>* %acc{r}_{v}")
    L.append("  %knext = add i64 %k, 1\n  %kdone = icmp eq i64 %knext, %k4n\n  br i1 %kdone, label %nend, label %kloop")
    L.append("nend:")
    for r in range(R):
        for v in range(V):
            L.append(f"  %f{r}_{v} = load <16 x i32>, <16 x i32>* %acc{r}_{v}")
            L.append(f"  %cr{r}_{v} = add i64 %m, {r}")
            L.append(f"  %cm{r}_{v} = mul i64 %cr{r}_{v}, %N")
            L.append(f"  %cn{r}_{v} = add i64 %cm{r}_{v}, %n")
            L.append(f"  %cnv{r}_{v} = add i64 %cn{r}_{v}, {16 * v}")
            L.append(f"  %cp{r}_{v} = getelementptr inbounds i32, i32* %c, i64 %cnv{r}_{v}")
            L.append(f"  %cvp{r}_{v} = bitcast i32* %cp{r}_{v} to <16 x i32>*")
            L.append(f"  store <16 x i32> %f{r}_{v}, <16 x i32>* %cvp{r}_{v}, align 4")
    L.append(
        f"  %nnext = add i64 %n, {16 * V}\n  %ndone = icmp uge i64 %nnext, %N\n  br i1 %ndone, label %mend, label %nloop"
    )
    L.append(
        f"mend:\n  %mnext = add i64 %m, {R}\n  %mdone = icmp uge i64 %mnext, %M\n  br i1 %mdone, label %exit, label %mloop"
    )
    L.append("exit:\n  ret void\n}")
    return "\n".join(L)


def compile_kernel():
    """The kernel as a ctypes function, the count of vpdpbusd in its assembly, and the engine that owns it."""
    engine, assembly = jit(ir())
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    fn = ctypes.CFUNCTYPE(None, ptr, ptr, ptr, i64, i64, i64)(engine.get_function_address("gemm"))
    return fn, assembly.count("vpdpbusd"), engine


def best(fn, repeats=20):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    fn, count, _engine = compile_kernel()
    print("vpdpbusd instructions in the kernel:", count)
    rng = np.random.default_rng(0)
    for m, k, n in ((128, 576, 1536), (128, 1536, 576), (128, 576, 576), (32, 576, 1536)):
        a = rng.integers(0, 256, (m, k), dtype=np.uint8)
        wt = rng.integers(-8, 8, (n, k), dtype=np.int8)
        wl = np.ascontiguousarray(wt.reshape(n, k // 4, 4).transpose(1, 0, 2))
        c = np.empty((m, n), np.int32)
        fn(a.ctypes.data, wl.ctypes.data, c.ctypes.data, m, n, k)
        assert np.array_equal(c, a.astype(np.int64) @ wt.astype(np.int64).T), "the VNNI kernel's result differs"
        xf = rng.standard_normal((m, k)).astype(np.float32)
        wf = rng.standard_normal((k, n)).astype(np.float32)
        yf = np.empty((m, n), np.float32)
        tv = best(partial(fn, a.ctypes.data, wl.ctypes.data, c.ctypes.data, m, n, k))
        ts = best(partial(np.matmul, xf, wf, out=yf))
        g = 2 * m * n * k / 1e9
        print(f"M{m} K{k} N{n}: vnni {g / tv:.0f} GOP/s, sgemm {g / ts:.0f} GFLOP/s, {ts / tv:.2f}x")


if __name__ == "__main__":
    main()
