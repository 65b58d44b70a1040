"""Convolution-family kernels against torch eager: convolution (1/2/3-d, grouped, depthwise, transposed),
_convolution, im2col, col2im, pixel_shuffle, pixel_unshuffle."""

import numpy as np
import pytest
import torch

from edgetorch.runtime.kernels.registry import KERNELS
from tests.runtime.kernels._oracle import call
from tests.runtime.kernels._oracle import check as pool_check

aten = torch.ops.aten

TOL = {
    torch.float32: dict(rtol=1e-4, atol=1e-4),
    torch.float64: dict(rtol=1e-10, atol=1e-10),
    torch.float16: dict(rtol=1e-2, atol=1e-2),
    torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
}


def check(result: np.ndarray, expected: torch.Tensor) -> None:
    pool_check(result, expected, tolerances=TOL)


CONV_CASES = {
    # name: (input shape, weight shape, stride, padding, dilation, transposed, output_padding, groups)
    "3x3": ((2, 4, 9, 9), (6, 4, 3, 3), [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
    "stride2_dilation2_asym_pad": ((2, 4, 11, 10), (6, 4, 3, 3), [2, 2], [2, 0], [2, 1], False, [0, 0], 1),
    "rect_kernel_stride": ((1, 3, 10, 12), (5, 3, 2, 5), [3, 2], [1, 2], [1, 1], False, [0, 0], 1),
    "grouped": ((2, 4, 9, 9), (6, 2, 3, 3), [2, 2], [1, 0], [2, 1], False, [0, 0], 2),
    "depthwise": ((2, 6, 9, 9), (6, 1, 3, 3), [1, 1], [1, 1], [1, 1], False, [0, 0], 6),
    "depthwise_stride2_mult2": ((2, 4, 10, 9), (8, 1, 3, 3), [2, 1], [1, 1], [1, 2], False, [0, 0], 4),
    "depthwise_many_channel_blocks": ((1, 70, 40, 40), (70, 1, 3, 3), [1, 1], [1, 1], [1, 1], False, [0, 0], 70),
    "pointwise": ((2, 8, 7, 7), (5, 8, 1, 1), [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
    "pointwise_stride2": ((2, 8, 7, 7), (5, 8, 1, 1), [2, 2], [0, 0], [1, 1], False, [0, 0], 1),
    "pointwise_grouped_padded": ((1, 8, 5, 5), (4, 4, 1, 1), [1, 1], [1, 1], [1, 1], False, [0, 0], 2),
    "1d": ((2, 4, 17), (8, 4, 3), [2], [1], [1], False, [0], 1),
    "1d_depthwise": ((2, 4, 17), (4, 1, 5), [1], [2], [2], False, [0], 4),
    "3d": ((1, 3, 5, 6, 7), (4, 3, 3, 3, 3), [2, 1, 1], [1, 1, 0], [1, 1, 2], False, [0, 0, 0], 1),
    "transposed": ((2, 4, 5, 5), (4, 3, 3, 3), [2, 2], [1, 1], [1, 1], True, [1, 1], 1),
    "transposed_grouped_dilated": ((2, 4, 5, 6), (4, 3, 3, 2), [2, 3], [1, 0], [1, 2], True, [1, 2], 2),
    "transposed_k4_s2": ((1, 8, 4, 4), (8, 4, 4, 4), [2, 2], [1, 1], [1, 1], True, [0, 0], 1),
    "transposed_1d": ((2, 4, 5), (4, 3, 3), [3], [0], [1], True, [2], 1),
    "transposed_3d": ((1, 2, 3, 4, 3), (2, 3, 2, 3, 2), [2, 1, 2], [0, 1, 0], [1, 1, 1], True, [1, 0, 0], 1),
    "transposed_stride1_pad0": ((1, 3, 4, 4), (3, 2, 3, 3), [1, 1], [0, 0], [1, 1], True, [0, 0], 1),
}


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("case", CONV_CASES)
def test_convolution_float32(case, bias):
    xs, ws, stride, padding, dilation, transposed, output_padding, groups = CONV_CASES[case]
    torch.manual_seed(0)
    x, w = torch.randn(xs), torch.randn(ws)
    b = torch.randn(ws[1] * groups if transposed else ws[0]) if bias else None
    expected = aten.convolution.default(x, w, b, stride, padding, dilation, transposed, output_padding, groups)
    args = (x, w, b, stride, padding, dilation, transposed, output_padding, groups)
    check(call("aten::convolution.out", *args, out_like=expected), expected)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", ["3x3", "depthwise", "pointwise", "transposed", "1d"])
def test_convolution_dtypes(case, dtype):
    xs, ws, stride, padding, dilation, transposed, output_padding, groups = CONV_CASES[case]
    torch.manual_seed(1)
    x, w = torch.randn(xs).to(dtype), torch.randn(ws).to(dtype)
    b = torch.randn(ws[1] * groups if transposed else ws[0]).to(dtype)
    expected = aten.convolution.default(
        x.double(), w.double(), b.double(), stride, padding, dilation, transposed, output_padding, groups
    ).to(dtype)
    args = (x, w, b, stride, padding, dilation, transposed, output_padding, groups)
    check(call("aten::convolution.out", *args, out_like=expected), expected)


@pytest.mark.parametrize("case", ["3x3", "depthwise", "depthwise_many_channel_blocks", "stride2_dilation2_asym_pad"])
def test_convolution_repeated_calls_reuse_scratch_cleanly(case):
    """Padded copies and columns are reused between calls: a second input of the same shape must not see the first."""
    xs, ws, stride, padding, dilation, transposed, output_padding, groups = CONV_CASES[case]
    torch.manual_seed(2)
    w = torch.randn(ws)
    for x in (torch.randn(xs) * 100, torch.randn(xs)):
        expected = aten.convolution.default(x, w, None, stride, padding, dilation, transposed, output_padding, groups)
        args = (x, w, None, stride, padding, dilation, transposed, output_padding, groups)
        check(call("aten::convolution.out", *args, out_like=expected), expected)


def test_convolution_writes_into_larger_planned_slot():
    x, w = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3)
    expected = aten.convolution.default(x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    slot = np.full((1, 4, 8, 8), np.nan, np.float32)
    result = KERNELS["aten::convolution.out"][0](
        x.numpy(), w.numpy(), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, slot
    )
    assert result.shape == (1, 4, 6, 6) and np.shares_memory(result, slot)
    np.testing.assert_allclose(slot.reshape(-1)[: result.size].reshape(result.shape), expected.numpy(), rtol=1e-5)


def test_convolution_rejects_unbatched_input():
    with pytest.raises(ValueError, match="batched"):
        KERNELS["aten::convolution.out"][0](
            np.zeros((3, 8, 8), np.float32),
            np.zeros((4, 3, 3, 3), np.float32),
            None,
            [1, 1],
            [0, 0],
            [1, 1],
            False,
            [0, 0],
            1,
            np.zeros((4, 6, 6), np.float32),
        )


def test_convolution_with_backend_flags():
    x, w, b = torch.randn(2, 4, 6, 6), torch.randn(4, 2, 3, 3), torch.randn(4)
    args = (x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 2, False, False, False, False)
    expected = aten._convolution.default(*args)
    check(call("aten::_convolution.out", *args, out_like=expected), expected)


@pytest.mark.parametrize(
    "shape,kernel,dilation,padding,stride",
    [
        ((2, 3, 7, 8), [3, 3], [1, 1], [1, 1], [1, 1]),
        ((2, 3, 9, 8), [2, 3], [2, 1], [0, 2], [2, 3]),
        ((3, 6, 6), [2, 2], [1, 1], [0, 0], [2, 2]),
    ],
)
def test_im2col_col2im(shape, kernel, dilation, padding, stride):
    x = torch.randn(shape)
    cols = aten.im2col.default(x, kernel, dilation, padding, stride)
    check(call("aten::im2col.out", x, kernel, dilation, padding, stride, out_like=cols), cols)
    image = aten.col2im.default(cols, list(shape[-2:]), kernel, dilation, padding, stride)
    check(call("aten::col2im.out", cols, list(shape[-2:]), kernel, dilation, padding, stride, out_like=image), image)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
@pytest.mark.parametrize("shape,r", [((2, 8, 3, 5), 2), ((18, 2, 3), 3), ((2, 1, 4, 4, 2), 2)])
def test_pixel_shuffle_and_unshuffle(shape, r, dtype):
    x = (torch.randn(shape) * 10).to(dtype)
    shuffled = aten.pixel_shuffle.default(x, r)
    check(call("aten::pixel_shuffle.out", x, r, out_like=shuffled), shuffled)
    back = aten.pixel_unshuffle.default(shuffled, r)
    check(call("aten::pixel_unshuffle.out", shuffled, r, out_like=back), back)
