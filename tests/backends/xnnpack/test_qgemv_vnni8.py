"""The VNNI QC8W GEMV (edgetorch/backends/xnnpack/qgemv_vnni8.py) against qgemv.py's integer GEMV on the same
layer, bit for bit: a language model's head shape, shapes that are not multiples of the tile, the extreme
inputs and weights, bias and clamps; as IntegerLinear's tuning candidate; and a whole program whose 8-bit
layers run it. Skipped on a host without AVX512-VNNI; on one with AVX2 alone it is not offered."""

from __future__ import annotations

import numpy as np
import pytest

from edgetorch.backends.xnnpack import qgemv, qgemv_vnni, qgemv_vnni8
from edgetorch.errors import InvalidInputError
from edgetorch.runtime import policy, tuning
from tests.backends.xnnpack.test_qgemv_vnni import _program_on_each_path, _steps_follow_the_choice

needs_vnni = pytest.mark.skipif(not qgemv_vnni8.available(), reason="the host has no AVX512-VNNI (or no llvmlite)")
needs_numba = pytest.mark.skipif(
    not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])"
)


def _case(rng, m, k, n):
    """Weights, scales, bias and an input with the extremes: rows centred at +255 and -255 (the offset then
    maps every input to one end of the byte), a row of one repeated value, weights all -128 or all 127."""
    q = rng.integers(-128, 128, (m, k))
    zp = rng.integers(-128, 128, (m, 1))
    q[0, : k // 2], zp[0] = 127, -128
    if m > 1:
        q[1], zp[1] = -128, 127
    if m > 2:
        q[2], zp[2] = 5, 5
    xc = (q - zp).astype(np.float32)
    w = rng.integers(-128, 128, (n, k)).astype(np.int8)
    w[0] = -128
    w[-1] = 127
    wscale = rng.uniform(0.001, 0.02, n).astype(np.float32)
    xscale = rng.uniform(0.001, 0.05, (m, 1)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    return xc, w, wscale, xscale, bias


def _both(xc, w, wscale, xscale, bias, lo, hi):
    """The integer GEMV's output and the VNNI GEMV's on one layer."""
    m, n, k = xc.shape[0], *w.shape
    layer = qgemv.IntegerLinear.qc8w(w, wscale, bias)
    want = np.full((m, n), np.nan, np.float32)
    for step in layer._gemv_steps(xc, xscale, want, lo, hi):
        step()
    got = np.full((m, n), np.nan, np.float32)
    qgemv_vnni8.VnniGemvQC8W(w, wscale, n, k).step(xc, xscale, layer.bias, got, lo, hi)()
    return want, got


@needs_vnni
@needs_numba
@pytest.mark.parametrize(("m", "k", "n"), [(1, 576, 49152), (1, 576, 960), (4, 1536, 576)])
def test_bit_for_bit_on_language_model_shapes(m, k, n, set_policy):
    set_policy(gemv_max_rows=dict.fromkeys(policy.current().gemv_max_rows, 16))
    want, got = _both(*_case(np.random.default_rng(n), m, k, n), -np.inf, np.inf)
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))


@needs_vnni
@needs_numba
@pytest.mark.parametrize("seed", range(6))
def test_bit_for_bit_on_edge_shapes(seed, set_policy):
    set_policy(gemv_max_rows=dict.fromkeys(policy.current().gemv_max_rows, 16))
    rng = np.random.default_rng(seed)
    m, k, n = int(rng.integers(1, 17)), 4 * int(rng.integers(1, 100)), int(rng.integers(1, 200))
    xc, w, wscale, xscale, bias = _case(rng, m, k, n)
    lo, hi = [(-np.inf, np.inf), (-0.5, 0.5), (0.0, np.inf)][seed % 3]
    want, got = _both(xc, w, wscale, xscale, None if seed % 2 else bias, lo, hi)
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))


@needs_vnni
def test_rejects_what_it_does_not_take():
    w, wscale = np.zeros((8, 12), np.int8), np.ones(8, np.float32)
    with pytest.raises(InvalidInputError, match=r"scales \[N\]"):
        qgemv_vnni8.VnniGemvQC8W(w, np.ones(7, np.float32), 8, 12)
    with pytest.raises(InvalidInputError, match="up to 60000"):
        qgemv_vnni8.VnniGemvQC8W(np.zeros((1, 60_004), np.int8), np.ones(1, np.float32), 1, 60_004)
    with pytest.raises(InvalidInputError, match="multiple of 4"):
        qgemv_vnni8.VnniGemvQC8W(np.zeros((8, 10), np.int8), wscale, 8, 10)
    layer = qgemv_vnni8.VnniGemvQC8W(w, wscale, 8, 12)
    xc, xscale, y = np.zeros((2, 12), np.float32), np.ones((2, 1), np.float32), np.zeros((2, 8), np.float32)
    with pytest.raises(InvalidInputError, match=r"xc \[M, 12\]"):
        layer.step(xc[:, :8], xscale, np.zeros(0, np.float32), y, -np.inf, np.inf)
    with pytest.raises(InvalidInputError, match="float32"):
        layer.step(xc.astype(np.float64), xscale, np.zeros(0, np.float32), y, -np.inf, np.inf)


@needs_vnni
@needs_numba
def test_layers_whose_inputs_are_not_whole_steps_keep_the_integer_gemv(set_policy):
    set_policy(tune=True, kernel_choices={"qgemv": "vnni-gemv"})
    layer = qgemv.IntegerLinear.qc8w(np.ones((8, 10), np.int8), np.ones(8, np.float32), None)
    assert layer.vnni_gemv_layer() is None
    assert layer._few_rows(1, "") != "vnni-gemv"


@needs_vnni
@needs_numba
def test_tuning_measures_it_and_steps_follow_its_choice(tuned, set_policy):
    """The host times ``vnni-gemv`` beside the integer GEMV for a QC8W layer's row; the steps are the VNNI
    GEMV's exactly when it is chosen, with the same values, and its layout is kept only then."""
    n, k = 300, 64
    xc, w, wscale, xscale, bias = _case(np.random.default_rng(5), 1, k, n)
    set_policy(tune=True, kernel_choices={}, gemv_max_rows=dict.fromkeys(policy.current().gemv_max_rows, 16))
    layer = qgemv.IntegerLinear.qc8w(w, wscale, bias)
    with tuning.recording() as log:
        layer.uses_gemv(1, "here")
    assert "vnni-gemv" in log[0][1].times
    _steps_follow_the_choice(set_policy, layer, xc, xscale, qgemv_vnni8.kernel())


@needs_vnni
@needs_numba
def test_program_of_8_bit_layers_on_the_vnni_gemv_equals_the_gemv_path(tuned, monkeypatch, set_policy):
    """The MLP program quantized 8da8w by edgetorch's flow (8 input rows, the integer GEMV's limit raised to
    them), its layers on the VNNI GEMV by tuning's fixed choice, gives the integer GEMV's values bit for bit."""

    def settings(name: str) -> dict:
        rows = dict.fromkeys(policy.current().gemv_max_rows, 8)
        return {"tune": True, "kernel_choices": {"qgemv": name}, "gemv_max_rows": rows}

    names = ("vnni-gemv", "gemv")
    results = _program_on_each_path(
        monkeypatch, set_policy, qgemv_vnni8.VnniGemvQC8W, "step", names, settings, scheme="8da8w"
    )
    np.testing.assert_array_equal(results["vnni-gemv"].view(np.int32), results["gemv"].view(np.int32))


@needs_numba
def test_not_offered_on_a_host_with_avx2_alone(monkeypatch, set_policy):
    """AVX2's dot form sums pairs of byte products in int16, which int8 weights overflow (2 x 255 x 128): a QC8W
    layer keeps the integer GEMV there, the choice is not measured, and no kernel is compiled."""
    monkeypatch.setattr(qgemv_vnni8, "dots", lambda: (qgemv_vnni.AVX2,))
    assert not qgemv_vnni8.available() and qgemv_vnni8.kernel() is None
    set_policy(tune=True, kernel_choices={"qgemv": "vnni-gemv"})
    w, wscale = np.ones((8, 64), np.int8), np.ones(8, np.float32)
    layer = qgemv.IntegerLinear.qc8w(w, wscale, None)
    assert layer.vnni_gemv_layer() is None
    assert layer._few_rows(1, "") != "vnni-gemv"
