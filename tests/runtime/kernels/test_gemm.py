"""The packed-weight float32 GEMM of the [fast] tier (edgetorch/runtime/kernels/gemm.py) and the BLAS thread
limit that runs beside it (blas_threads.py)."""

from __future__ import annotations

import numpy as np
import pytest

from edgetorch.runtime import policy
from edgetorch.runtime.kernels import blas_threads, compiled, gemm

needs_tier = pytest.mark.skipif(
    not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])"
)


def _case(m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((k, n), dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    return x, w, b


@needs_tier
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 6, 7, 8, 13, 49])
@pytest.mark.parametrize("k,n", [(1, 1), (3, 16), (16, 10), (32, 33), (100, 64), (784, 24)])
def test_matches_a_float64_product_with_bias_and_clamp(m, k, n):
    x, w, b = _case(m, k, n)
    y = np.full((m, n), np.nan, np.float32)
    gemm.PackedGemm(w, b, -1.0, 2.0).step(x, y)()
    want = np.clip(x.astype(np.float64) @ w.astype(np.float64) + b, -1.0, 2.0)
    # each output is K products summed in order, one rounding each: within K float32 roundings of the exact sum
    bound = (k + 2) * np.finfo(np.float32).eps * (np.abs(x).astype(np.float64) @ np.abs(w) + np.abs(b)) + 1e-30
    assert np.all(np.abs(y - want) <= bound)


@needs_tier
def test_no_bias_no_clamp_and_a_strided_input():
    x, w, _ = _case(20, 40, 30, seed=1)
    wide = np.zeros((20, 80), np.float32)
    wide[:, ::2] = x
    y = np.empty((20, 30), np.float32)
    gemm.PackedGemm(w, None).step(wide[:, ::2], y)()  # not C-contiguous: copied before the call
    np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)


@needs_tier
def test_the_clamp_keeps_nan_and_infinities_as_a_clip_does():
    x, w, b = _case(6, 4, 16, seed=2)
    x[0, 0], x[1, 1], x[2, 2] = np.nan, np.inf, -np.inf
    y = np.empty((6, 16), np.float32)
    gemm.PackedGemm(w, b, 0.0, 6.0).step(x, y)()
    with np.errstate(invalid="ignore"):
        want = x @ w + b
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_allclose(y[finite], np.clip(want, 0.0, 6.0)[finite], rtol=1e-5, atol=1e-5)


@needs_tier
@pytest.mark.parametrize("m,k,n", [(8, 300, 200), (300, 40, 24)])  # split by panels, then by rows
def test_two_threads_give_the_bits_of_one(m, k, n, monkeypatch, set_policy, kernel_threads):
    x, w, b = _case(m, k, n, seed=3)
    packed = gemm.PackedGemm(w, b)
    one, two = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
    set_policy(split_macs=1)
    kernel_threads(1)
    packed.step(x, one)()
    kernel_threads(2)
    packed.step(x, two)()
    np.testing.assert_array_equal(one, two)


@needs_tier
def test_wrong_shapes_are_refused():
    x, w, b = _case(4, 8, 16)
    with pytest.raises(ValueError, match=r"packed GEMM of \[M, 8\] x \[8, 16\]"):
        gemm.PackedGemm(w, b).step(x[:, :7], np.empty((4, 16), np.float32))


def test_numpys_blas_runs_on_one_thread_inside_and_as_before_after():
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def numpys() -> list[int]:  # SciPy, when loaded, brings an OpenBLAS of its own, which is not touched
        found = threadpoolctl.ThreadpoolController().select(internal_api="openblas").lib_controllers
        return [c.num_threads for c in found if "numpy" in c.filepath]

    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        before = numpys()
        if not before:
            pytest.skip("NumPy's BLAS here is not OpenBLAS")
        with blas_threads.ONE_THREAD:
            assert numpys() == [1]
            with blas_threads.ONE_THREAD:  # nested, as a fused method calling an XNNPACK delegate
                assert numpys() == [1]
            assert numpys() == [1]
        assert numpys() == before == [2]


def _batched(shape_a, shape_b, transposed=False, seed=5):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape_a, dtype=np.float32)
    if transposed:  # b given as a transposed view, as attention's keys
        b = rng.standard_normal(shape_b[:-2] + shape_b[-2:][::-1], dtype=np.float32).swapaxes(-1, -2)
    else:
        b = rng.standard_normal(shape_b, dtype=np.float32)
    return a, b, np.full(shape_a[:-1] + shape_b[-1:], np.nan, np.float32)


@needs_tier
@pytest.mark.parametrize(
    "shape_a,shape_b,transposed",
    [((3, 197, 64), (3, 64, 197), True), ((1, 3, 197, 197), (1, 3, 197, 64), False), ((96, 32, 32), (96, 32, 32), True),
     ((2, 7, 50), (2, 50, 33), False), ((4, 6, 300), (4, 300, 17), True)],
)  # fmt: skip
def test_batch_matmul_matches_a_float64_product(shape_a, shape_b, transposed):
    a, b, out = _batched(shape_a, shape_b, transposed)
    step = gemm.batch_matmul(a, b, out)
    assert step is not None
    step()
    want = a.astype(np.float64) @ b.astype(np.float64)
    k = a.shape[-1]
    bound = (k + 2) * np.finfo(np.float32).eps * (np.abs(a).astype(np.float64) @ np.abs(b)) + 1e-30
    assert np.all(np.abs(out - want) <= bound)
    b[...] = 0  # read at each call, not kept from the first
    step()
    np.testing.assert_array_equal(out, 0.0)


@needs_tier
def test_batch_matmul_on_two_threads_gives_the_bits_of_one(monkeypatch, set_policy, kernel_threads):
    a, b, one = _batched((3, 50, 40), (3, 40, 30), transposed=True, seed=6)
    two = np.empty_like(one)
    set_policy(split_macs=1)
    kernel_threads(1)
    gemm.batch_matmul(a, b, one)()
    kernel_threads(2)
    step = gemm.batch_matmul(a, b, two)
    assert compiled.splits(step)
    step()
    np.testing.assert_array_equal(one, two)


@needs_tier
def test_batch_matmul_declines_what_it_does_not_take():
    a, b, out = _batched((3, 20, 40), (3, 40, 30))
    assert gemm.batch_matmul(a, b, out) is not None
    assert gemm.batch_matmul(a[:1], b, out[:1]) is None  # broadcast batch
    assert gemm.batch_matmul(a.astype(np.float64), b.astype(np.float64), out.astype(np.float64)) is None
    assert gemm.batch_matmul(a[:, :, :8], b[:, :8, :4], out[:, :, :4].copy()) is None  # too small to pay
    assert gemm.batch_matmul(a[:, ::2], b, out[:, ::2]) is None  # strided rows: np.matmul keeps it
    row, one = a[:, :1].copy(), out[:, :1].copy()  # one row (a decode step): packing B would cost more than the product
    assert gemm.batch_matmul(row, b, one) is None
    wide = np.zeros((2, 3, 40, 30), np.float32)
    odd = wide.transpose(1, 0, 2, 3)  # leading axes that only a copy could merge
    a4, o4 = np.zeros((3, 2, 20, 40), np.float32), np.zeros((3, 2, 20, 30), np.float32)
    assert gemm.batch_matmul(a4, odd, o4) is None


@needs_tier
def test_batched_products_share_one_scratch_buffer_and_stay_right():
    """Every batched product packs into the calling thread's one scratch buffer (an LLM prefill's attention would
    otherwise hold a buffer a layer); interleaved calls of different sizes still give each its product."""
    small, large = _batched((2, 12, 40), (2, 40, 30), seed=8), _batched((3, 40, 50), (3, 50, 70), True, seed=9)
    steps = [gemm.batch_matmul(*small), gemm.batch_matmul(*large)]
    for _ in range(2):
        for step, (a, b, out) in zip(steps, (small, large)):
            out[...] = np.nan
            step()
            np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-4)
    assert gemm._SCRATCH.buffer.size >= 3 * 5 * 50 * 16  # at least the larger one's panels, [3, ceil(70 / 16), 50, 16]


@needs_tier
@pytest.mark.parametrize("m,k,n", [(1, 5, 16), (7, 33, 40), (8, 64, 24), (17, 100, 70), (300, 40, 48)])
def test_the_16_lane_tiles_give_the_bits_of_the_8_lane_ones(m, k, n, set_policy, kernel_threads):
    """The 16-lane kernel (an AVX-512 host's candidate; LLVM splits it elsewhere) sums each output in the same
    order as the 8-lane one, serially and split over threads."""
    x, w, b = _case(m, k, n, seed=4)
    packed = gemm.PackedGemm(w, b, -1.0, 2.0)
    outs = {}
    set_policy(split_macs=1, split_adapts=False)
    for threads in (1, 2):
        kernel_threads(threads)
        for kernel in ("packed", "packed16"):
            y = np.full((m, n), np.nan, np.float32)
            packed.step(x, y, kernel)()
            outs[kernel, threads] = y
    for y in outs.values():
        np.testing.assert_array_equal(y, outs["packed", 1])


@needs_tier
def test_choose_packed_offers_the_16_lane_tiles_only_with_avx512(monkeypatch, set_policy):
    from edgetorch.runtime.host import Host

    x, w, b = _case(12, 16, 32)
    wide = Host("cpu", "x86_64", frozenset({"avx2", "avx512f"}), 2)
    narrow = Host("cpu", "x86_64", frozenset({"avx2"}), 2)
    monkeypatch.setattr(gemm, "this_host", lambda: narrow)
    assert gemm.packed_kernels() == ("packed",) and gemm.linear_kernels() == ("packed", "sgemm")
    assert gemm.choose_packed(gemm.PackedGemm(w, b), 12).kernel == "packed"
    monkeypatch.setattr(gemm, "this_host", lambda: wide)
    set_policy(kernel_choices={"packed-gemm": "packed16"})
    assert gemm.choose_packed(gemm.PackedGemm(w, b), 12).kernel == "packed16"
