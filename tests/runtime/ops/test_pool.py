"""The op layer's pooling: one op for both layouts, against torch on both tiers, and the same bits in NCHW (the
portable kernels) and NHWC (the XNNPACK delegate)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.errors import InvalidArgumentError
from edgetorch.runtime import policy
from edgetorch.runtime.ops import pool, window

needs_numba = pytest.mark.skipif(
    not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])"
)
TIERS = [False, pytest.param(True, marks=needs_numba)]

# (channels, height, width, kernel, stride, padding, dilation)
CASES = [
    (8, 9, 9, 3, 2, 1, 1),  # ResNet's stem pooling
    (5, 10, 11, 2, 2, 0, 1),
    (4, 12, 10, 3, 1, 1, 2),
    (3, 11, 13, 5, 3, 2, 1),
]


def _run(op, layout, x, kernel, stride, padding, dilation, **options):
    n, c, h, w = x.shape
    oh, ow = (window.output_size(s, kernel, stride, padding, padding, dilation) for s in (h, w))
    xs = x if layout == "NCHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    y = np.full((n, c, oh, ow) if layout == "NCHW" else (n, oh, ow, c), 7.0, x.dtype)
    pads = [(padding, padding)] * 2
    if op == "max":
        steps = pool.max_pool(xs, y, (kernel,) * 2, (stride,) * 2, pads, (dilation,) * 2, layout)
    else:
        steps = pool.avg_pool(xs, y, (kernel,) * 2, (stride,) * 2, pads, layout, **options)
    for step in steps:
        step()
    return y if layout == "NCHW" else y.transpose(0, 3, 1, 2)


@pytest.mark.parametrize("fast", TIERS)
@pytest.mark.parametrize("case", CASES)
def test_max_pool_equals_torch_in_both_layouts_with_the_same_bits(case, fast, set_policy):
    set_policy(compiled=fast)
    c, h, w, k, s, p, d = case
    x = np.random.default_rng(c * h + k).standard_normal((2, c, h, w), dtype=np.float32)
    x[0, 1, 2, :3] = np.nan
    want = torch.nn.functional.max_pool2d(torch.from_numpy(x), k, s, p, d).numpy()
    nchw = _run("max", "NCHW", x, k, s, p, d)
    np.testing.assert_array_equal(nchw, want)
    np.testing.assert_array_equal(_run("max", "NHWC", x, k, s, p, d), nchw)


@pytest.mark.parametrize("fast", TIERS)
@pytest.mark.parametrize("case", [case for case in CASES if case[6] == 1])
def test_avg_pool_equals_torch_in_both_layouts_with_the_same_bits(case, fast, set_policy):
    set_policy(compiled=fast)
    c, h, w, k, s, p, _ = case
    x = np.random.default_rng(c * h + k).standard_normal((2, c, h, w), dtype=np.float32)
    want = torch.nn.functional.avg_pool2d(torch.from_numpy(x), k, s, p, count_include_pad=False).numpy()
    nchw = _run("avg", "NCHW", x, k, s, p, 1)
    np.testing.assert_allclose(nchw, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(_run("avg", "NHWC", x, k, s, p, 1), nchw)


def test_avg_pool_divisors_follow_torch():
    x = np.random.default_rng(3).standard_normal((1, 2, 7, 7), dtype=np.float32)
    tx = torch.from_numpy(x)
    with_pad = torch.nn.functional.avg_pool2d(tx, 3, 2, 1, count_include_pad=True).numpy()
    np.testing.assert_allclose(_run("avg", "NCHW", x, 3, 2, 1, 1, count_include_pad=True), with_pad, 1e-6, 1e-6)
    override = torch.nn.functional.avg_pool2d(tx, 3, 2, 1, divisor_override=5).numpy()
    np.testing.assert_allclose(_run("avg", "NCHW", x, 3, 2, 1, 1, divisor_override=5), override, 1e-6, 1e-6)


def test_window_counts_count_the_taps_inside_the_input():
    # size 5, kernel 3, stride 2, padding 1 each side: windows at -1..1, 1..3, 3..5
    np.testing.assert_array_equal(window.window_counts(5, 3, 2, 1, 1, 3), [2, 3, 2])
    np.testing.assert_array_equal(window.window_counts(5, 3, 2, 1, 1, 3, include_padding=True), [3, 3, 3])
    np.testing.assert_array_equal(window.window_counts(5, 2, 1, 1, 0, 5, dilation=2), [1, 2, 2, 2, 1])


def test_bad_layout_and_output_shape_are_typed_errors():
    x = np.zeros((1, 6, 6, 2), np.float32)
    with pytest.raises(InvalidArgumentError, match="layout"):
        pool.max_pool(x, x, (2, 2), (2, 2), [(0, 0)] * 2, (1, 1), "NDHWC")
    with pytest.raises(InvalidArgumentError, match="must have shape"):
        pool.max_pool(x, np.zeros((1, 2, 2, 2), np.float32), (2, 2), (2, 2), [(0, 0)] * 2, (1, 1), "NHWC")
