"""The window geometry of the op layer against torch's own output sizes."""

from __future__ import annotations

import itertools

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
