"""The window geometry of the op layer against torch's own output sizes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from edgetorch.runtime.ops import window


@pytest.mark.parametrize("ceil_mode", [False, True])
def test_pooling_output_sizes_equal_torchs(ceil_mode):
    for size, kernel, stride, pad, dilation in itertools.product(range(3, 12), (1, 2, 3), (1, 2, 3), (0, 1), (1, 2)):
        if pad > kernel // 2 or window.span(kernel, dilation) > size + 2 * pad:
            continue
        pool = torch.nn.MaxPool1d(kernel, stride, pad, dilation, ceil_mode=ceil_mode)
        want = pool(torch.zeros(1, 1, size)).shape[-1]
        assert window.output_size(size, kernel, stride, pad, pad, dilation, ceil_mode) == want


def test_convolution_and_transposed_sizes_equal_torchs():
    for size, kernel, stride, pad, dilation in itertools.product(range(3, 9), (1, 3), (1, 2), (0, 1, 2), (1, 2)):
        conv = torch.nn.Conv1d(1, 1, kernel, stride, pad, dilation)
        got = window.output_size(size, kernel, stride, pad, pad, dilation)
        if got < 1:
            continue
        assert got == conv(torch.zeros(1, 1, size)).shape[-1]
        for extra in range(min(stride, dilation)):
            if window.transposed_size(size, kernel, stride, pad, pad, dilation, extra) < 1:
                continue
            up = torch.nn.ConvTranspose1d(1, 1, kernel, stride, pad, extra, dilation=dilation)
            want = up(torch.zeros(1, 1, size)).shape[-1]
            assert window.transposed_size(size, kernel, stride, pad, pad, dilation, extra) == want


def test_asymmetric_padding_counts_both_sides():
    assert window.output_size(8, 3, 2, 0, 1) == 4  # TensorFlow's "same" padding of a stride-2 3x3: after only
    assert window.output_size(8, 3, 2, 1, 0) == 4
    assert window.output_size(8, 3, 2, 0, 0) == 3
    assert window.reach(4, 3, 2, 1) == 9


# (shape, axis, kernel, stride, dilation, lo, hi): NCHW (the last axes spatial) and NHWC (channels after them)
PLANES = [
    ((2, 3, 9, 10), 2, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
    ((2, 3, 9, 10), 2, (2, 3), (1, 2), (2, 1), (0, 2), (0, 2)),
    ((2, 3, 7, 7), 2, (3, 3), (1, 1), (1, 1), (0, 0), (0, 0)),  # no copy: views of x itself
    ((1, 11, 9, 4), 1, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
    ((1, 8, 8, 4), 1, (2, 2), (2, 2), (1, 1), (0, 0), (0, 0)),  # no more taps than phases: no copy
    ((1, 10, 11, 4), 1, (3, 2), (3, 1), (1, 2), (2, 0), (1, 1)),
]


@pytest.mark.parametrize("case", PLANES)
def test_phase_planes_views_read_the_padded_windows_and_follow_x(case):
    shape, axis, kernel, stride, dilation, lo, hi = case
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    out = [
        window.output_size(n, k, s, a, b, dl)
        for n, k, s, a, b, dl in zip(shape[axis:], kernel, stride, lo, hi, dilation)
    ]
    flat = axis + len(kernel) == len(shape)
    planes = window.PhasePlanes(x, axis, kernel, stride, dilation, lo, out, -5.0, flat=flat)
    for _ in range(2):  # the views read x as it is when the steps last ran
        planes.refresh()
        pads = [(0, 0)] * axis + list(zip(lo, hi)) + [(0, 0)] * (len(shape) - axis - len(kernel))
        xp = np.pad(x, pads, constant_values=-5.0)
        for tap in planes.taps():
            spatial = tuple(
                slice(t * dl, t * dl + (n - 1) * s + 1, s) for t, dl, n, s in zip(tap, dilation, out, stride)
            )
            want = xp[(slice(None),) * axis + spatial]
            np.testing.assert_array_equal(planes.view(tap), want)
            if flat:
                got, got_view = planes.virtual(x.dtype)
                np.copyto(got, planes.flat_view(tap))
                np.testing.assert_array_equal(got_view, want)
        x += 1
