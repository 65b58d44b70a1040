"""Shape kernels against torch's functional ops."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.runtime.kernels import shape
from edgetorch.runtime.memory import TensorResizeError
from tests.runtime.kernels._out_variants import (
    ALL_DTYPES,
    T,
    assert_kernels_take_schema_arguments,
    check_out_variant,
    run_kernel,
)


def test_every_shape_kernel_takes_the_schema_arguments():
    assert_kernels_take_schema_arguments(shape.__name__, {"aten::cat.out", "aten::slice_copy.Tensor_out"})


A = T((2, 3, 4))
CASES = [
    ("aten::view_copy.out", [A, [4, -1]]),
    ("aten::view_copy.out", [T((0, 3)), [3, 0]]),
    ("aten::_unsafe_view.out", [A, [6, 4]]),
    ("aten::alias_copy.out", [A]),
    ("aten::detach_copy.out", [T(())]),
    ("aten::lift_fresh_copy.out", [A]),
    ("aten::permute_copy.out", [A, [2, 0, 1]]),
    ("aten::permute_copy.out", [A, [-1, -3, 1]]),
    ("aten::expand_copy.out", [T((3, 1)), [2, -1, 4], False]),
    ("aten::expand_copy.out", [T(()), [2, 3], False]),
    ("aten::slice_copy.Tensor_out", [A, 1, 0, 2, 1]),
    ("aten::slice_copy.Tensor_out", [A, -1, None, None, 3]),
    ("aten::slice_copy.Tensor_out", [A, 2, -3, -1, 1]),
    ("aten::slice_copy.Tensor_out", [A, 0, -100, 100, 1]),
    ("aten::slice_copy.Tensor_out", [A, 1, 2, 1, 1]),
    ("aten::select_copy.int_out", [A, 1, -1]),
    ("aten::select_copy.int_out", [T((5,)), 0, 3]),
    ("aten::narrow_copy.out", [A, 2, 1, 2]),
    ("aten::narrow_copy.out", [A, -1, -3, 3]),
    ("aten::squeeze_copy.out", [T((1, 3, 1, 2))]),
    ("aten::squeeze_copy.dim_out", [T((1, 3, 1)), -1]),
    ("aten::squeeze_copy.dim_out", [T((2, 3)), 0]),
    ("aten::squeeze_copy.dims_out", [T((1, 3, 1, 1)), [0, -1, 1]]),
    ("aten::squeeze_copy.dim_out", [T(()), 0]),
    ("aten::unsqueeze_copy.out", [A, -1]),
    ("aten::unsqueeze_copy.out", [A, 0]),
    ("aten::unsqueeze_copy.out", [T(()), 0]),
    ("aten::t_copy.out", [T((2, 5))]),
    ("aten::t_copy.out", [T((5,))]),
    ("aten::transpose_copy.int_out", [A, 0, -1]),
    ("aten::flip.out", [A, [0, -1]]),
    ("aten::flip.out", [A, []]),
    ("aten::roll.out", [A, [1, -2], [0, 2]]),
    ("aten::roll.out", [A, [5], []]),
    ("aten::as_strided_copy.out", [T((4, 5)), [3, 2], [5, 2], 1]),
    ("aten::as_strided_copy.out", [T((4, 5)), [2, 3], [1, 0], None]),
    ("aten::diagonal_copy.out", [A, 0, 1, 2]),
    ("aten::diagonal_copy.out", [A, 1, -1, 0]),
    ("aten::diagonal_copy.out", [T((3, 3)), -5, 0, 1]),
    ("aten::tril.out", [T((4, 5)), 0]),
    ("aten::tril.out", [A, -1]),
    ("aten::triu.out", [T((4, 5)), 2]),
    ("aten::triu.out", [A, -1]),
    ("aten::unfold_copy.out", [T((2, 7)), 1, 3, 2]),
    ("aten::unfold_copy.out", [A, 0, 2, 1]),
    ("aten::unfold_copy.out", [T(()), 0, 1, 1]),
    ("aten::cat.out", [[T((2, 3)), T((1, 3)), T((0, 3))], 0]),
    ("aten::cat.out", [[A, A], -1]),
    ("aten::cat.out", [[T((0,)), T((2, 3)), T((0,))], 1]),
    ("aten::concat.out", [[T((2,)), T((3,))], 0]),
    ("aten::stack.out", [[A, A, A], 1]),
    ("aten::stack.out", [[T((2,)), T((2,))], -1]),
    ("aten::split_copy.Tensor_out", [T((7, 2)), 3, 0]),
    ("aten::split_copy.Tensor_out", [A, 2, -1]),
    ("aten::split_copy.Tensor_out", [T((0, 3)), 2, 0]),
    ("aten::split_with_sizes_copy.out", [A, [1, 0, 2], 1]),
    ("aten::unbind_copy.int_out", [A, -2]),
    ("aten::repeat.out", [T((2, 3)), [2, 1, 3]]),
    ("aten::repeat.out", [T((2, 3)), [0, 2]]),
    ("aten::repeat.out", [T(()), [3]]),
]


def case_id(case: tuple) -> str:
    name, args = case
    return name.split("::")[1] + str([a.shape if isinstance(a, T) else a for a in args])


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_shape_kernel_matches_torch(case, dtype):
    check_out_variant(*case, dtype)


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_shape_kernel_with_exactly_planned_out(case):
    check_out_variant(*case, torch.float32, exact=True)


@pytest.mark.parametrize(
    "dtypes",
    [
        (torch.int32, torch.float32),
        (torch.bool, torch.int64),
        (torch.float16, torch.float32),
        (torch.uint8, torch.int8),
    ],
    ids=str,
)
def test_cat_promotes_to_the_out_dtype(dtypes):
    check_out_variant("aten::cat.out", [[T((2, 3), dtypes[0]), T((1, 3), dtypes[1])], 0], torch.float32)


def test_repeat_interleave_counts():
    repeats = torch.tensor([2, 0, 3, 1])
    check_out_variant("aten::repeat_interleave.Tensor_out", [repeats, None], torch.int64)
    check_out_variant("aten::repeat_interleave.Tensor_out", [repeats.to(torch.int32), 6], torch.int64)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_view_as_real_and_back(dtype):
    z = torch.complex(torch.randn(2, 3), torch.randn(2, 3)).to(dtype)
    check_out_variant("aten::view_as_real_copy.out", [z], dtype)
    check_out_variant("aten::view_as_complex_copy.out", [torch.view_as_real(z).contiguous()], dtype)


def test_out_smaller_than_the_result_is_refused():
    x = np.arange(6, dtype=np.float32)
    with pytest.raises(TensorResizeError, match="does not fit its planned slot"):
        run_kernel("aten::repeat.out", [x, [2]], np.empty(11, np.float32))


def test_dynamic_shape_reuses_one_slot():
    out = np.empty(24, np.float32)
    for n in (4, 1, 3):
        x = np.arange(n * 6, dtype=np.float32).reshape(n, 6)
        got = run_kernel("aten::permute_copy.out", [x, [1, 0]], out)
        assert got.shape == (6, n) and np.shares_memory(got, out)
        np.testing.assert_array_equal(got, x.T)


@pytest.mark.parametrize("shape", [(512, 256), (300, 256), (256, 300)])
def test_large_transpose_tiles_match_numpy(shape):
    """Matrices of 64K+ elements whose row stride is a multiple of 1 KB are transposed 16 rows at a time."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = run_kernel("aten::permute_copy.out", [x, [1, 0]], np.empty(x.size, np.float32))
    np.testing.assert_array_equal(got, x.T)
    got = run_kernel("aten::permute_copy.out", [x[:, ::2], [-1, -2]], np.empty(x.size // 2, np.float64))
    np.testing.assert_array_equal(got, x[:, ::2].T.astype(np.float64))


@pytest.mark.parametrize(
    "name, args",
    [
        ("aten::select_copy.int_out", [np.zeros((2, 3)), 2, 0]),
        ("aten::as_strided_copy.out", [np.zeros((2, 3)), [2, 2], [3, 2], 1]),
        ("aten::split_with_sizes_copy.out", [np.zeros((5,)), [2, 2], 0]),
        ("aten::narrow_copy.out", [np.zeros((5,)), 0, 3, 3]),
    ],
)
def test_bad_arguments_raise(name, args):
    with pytest.raises((IndexError, ValueError)):
        run_kernel(name, args, [np.empty(10)] * 2 if "split" in name else np.empty(10))


def test_split_with_wrong_out_count_raises():
    with pytest.raises(ValueError, match="produces 3 tensors"):
        run_kernel("aten::split_copy.Tensor_out", [np.zeros((5,)), 2, 0], ([np.empty(2), np.empty(2)],))
