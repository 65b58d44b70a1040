"""The op layer's depthwise convolution: one op for both layouts, against torch on both tiers, and the same bits
in NCHW (the portable kernels) and NHWC (the XNNPACK delegate) wherever both take the same formulation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.errors import InvalidArgumentError
from edgetorch.runtime import policy
from edgetorch.runtime.ops import conv

needs_numba = pytest.mark.skipif(
    not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])"
)

# (channels, multiplier, size, kernel, stride, padding, dilation)
CASES = [
    (8, 1, 9, 3, 1, 1, 1),
    (8, 1, 10, 3, 2, 1, 1),
    (6, 1, 40, 3, 1, 1, 1),  # rows wider than the compiled NCHW kernel's flat-plane limit
    (5, 1, 11, 5, 2, 2, 1),
    (4, 1, 12, 3, 1, 2, 2),
    (4, 2, 9, 3, 2, 1, 1),  # channel multiplier 2: the NumPy formulations on every tier
]


def _torch(x, w, b, stride, padding, dilation, clamp):
    y = torch.nn.functional.conv2d(
        torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride, padding, dilation, x.shape[1]
    )
    return y.clamp(*clamp).numpy()


def _run(layout, x, w, b, stride, padding, dilation, clamp):
    xs = x if layout == "NCHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    oh = (x.shape[2] + 2 * padding - dilation * (w.shape[2] - 1) - 1) // stride + 1
    shape = (x.shape[0], w.shape[0], oh, oh) if layout == "NCHW" else (x.shape[0], oh, oh, w.shape[0])
    y = np.full(shape, np.nan, np.float32)
    steps = conv.depthwise(xs, w, b, y, (stride,) * 2, [(padding, padding)] * 2, (dilation,) * 2, layout, clamp)
    for step in steps:
        step()
    return y if layout == "NCHW" else y.transpose(0, 3, 1, 2)


@pytest.mark.parametrize("fast", [False, pytest.param(True, marks=needs_numba)])
@pytest.mark.parametrize("case", CASES)
def test_depthwise_equals_torch_in_both_layouts_and_tiers(case, fast, set_policy):
    set_policy(compiled=fast)
    c, mult, size, k, stride, padding, dilation = case
    rng = np.random.default_rng(c * size + k)
    x = rng.standard_normal((2, c, size, size), dtype=np.float32)
    w = rng.standard_normal((c * mult, 1, k, k), dtype=np.float32)
    b = rng.standard_normal(c * mult, dtype=np.float32)
    clamp = (-0.5, 6.0)
    want = _torch(x, w, b, stride, padding, dilation, clamp)
    nchw = _run("NCHW", x, w, b, stride, padding, dilation, clamp)
    nhwc = _run("NHWC", x, w, b, stride, padding, dilation, clamp)
    np.testing.assert_allclose(nchw, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(nhwc, want, rtol=1e-5, atol=1e-5)
    # the compiled tier's 3x3 NCHW kernel and its NHWC kernel sum the taps in the same order: the same bits
    if fast and (k, dilation, mult) == (3, 1, 1):
        np.testing.assert_array_equal(nchw, nhwc)


@needs_numba
def test_the_nhwc_tiers_give_the_same_bits(set_policy):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 16, 14, 14), dtype=np.float32)
    w = rng.standard_normal((16, 1, 3, 3), dtype=np.float32)
    b = rng.standard_normal(16, dtype=np.float32)
    set_policy(compiled=True)
    fast = _run("NHWC", x, w, b, 2, 1, 1, (0.0, 6.0))
    set_policy(compiled=False)
    numpy_tier = _run("NHWC", x, w, b, 2, 1, 1, (0.0, 6.0))
    np.testing.assert_array_equal(fast, numpy_tier)


def test_bad_weight_and_layout_are_typed_errors():
    x = np.zeros((1, 4, 5, 5), np.float32)
    y = np.zeros((1, 4, 3, 3), np.float32)
    with pytest.raises(InvalidArgumentError, match="layout"):
        conv.depthwise(x, np.zeros((4, 1, 3, 3), np.float32), None, y, (1, 1), [(0, 0)] * 2, (1, 1), "NDHWC")
    with pytest.raises(InvalidArgumentError, match="one input channel per group"):
        conv.depthwise(x, np.zeros((4, 2, 3, 3), np.float32), None, y, (1, 1), [(0, 0)] * 2, (1, 1), "NCHW")
