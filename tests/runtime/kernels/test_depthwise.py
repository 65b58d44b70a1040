"""The compiled tier's NHWC depthwise kernels (runtime/kernels/depthwise.py): the vector micro-kernel (on 8
lanes, and on 16 then 8, which LLVM splits on a CPU without AVX-512) and the row loops give the same bits on every window shape (border pixels, channel tails, dilation, padding wider than
the window reaches), split over threads or not, and the layer's kernel is the one the policy fixes."""

from __future__ import annotations

import numpy as np
import pytest

from edgetorch.runtime import policy
from edgetorch.runtime.kernels import depthwise

pytestmark = pytest.mark.skipif(
    not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])"
)

# (batch, height, width, channels, kernel, stride, padding, dilation, bias)
WINDOWS = [
    (1, 9, 7, 8, 3, 1, 1, 1, True),
    (2, 11, 9, 12, 3, 2, 1, 1, True),  # a channel tail of 4 past the vector
    (1, 10, 10, 16, 5, 1, 2, 1, False),
    (1, 13, 11, 24, 5, 2, 2, 1, True),
    (2, 12, 12, 20, 3, 1, 2, 2, True),
    (1, 5, 6, 8, 7, 1, 3, 1, True),  # every pixel on the border
    (1, 4, 4, 9, 5, 2, 4, 1, True),  # windows with no tap inside the input: the bias alone
    (1, 9, 9, 3, 2, 2, 0, 1, False),  # fewer channels than a vector
    (1, 17, 21, 40, 3, 1, 1, 1, True),  # inner runs of 8, 4, 2 and 1 pixels
]


def _layer(case, seed):
    from edgetorch.runtime.ops.window import Window

    nb, h, w, c, k, s, p, d, bias = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((nb, h, w, c), dtype=np.float32)
    taps = rng.standard_normal((k * k, c), dtype=np.float32)
    b = rng.standard_normal(c, dtype=np.float32) if bias else np.empty(0, np.float32)
    oh, ow = Window(k, k, s, s, d, d, p, p, p, p).out_hw(h, w)
    window = (k, k, s, s, d, d, p, p, np.float32(-0.5), np.float32(6.0))
    return x, taps, b, (nb, oh, ow, c), window


def _run(kernel, x, taps, b, shape, window):
    from edgetorch.runtime.kernels import depthwise

    y = np.full(shape, np.nan, np.float32)
    depthwise._step(kernel, x, taps, b, y, *window)()
    return y


@pytest.mark.parametrize("kernel", ["vector", "vector16"])
@pytest.mark.parametrize("case", WINDOWS)
def test_the_vector_kernel_gives_the_bits_of_the_row_loops(case, kernel):
    x, taps, b, shape, window = _layer(case, sum(case))
    vector = _run(kernel, x, taps, b, shape, window)
    assert not np.isnan(vector).any()
    np.testing.assert_array_equal(vector, _run("rows", x, taps, b, shape, window))


def test_the_vector_kernel_keeps_nan_and_splits_with_the_bits_of_one_thread(set_policy, kernel_threads):
    x, taps, b, shape, window = _layer((2, 14, 14, 40, 3, 1, 1, 1, True), 3)
    x[0, 5, 5, 3] = np.nan
    set_policy(split_outputs=1, split_adapts=False)
    kernel_threads(2)
    split = _run("vector16", x, taps, b, shape, window)
    kernel_threads(1)
    serial = _run("vector16", x, taps, b, shape, window)
    np.testing.assert_array_equal(split, serial)
    assert np.isnan(serial[0, 4:7, 4:7, 3]).all() and np.isnan(serial).sum() == 9


@pytest.mark.parametrize("kernel", ["vector", "vector16", "rows"])
def test_the_policy_fixes_the_kernel_a_layer_runs(kernel, set_policy, monkeypatch):
    from edgetorch.runtime.host import Host
    from edgetorch.runtime.kernels import depthwise

    monkeypatch.setattr(depthwise, "this_host", lambda: Host("cpu", "x86_64", frozenset({"avx512f"}), 2))
    set_policy(kernel_choices={"depthwise": kernel})
    x, taps, b, shape, window = _layer(WINDOWS[0], 0)
    decision = depthwise.choose(x, taps, b, np.empty(shape, np.float32), *window)
    assert (decision.kernel, decision.reason) == (kernel, "fixed by policy")


def test_the_16_lane_kernel_is_a_candidate_only_with_avx512(monkeypatch):
    from edgetorch.runtime.host import Host
    from edgetorch.runtime.kernels import depthwise

    monkeypatch.setattr(depthwise, "this_host", lambda: Host("cpu", "x86_64", frozenset({"avx2"}), 2))
    assert depthwise.kernels() == ("vector", "rows")
    monkeypatch.setattr(depthwise, "this_host", lambda: Host("cpu", "x86_64", frozenset({"avx2", "avx512f"}), 2))
    assert depthwise.kernels() == ("vector", "vector16", "rows")


def test_python_float_bounds_run_every_kernel():
    """Bounds given as Python floats (float64 to numba) run as float32 ones: the vector kernels' IR could only
    splat float32 bounds and raised TypeError at compile."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 6, 7, 24), dtype=np.float32)
    taps = rng.standard_normal((9, 24), dtype=np.float32)
    bias = np.zeros(24, np.float32)
    window = (3, 3, 1, 1, 1, 1, 1, 1)
    want = np.empty((1, 6, 7, 24), np.float32)
    depthwise._step("rows", x, taps, bias, want, *window, np.float32(-0.5), np.float32(0.5))()
    for kernel in depthwise.kernels():
        y = np.full_like(want, np.nan)
        depthwise._step(kernel, x, taps, bias, y, *window, -0.5, 0.5)()
        np.testing.assert_array_equal(y, want)
