"""Pooling, upsampling, padding and grid-sampling kernels against torch eager."""

import numpy as np
import pytest
import torch

from edgetorch.runtime.kernels.registry import KERNELS
from tests.runtime.kernels._oracle import call, check

aten = torch.ops.aten


def sample(shape, dtype=torch.float32):
    if dtype.is_floating_point:
        return torch.randn(shape).to(dtype)
    return torch.randint(-50, 50, shape, dtype=dtype)


MAX_POOL_2D = [
    # input shape, kernel, stride, padding, dilation, ceil_mode
    ((2, 3, 8, 8), [2, 2], [2, 2], [0, 0], [1, 1], False),
    ((2, 3, 9, 10), [3, 3], [2, 2], [1, 1], [1, 1], False),
    ((1, 2, 9, 10), [3, 2], [2, 3], [1, 1], [1, 1], True),
    ((1, 2, 10, 11), [3, 3], [2, 2], [1, 0], [2, 3], True),
    ((2, 7, 7), [3, 3], [], [1, 1], [1, 1], True),
    ((1, 1, 6, 6), [2, 2], [1, 1], [1, 1], [2, 2], False),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.float64])
@pytest.mark.parametrize("case", range(len(MAX_POOL_2D)))
def test_max_pool2d_with_indices(case, dtype):
    shape, kernel, stride, padding, dilation, ceil_mode = MAX_POOL_2D[case]
    x = sample(shape, dtype)
    values, indices = aten.max_pool2d_with_indices.default(x, kernel, stride, padding, dilation, ceil_mode)
    got = call(
        "aten::max_pool2d_with_indices.out",
        x,
        kernel,
        stride,
        padding,
        dilation,
        ceil_mode,
        out_like=(values, indices),
    )
    check(got[0], values, exact=True)
    check(got[1], indices, exact=True)


def test_max_pool2d_ties_nans_and_infinities():
    x = torch.zeros(1, 1, 6, 6)
    x[0, 0, 1, 1] = float("nan")
    x[0, 0, 3:, 3:] = -float("inf")
    x[0, 0, 0, 4] = float("nan")
    x[0, 0, 0, 5] = float("nan")
    args = ([3, 3], [2, 2], [1, 1], [1, 1], True)
    values, indices = aten.max_pool2d_with_indices.default(x, *args)
    got = call("aten::max_pool2d_with_indices.out", x, *args, out_like=(values, indices))
    np.testing.assert_array_equal(got[0], values.numpy())
    np.testing.assert_array_equal(got[1], indices.numpy())


@pytest.mark.parametrize(
    "shape,kernel,stride,padding,dilation,ceil_mode",
    [
        ((1, 2, 5, 6, 7), [2, 2, 2], [2, 2, 2], [0, 0, 0], [1, 1, 1], False),
        ((1, 2, 5, 6, 7), [3, 3, 2], [2, 1, 2], [1, 1, 0], [1, 2, 1], True),
    ],
)
def test_max_pool3d_with_indices(shape, kernel, stride, padding, dilation, ceil_mode):
    x = sample(shape)
    values, indices = aten.max_pool3d_with_indices.default(x, kernel, stride, padding, dilation, ceil_mode)
    got = call(
        "aten::max_pool3d_with_indices.out",
        x,
        kernel,
        stride,
        padding,
        dilation,
        ceil_mode,
        out_like=(values, indices),
    )
    check(got[0], values, exact=True)
    check(got[1], indices, exact=True)


AVG_POOL_2D = [
    # input shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    ((2, 3, 8, 8), [2, 2], [2, 2], [0, 0], False, True, None),
    ((2, 3, 9, 10), [3, 3], [2, 2], [1, 1], False, True, None),
    ((2, 3, 9, 10), [3, 3], [2, 2], [1, 1], False, False, None),
    ((1, 2, 9, 10), [3, 2], [2, 3], [1, 1], True, True, None),
    ((1, 2, 9, 10), [3, 2], [2, 3], [1, 1], True, False, None),
    ((1, 2, 9, 10), [3, 3], [2, 2], [1, 0], True, True, 5),
    ((3, 7, 7), [7, 7], [], [0, 0], False, True, None),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("case", range(len(AVG_POOL_2D)))
def test_avg_pool2d(case, dtype):
    x = sample(AVG_POOL_2D[case][0], dtype)
    expected = aten.avg_pool2d.default(x, *AVG_POOL_2D[case][1:])
    check(call("aten::avg_pool2d.out", x, *AVG_POOL_2D[case][1:], out_like=expected), expected)


@pytest.mark.parametrize(
    "ceil_mode,count_include_pad,divisor", [(False, True, None), (True, False, None), (True, True, 3)]
)
def test_avg_pool3d_and_1d(ceil_mode, count_include_pad, divisor):
    x = sample((1, 2, 5, 6, 7))
    args = ([2, 3, 3], [2, 2, 1], [1, 1, 1], ceil_mode, count_include_pad, divisor)
    expected = aten.avg_pool3d.default(x, *args)
    check(call("aten::avg_pool3d.out", x, *args, out_like=expected), expected)
    x = sample((2, 3, 11))
    args = ([3], [2], [1], ceil_mode, count_include_pad)
    expected = aten.avg_pool1d.default(x, *args)
    check(call("aten::avg_pool1d.out", x, *args, out_like=expected), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "shape,output_size",
    [
        ((2, 3, 8, 8), [4, 4]),
        ((2, 3, 7, 7), [1, 1]),
        ((1, 2, 10, 9), [3, 4]),
        ((3, 5, 7), [5, 2]),
        ((1, 1, 4, 4), [6, 5]),
    ],
)
def test_adaptive_avg_pool2d(shape, output_size, dtype):
    x = sample(shape, dtype)
    expected = aten._adaptive_avg_pool2d.default(x, output_size)
    check(call("aten::_adaptive_avg_pool2d.out", x, output_size, out_like=expected), expected)


def test_adaptive_avg_pool3d():
    x = sample((1, 2, 5, 7, 6))
    expected = aten._adaptive_avg_pool3d.default(x, [2, 3, 6])
    check(call("aten::_adaptive_avg_pool3d.out", x, [2, 3, 6], out_like=expected), expected)


NEAREST_2D = [
    # input shape, output size, scale factors
    ((2, 3, 4, 5), [8, 10], None),
    ((2, 3, 4, 5), [7, 3], None),
    ((1, 2, 5, 5), None, [2.0, 2.0]),
    ((1, 2, 5, 6), None, [1.7, 0.6]),
    ((1, 2, 6, 6), None, [3.0, 5.0]),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.uint8])
@pytest.mark.parametrize("case", range(len(NEAREST_2D)))
def test_upsample_nearest2d_vec(case, dtype):
    shape, size, factors = NEAREST_2D[case]
    x = sample(shape) if dtype.is_floating_point else torch.randint(0, 255, shape, dtype=dtype)
    x = x.to(dtype)
    expected = aten.upsample_nearest2d.vec(x, size, factors)
    check(call("aten::upsample_nearest2d.vec_out", x, size, factors, out_like=expected), expected, exact=True)


def test_upsample_vec_one_scale_factor_stands_for_every_axis():
    """torch wants one factor per axis; one given alone is used for both, as a float (1.5, not 1)."""
    x = sample((1, 2, 4, 5))
    expected = aten.upsample_nearest2d.vec(x, None, [1.5, 1.5])
    check(call("aten::upsample_nearest2d.vec_out", x, None, [1.5], out_like=expected), expected, exact=True)
    expected = aten.upsample_bilinear2d.vec(x, None, False, [1.5, 1.5])
    check(call("aten::upsample_bilinear2d.vec_out", x, None, False, [1.5], out_like=expected), expected)


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("scales", [False, True])
def test_upsample_nearest_1d_2d_3d(exact, scales):
    prefix = "_upsample_nearest_exact" if exact else "upsample_nearest"
    cases = [
        ((2, 3, 7), [12], [1.8]),
        ((1, 2, 5, 6), [9, 4], [1.9, 0.7]),
        ((1, 2, 3, 4, 5), [5, 9, 3], [1.7, 2.3, 0.6]),
    ]
    for shape, size, factors in cases:
        x = sample(shape)
        s = factors if scales else [None] * len(size)
        expected = getattr(aten, f"{prefix}{len(size)}d").default(x, size, *s)
        got = call(f"aten::{prefix}{len(size)}d.out", x, size, *s, out_like=expected)
        check(got, expected, exact=True)


BILINEAR = [
    ((2, 3, 4, 5), [8, 10], None),
    ((2, 3, 4, 5), [7, 3], None),
    ((1, 2, 5, 6), None, [1.7, 0.6]),
    ((1, 2, 6, 6), None, [2.0, 2.0]),
    ((1, 1, 1, 4), [3, 1], None),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("case", range(len(BILINEAR)))
def test_upsample_bilinear2d_vec(case, align_corners, dtype):
    shape, size, factors = BILINEAR[case]
    x = sample(shape, dtype)
    expected = aten.upsample_bilinear2d.vec(x, size, align_corners, factors)
    got = call("aten::upsample_bilinear2d.vec_out", x, size, align_corners, factors, out_like=expected)
    check(got, expected)


@pytest.mark.parametrize("align_corners", [False, True])
def test_upsample_linear_1d_2d_3d(align_corners):
    cases = [
        ((2, 3, 7), [12], [1.8]),
        ((1, 2, 5, 6), [9, 4], [1.9, 0.7]),
        ((1, 2, 3, 4, 5), [5, 9, 3], [1.7, 2.3, 0.6]),
    ]
    names = {1: "upsample_linear1d", 2: "upsample_bilinear2d", 3: "upsample_trilinear3d"}
    for shape, size, factors in cases:
        for scales in ([None] * len(size), factors):
            x = sample(shape)
            expected = getattr(aten, names[len(size)]).default(x, size, align_corners, *scales)
            got = call(f"aten::{names[len(size)]}.out", x, size, align_corners, *scales, out_like=expected)
            check(got, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16, torch.bool])
@pytest.mark.parametrize(
    "shape,pad,value",
    [
        ((2, 3, 4), [1, 2], 0.0),
        ((2, 3, 4), [1, 2, 0, 3], 1.5),
        ((2, 3, 4), [-1, 2, 1, -2], 2.0),
        ((2, 3, 4, 5), [1, 1, 2, 2, 3, 0], 1.0),
        ((3, 4), [0, 0], 0.0),
    ],
)
def test_constant_pad_nd(shape, pad, value, dtype):
    x = sample(shape) if dtype.is_floating_point else torch.randint(0, 2, shape)
    x = x.to(dtype)
    expected = aten.constant_pad_nd.default(x, pad, value)
    check(call("aten::constant_pad_nd.out", x, pad, value, out_like=expected), expected, exact=True)


@pytest.mark.parametrize("mode", ["reflection", "replication"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
@pytest.mark.parametrize(
    "shape,padding",
    [
        ((2, 5), [2, 3]),
        ((2, 3, 5), [4, 1]),
        ((3, 4, 5), [1, 2, 3, 0]),
        ((2, 3, 4, 5), [2, 2, 1, 3]),
        ((2, 3, 4, 5), [0, 1, 2, 3, 1, 2]),
        ((1, 2, 3, 4, 5), [1, 2, 2, 1, 2, 0]),
    ],
)
def test_reflection_and_replication_pad(shape, padding, dtype, mode):
    x = sample(shape, dtype)
    name = f"{mode}_pad{len(padding) // 2}d"
    expected = getattr(aten, name).default(x, padding)
    check(call(f"aten::{name}.out", x, padding, out_like=expected), expected, exact=True)


def test_reflection_pad_rejects_padding_not_smaller_than_input():
    with pytest.raises(ValueError, match="smaller"):
        KERNELS["aten::reflection_pad1d.out"][0](np.zeros((1, 3), np.float32), [3, 0], np.zeros((1, 6), np.float32))


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding_mode", [0, 1, 2])
@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_grid_sampler_2d(mode, padding_mode, align_corners, dtype):
    x = sample((2, 3, 5, 7), dtype)
    grid = (torch.rand(2, 4, 6, 2) * 2.6 - 1.3).to(dtype)
    expected = aten.grid_sampler_2d.default(x, grid, mode, padding_mode, align_corners)
    check(call("aten::grid_sampler_2d.out", x, grid, mode, padding_mode, align_corners, out_like=expected), expected)


def test_grid_sampler_2d_rejects_bicubic():
    with pytest.raises(ValueError, match="bicubic"):
        KERNELS["aten::grid_sampler_2d.out"][0](
            np.zeros((1, 1, 2, 2), np.float32), np.zeros((1, 1, 1, 2), np.float32), 2, 0, False, np.zeros((1, 1, 1, 1))
        )
