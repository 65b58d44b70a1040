"""The op layer's im2col: one op for both layouts, the same columns on both tiers, checked against the windows
read one by one."""

from __future__ import annotations

import numpy as np
import pytest

from edgetorch.errors import InvalidArgumentError
from edgetorch.runtime import policy
from edgetorch.runtime.ops import conv, window

needs_numba = pytest.mark.skipif(
    not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])"
)

# (channels, height, width, kernel, stride, (top, bottom, left, right), dilation)
CASES = [
    (3, 9, 11, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    (4, 8, 9, (3, 2), (1, 2), (2, 1, 0, 1), (2, 2)),
    (5, 7, 7, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
]


def _reference(x, kernel, stride, pads, dilation):
    """[N, OH, OW, KH, KW, C]: every window of the zero-padded NHWC ``x``, one tap at a time."""
    top, bottom, left, right = pads
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    oh = window.output_size(x.shape[1], kernel[0], stride[0], top, bottom, dilation[0])
    ow = window.output_size(x.shape[2], kernel[1], stride[1], left, right, dilation[1])
    out = np.empty((x.shape[0], oh, ow, *kernel, x.shape[3]), x.dtype)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            r, s = i * dilation[0], j * dilation[1]
            out[:, :, :, i, j] = xp[
                :, r : r + stride[0] * (oh - 1) + 1 : stride[0], s : s + stride[1] * (ow - 1) + 1 : stride[1]
            ]
    return out


@pytest.mark.parametrize("fast", [False, pytest.param(True, marks=needs_numba)])
@pytest.mark.parametrize("case", CASES)
def test_im2col_gives_every_window_in_both_layouts(case, fast, set_policy):
    set_policy(compiled=fast)
    c, h, w, kernel, stride, pads, dilation = case
    x = np.random.default_rng(c + h).standard_normal((2, h, w, c), dtype=np.float32)
    want = _reference(x, kernel, stride, pads, dilation)
    padding = [(pads[0], pads[1]), (pads[2], pads[3])]
    nhwc = np.full(want.shape, np.nan, np.float32)
    for step in conv.im2col(x, nhwc, kernel, stride, padding, dilation, "NHWC"):
        step()
    np.testing.assert_array_equal(nhwc, want)
    # one group's channels a block: the columns of a grouped convolution
    groups = np.full((c, *want.shape[:5], 1), np.nan, np.float32)
    for step in conv.im2col(x, groups.transpose(1, 2, 3, 4, 5, 0, 6), kernel, stride, padding, dilation, "NHWC"):
        step()
    np.testing.assert_array_equal(groups.transpose(1, 2, 3, 4, 5, 0, 6)[..., 0], want)
    if pads[0] == pads[1] and pads[2] == pads[3]:  # NCHW: torch's symmetric padding
        nchw = np.full((2, c, *kernel, *want.shape[1:3]), np.nan, np.float32)
        steps = conv.im2col(np.ascontiguousarray(x.transpose(0, 3, 1, 2)), nchw, kernel, stride, padding, dilation)
        for step in steps:
            step()
        np.testing.assert_array_equal(nchw, want.transpose(0, 5, 3, 4, 1, 2))


def test_im2col_rejects_columns_of_the_wrong_shape():
    x = np.zeros((1, 5, 5, 2), np.float32)
    with pytest.raises(InvalidArgumentError, match="columns of shape"):
        conv.im2col(x, np.zeros((1, 3, 3, 3, 3, 3), np.float32), (3, 3), (1, 1), [(0, 0)] * 2, (1, 1), "NHWC")
