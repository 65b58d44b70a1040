"""The VNNI QB4W GEMM (edgetorch/backends/xnnpack/qgemv_vnni.py) against the QB4W node's float32 arithmetic in its
written order, bit for bit, and against the integer GEMV of qgemv.py on the same layer; random shapes that are
not multiples of its tile, the extreme inputs and weights. Skipped on a host without AVX512-VNNI."""

from __future__ import annotations

import numpy as np
import pytest

from edgetorch.backends.xnnpack import qgemv, qgemv_vnni
from edgetorch.errors import InvalidInputError
from edgetorch.runtime import policy
from tests.backends.xnnpack.test_qgemv import _pack, _qb4w_float32

needs_vnni = pytest.mark.skipif(not qgemv_vnni.available(), reason="the host has no AVX512-VNNI (or no llvmlite)")


def _layer(rng, m, k, n, block):
    q = rng.integers(-128, 128, (m, k))
    zp = rng.integers(-128, 128, (m, 1))
    q[0, : k // 2], zp[0] = 127, -128  # centred +255 ...
    if m > 1:
        q[1], zp[1] = -128, 127  # ... and -255 on the -8 weights below
    xc = (q - zp).astype(np.float32)
    w = rng.integers(-8, 8, (n, k)).astype(np.int8)
    w[: n // 2 + 1 : 2] = -8
    w[1::3, ::2] = 7
    scales = (rng.uniform(0.001, 0.02, (n, k // block)) * rng.choice([-1, 1], (n, k // block))).astype(np.float32)
    return xc, zp, w, scales


@needs_vnni
@pytest.mark.parametrize("seed", range(8))
def test_totals_round_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    block = int(rng.choice([8, 16, 32, 64, 128]))
    m, k, n = int(rng.integers(1, 40)), block * int(rng.integers(1, 6)), int(rng.integers(1, 100))
    xc, zp, w, scales = _layer(rng, m, k, n, block)
    got = qgemv_vnni.VnniQB4W(_pack(w), scales, block, n, k).totals(xc, zp)
    ones = np.ones((m, 1), np.float32)
    want = _qb4w_float32(xc, w, scales, block, ones, None, -np.inf, np.inf)
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))


@needs_vnni
@pytest.mark.skipif(not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])")
def test_equals_the_integer_gemv(set_policy):
    set_policy(gemv_max_rows=dict.fromkeys(policy.current().gemv_max_rows, 16))
    rng = np.random.default_rng(7)
    m, k, n, block = 9, 192, 70, 32
    xc, zp, w, scales = _layer(rng, m, k, n, block)
    xscale = rng.uniform(0.001, 0.05, (m, 1)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    layer = qgemv.IntegerLinear.qb4w(_pack(w), scales, block, n, k, bias)
    y = np.full((m, n), np.nan, np.float32)
    for step in layer.steps(xc, xscale, y, -np.inf, np.inf):
        step()
    got = qgemv_vnni.VnniQB4W(_pack(w), scales, block, n, k).totals(xc, zp) * xscale + bias
    np.testing.assert_array_equal(got.view(np.int32), y.view(np.int32))


def test_rejects_layouts_it_does_not_take():
    with pytest.raises(InvalidInputError, match="multiples of 8"):
        qgemv_vnni.VnniQB4W(np.zeros((4, 6), np.uint8), np.ones((4, 3), np.float32), 4, 4, 12)


@needs_vnni
@pytest.mark.skipif(not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])")
def test_program_on_the_vnni_path_equals_the_gemv_path(monkeypatch, set_policy):
    """An 8da4w program with its 8 input rows on the VNNI GEMM (tuning's choice fixed) gives the GEMV's values."""
    from edgetorch.runtime import Runtime
    from tests.backends.xnnpack.test_qgemv import _edgetorch_written

    args, _, pte = _edgetorch_written("mlp", "8da4w")
    inputs = [a.numpy() for a in args]
    calls: list[int] = []
    vnni_matmul = qgemv.IntegerLinear.vnni_matmul
    monkeypatch.setattr(qgemv.IntegerLinear, "vnni_matmul", lambda self, *a: calls.append(1) or vnni_matmul(self, *a))
    results = {}
    for name in ("vnni", "gemv"):
        set_policy(gemv_max_rows=dict.fromkeys(policy.current().gemv_max_rows, 8 if name == "gemv" else 1))
        set_policy(kernel_choices={"qgemv": name, "qb4w-vnni": name})
        calls.clear()
        results[name] = Runtime.get().load_program(pte).load_method("forward").execute(inputs)[0]
        assert bool(calls) == (name == "vnni")
    np.testing.assert_array_equal(results["vnni"], results["gemv"])
