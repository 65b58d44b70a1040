"""The packed GEMM's one-row kernel (edgetorch/runtime/kernels/gemm.py ``row_step``): the bits of the tiles on
every panel count and remainder, on one thread and split, NaN kept by the clamp, wrong shapes refused, and the
XNNPACK delegate's one-row fully connected layer running it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.backends.xnnpack import XnnpackPartitioner
from edgetorch.exir import to_edge_transform_and_lower
from edgetorch.runtime import Runtime, policy
from edgetorch.runtime.kernels import gemm

needs_tier = pytest.mark.skipif(
    not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])"
)


def layer(k: int, n: int, bias: bool, seed: int = 0) -> tuple[np.ndarray, gemm.PackedGemm]:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((k, n), dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32) if bias else None
    return rng.standard_normal((1, k), dtype=np.float32), gemm.PackedGemm(w, b, -1.5, 2.0)


@needs_tier
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kernel", gemm.packed_kernels())
@pytest.mark.parametrize(
    ("k", "n", "bias"),
    [(1, 1, True), (5, 7, False), (33, 16, True), (64, 24, True), (100, 200, False), (3, 130, True),
     (1280, 1000, True), (17, 16 * 15 + 8, False)],
)  # fmt: skip
def test_one_row_gives_the_tiles_bits(k, n, bias, kernel, threads, set_policy, kernel_threads):
    x, packed = layer(k, n, bias)
    x[0, 0] = np.nan if k > 2 else x[0, 0]  # a NaN input: every output NaN, the clamp keeps it
    want = np.empty((1, n), np.float32)
    packed.step(x, want, kernel)()
    set_policy(split_macs=1)
    kernel_threads(threads)
    got = np.full((1, n), 9.0, np.float32)
    step = gemm.row_step(packed, x, got)
    for _ in range(8):  # the split site times both variants in its first calls
        step()
        np.testing.assert_array_equal(got, want)


@needs_tier
def test_the_8_lane_row_kernel_takes_its_panels_in_passes_of_4_with_the_same_bits():
    """The kernel runs on the host's widest vectors; its 8-lane form (two passes over K for 8 panels) is
    compiled here on its own so that an AVX-512 host tests it too."""
    import numba

    row = gemm._row_intrinsic(8)

    @numba.njit
    def eight_then_three(x, wp, bias, lo, hi, out):
        row(x, wp, 0, 8, bias, lo, hi, out)
        row(x, wp, 8, 3, bias, lo, hi, out)

    x, packed = layer(37, 11 * 16 - 5, True, seed=5)
    want = np.empty((1, packed.n), np.float32)
    packed.step(x, want)()
    out = np.full(packed.wp.shape[0] * 16, 9.0, np.float32)
    eight_then_three(x[0], packed.wp, packed.bias, packed.lo, packed.hi, out)
    np.testing.assert_array_equal(out[: packed.n], want[0])


@needs_tier
def test_linear_step_runs_the_row_kernel_for_one_float32_row_only(monkeypatch):
    x, packed = layer(40, 30, True)
    taken = []
    row_step = gemm.row_step
    monkeypatch.setattr(gemm, "row_step", lambda *a: taken.append(a[1].shape) or row_step(*a))
    gemm.linear_step(packed, x, np.empty((1, 30), np.float32))
    gemm.linear_step(packed, np.repeat(x, 3, axis=0), np.empty((3, 30), np.float32))
    gemm.linear_step(packed, np.asfortranarray(np.repeat(x, 2, axis=0))[:1], np.empty((1, 30), np.float32))
    assert taken == [(1, 40)]


@needs_tier
@pytest.mark.parametrize(("x_shape", "y_shape"), [((2, 40), (2, 30)), ((1, 39), (1, 30)), ((1, 40), (1, 31))])
def test_wrong_shapes_are_refused(x_shape, y_shape):
    _, packed = layer(40, 30, True)
    with pytest.raises(ValueError, match="one-row product"):
        gemm.row_step(packed, np.zeros(x_shape, np.float32), np.zeros(y_shape, np.float32))


@needs_tier
def test_a_lowered_one_row_linear_runs_the_row_kernel_with_eager_results(monkeypatch, set_policy):
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(96, 80), torch.nn.ReLU6()).eval()
    x = torch.randn(1, 96)
    taken = []
    row_step = gemm.row_step
    monkeypatch.setattr(gemm, "row_step", lambda *a: taken.append(a) or row_step(*a))
    monkeypatch.setattr(gemm, "linear_kernels", lambda: gemm.packed_kernels())  # the packed layer, not sgemm
    set_policy(compiled=True)
    ep = torch.export.export(model, (x,))
    pte = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    got = Runtime.get().load_program(pte).load_method("forward").execute([x.numpy()])[0]
    assert len(taken) == 1
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-5, atol=1e-5)
