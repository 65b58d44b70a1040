"""Gradient kernels (convolution, pooling, embedding, layer/group norm) against torch's own backward ops."""

import numpy as np
import pytest
import torch

from edgetorch.runtime.kernels.registry import KERNELS
from tests.runtime.kernels._oracle import call, check, to_numpy

aten = torch.ops.aten
DTYPES = [torch.float32, torch.float64]
TOL = {
    torch.float32: dict(rtol=1e-4, atol=1e-4),
    torch.float64: dict(rtol=1e-10, atol=1e-10),
    torch.float16: dict(rtol=1e-2, atol=2e-2),
    torch.bfloat16: dict(rtol=2e-2, atol=1e-1),
}


def _check_all(got: tuple, expected: tuple, mask: list[bool]) -> None:
    for result, want, wanted in zip(got, expected, mask):
        if wanted:
            check(result, want, tolerances=TOL)


CONV = [
    # input shape, weight shape, stride, padding, dilation, transposed, output_padding, groups
    ((2, 3, 8, 8), (4, 3, 3, 3), [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
    ((2, 4, 9, 7), (6, 2, 3, 2), [2, 1], [1, 2], [1, 2], False, [0, 0], 2),
    ((1, 4, 10, 10), (4, 1, 3, 3), [2, 2], [1, 1], [2, 2], False, [0, 0], 4),
    ((2, 3, 11), (5, 3, 4), [3], [2], [1], False, [0], 1),
    ((1, 2, 5, 6, 4), (4, 2, 2, 3, 2), [1, 2, 1], [1, 0, 1], [1, 1, 2], False, [0, 0, 0], 1),
    ((2, 4, 5, 5), (4, 3, 3, 3), [2, 2], [1, 1], [1, 1], True, [1, 0], 1),
    ((1, 4, 4, 6), (4, 2, 2, 3), [3, 2], [0, 1], [2, 1], True, [1, 1], 2),
    ((2, 3, 7), (3, 2, 3), [2], [1], [1], True, [0], 1),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask", [[True, True, True], [True, False, True], [False, True, False]])
@pytest.mark.parametrize("case", CONV)
def test_convolution_backward(case, mask: list[bool], dtype: torch.dtype) -> None:
    shape, wshape, stride, padding, dilation, transposed, output_padding, groups = case
    x, w = torch.randn(shape, dtype=dtype), torch.randn(wshape, dtype=dtype)
    y = aten.convolution.default(x, w, None, stride, padding, dilation, transposed, output_padding, groups)
    gy = torch.randn(y.shape, dtype=dtype)
    bias_sizes = [y.shape[1]]
    args = (gy, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, mask)
    expected = aten.convolution_backward.default(*args)
    likes = tuple(torch.empty(1, dtype=dtype) if e is None else e for e in expected)
    _check_all(call("aten::convolution_backward.out", *args, out_like=likes), expected, mask)


POOL_2D = [
    # input shape, kernel, stride, padding, ceil_mode
    ((2, 3, 8, 8), [2, 2], [2, 2], [0, 0], False),
    ((2, 3, 9, 10), [3, 3], [2, 2], [1, 1], False),
    ((1, 2, 9, 10), [3, 2], [2, 3], [1, 1], True),
    ((3, 7, 6), [3, 3], [3, 2], [1, 0], True),
    ((1, 1, 5, 5), [2, 2], [], [0, 0], True),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dilation", [[1, 1], [2, 1]])
@pytest.mark.parametrize("case", POOL_2D)
def test_max_pool2d_with_indices_backward(case, dilation: list[int], dtype: torch.dtype) -> None:
    shape, kernel_size, stride, padding, ceil_mode = case
    x = torch.randn(shape, dtype=dtype)
    y, indices = aten.max_pool2d_with_indices.default(x, kernel_size, stride, padding, dilation, ceil_mode)
    args = (torch.randn(y.shape, dtype=dtype), x, kernel_size, stride, padding, dilation, ceil_mode, indices)
    expected = aten.max_pool2d_with_indices_backward.default(*args)
    check(call("aten::max_pool2d_with_indices_backward.grad_input", *args, out_like=expected), expected, tolerances=TOL)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("count_include_pad, divisor_override", [(True, None), (False, None), (True, 5)])
@pytest.mark.parametrize("case", POOL_2D)
def test_avg_pool2d_backward(case, count_include_pad: bool, divisor_override, dtype: torch.dtype) -> None:
    shape, kernel_size, stride, padding, ceil_mode = case
    x = torch.randn(shape, dtype=dtype)
    y = aten.avg_pool2d.default(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    gy = torch.randn(y.shape, dtype=dtype)
    args = (gy, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    expected = aten.avg_pool2d_backward.default(*args)
    check(call("aten::avg_pool2d_backward.grad_input", *args, out_like=expected), expected, tolerances=TOL)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, size", [((2, 3, 8, 8), [4, 4]), ((1, 2, 7, 10), [3, 4]), ((3, 5, 5), [7, 2])])
def test_adaptive_avg_pool2d_backward(shape, size: list[int], dtype: torch.dtype) -> None:
    x = torch.randn(shape, dtype=dtype)
    gy = torch.randn(aten._adaptive_avg_pool2d.default(x, size).shape, dtype=dtype)
    expected = aten._adaptive_avg_pool2d_backward.default(gy, x)
    check(call("aten::_adaptive_avg_pool2d_backward.out", gy, x, out_like=expected), expected, tolerances=TOL)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("padding_idx", [-1, 2])
@pytest.mark.parametrize("scale_grad_by_freq", [False, True])
@pytest.mark.parametrize("index_shape", [(7,), (3, 5)])
def test_embedding_dense_backward(index_shape, scale_grad_by_freq: bool, padding_idx: int, dtype) -> None:
    indices = torch.randint(0, 6, index_shape, generator=torch.Generator().manual_seed(0))
    gy = torch.randn(*index_shape, 4, dtype=dtype)
    args = (gy, indices, 6, padding_idx, scale_grad_by_freq)
    expected = aten.embedding_dense_backward.default(*args)
    check(call("aten::embedding_dense_backward.out", *args, out_like=expected), expected, tolerances=TOL)


def test_embedding_dense_backward_rejects_out_of_range_indices() -> None:
    with pytest.raises(ValueError, match=r"indices must lie in \[0, 6\)"):
        call("aten::embedding_dense_backward.out", torch.randn(2, 4), torch.tensor([1, 6]), 6, -1, False,
             out_like=torch.empty(6, 4))  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape, normalized", [((2, 3, 4), [4]), ((3, 2, 5), [2, 5]), ((6,), [6])])
def test_native_layer_norm_backward(shape, normalized: list[int], affine: bool, dtype: torch.dtype) -> None:
    x = torch.randn(shape, dtype=dtype)
    weight = torch.randn(normalized, dtype=dtype) if affine else None
    bias = torch.randn(normalized, dtype=dtype) if affine else None
    _, mean, rstd = aten.native_layer_norm.default(x, normalized, weight, bias, 1e-5)
    mask = [True, affine, affine]
    args = (torch.randn(shape, dtype=dtype), x, normalized, mean, rstd, weight, bias, mask)
    expected = aten.native_layer_norm_backward.default(*args)
    likes = tuple(torch.empty(normalized, dtype=dtype) if e is None else e for e in expected)
    _check_all(call("aten::native_layer_norm_backward.out", *args, out_like=likes), expected, mask)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask", [[True, True, True], [False, True, True], [True, False, False]])
@pytest.mark.parametrize("shape, group", [((2, 6, 5), 3), ((3, 4, 2, 3), 2), ((1, 4), 4)])
def test_native_group_norm_backward(shape, group: int, mask: list[bool], dtype: torch.dtype) -> None:
    n, c, hxw = shape[0], shape[1], int(np.prod(shape[2:]))
    x, weight = torch.randn(shape, dtype=dtype), torch.randn(c, dtype=dtype)
    _, mean, rstd = aten.native_group_norm.default(x, weight, None, n, c, hxw, group, 1e-5)
    args = (torch.randn(shape, dtype=dtype), x, mean, rstd, weight, n, c, hxw, group, mask)
    expected = aten.native_group_norm_backward.default(*args)
    likes = tuple(torch.empty(1, dtype=dtype) if e is None else e for e in expected)
    _check_all(call("aten::native_group_norm_backward.out", *args, out_like=likes), expected, mask)


def test_group_norm_backward_without_weight() -> None:
    """With no weight the input gradient is the unscaled one (torch only computes it when asked for it alone)."""
    x = torch.randn(2, 4, 3, dtype=torch.float64)
    _, mean, rstd = aten.native_group_norm.default(x, None, None, 2, 4, 3, 2, 1e-5)
    args = (torch.randn(2, 4, 3, dtype=torch.float64), x, mean, rstd, None, 2, 4, 3, 2, [True, False, False])
    expected = aten.native_group_norm_backward.default(*args)[0]
    got = KERNELS["aten::native_group_norm_backward.out"][0](
        *[to_numpy(a) if isinstance(a, torch.Tensor) else a for a in args], *(np.empty((2, 4, 3)),) * 3
    )[0]
    check(got, expected, tolerances=TOL)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision(dtype: torch.dtype) -> None:
    """Half and bfloat16 gradients are computed in float32 and rounded once into the out."""
    test_convolution_backward(CONV[1], [True, True, True], dtype)
    test_convolution_backward(CONV[5], [True, True, True], dtype)
    test_max_pool2d_with_indices_backward(POOL_2D[1], [1, 1], dtype)
    test_avg_pool2d_backward(POOL_2D[2], False, None, dtype)
    test_adaptive_avg_pool2d_backward((1, 2, 7, 10), [3, 4], dtype)
    test_embedding_dense_backward((3, 5), True, 2, dtype)
    test_native_layer_norm_backward((3, 2, 5), [2, 5], True, dtype)
    test_native_group_norm_backward((3, 4, 2, 3), 2, [True, True, True], dtype)
