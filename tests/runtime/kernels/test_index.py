"""Indexing kernels (advanced indexing, gather/scatter, masks, nonzero) against torch's functional ops."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.runtime.kernels import index
from tests.runtime.kernels._out_variants import (
    ALL_DTYPES,
    NUMERIC_DTYPES,
    T,
    assert_kernels_take_schema_arguments,
    assert_same,
    check_out_variant,
    materialize,
    run_kernel,
    to_numpy,
)

FLOAT_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def ints(values: list, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """A fixed index tensor."""
    return torch.tensor(values, dtype=dtype)


def mask(shape: tuple[int, ...]) -> T:
    """A random boolean mask placeholder."""
    return T(shape, torch.bool)


def test_every_index_kernel_takes_the_schema_arguments():
    assert_kernels_take_schema_arguments(index.__name__, {"aten::index.Tensor_out", "aten::index_put_"})


A = T((3, 4, 5))
CASES = [
    # index.Tensor: None entries, masks, broadcasting index tensors, torch's placement of the indexed axes.
    ("aten::index.Tensor_out", [A, [ints([0, 2, 1, 2])]], ALL_DTYPES),
    ("aten::index.Tensor_out", [A, [None, ints([-1, 0])]], ALL_DTYPES),
    ("aten::index.Tensor_out", [A, [None, None, ints([4, 0], torch.int32)]], ALL_DTYPES),
    ("aten::index.Tensor_out", [A, [ints([[0], [2]]), None, ints([1, 2, 3])]], ALL_DTYPES),
    ("aten::index.Tensor_out", [A, [None, ints([[0], [1]]), ints([[2, 3, 4]])]], ALL_DTYPES),
    ("aten::index.Tensor_out", [A, [mask((3,))]], ALL_DTYPES),
    ("aten::index.Tensor_out", [A, [mask((3, 4))]], ALL_DTYPES),
    ("aten::index.Tensor_out", [A, [None, mask((4,))]], ALL_DTYPES),
    ("aten::index.Tensor_out", [A, [ints([], torch.int64)]], ALL_DTYPES),
    ("aten::index.Tensor_out", [A, [None, T((4,), torch.uint8)]], ALL_DTYPES),
    ("aten::index_put.out", [A, [ints([0, 2])], T((4, 5)), False], ALL_DTYPES),
    ("aten::index_put.out", [A, [None, ints([1, 3]), ints([0, 4])], T((3, 2)), False], ALL_DTYPES),
    ("aten::index_put.out", [A, [mask((3, 4))], T(()), False], ALL_DTYPES),
    ("aten::index_put.out", [A, [ints([0, 2, 0, 0])], T((4, 4, 5)), True], NUMERIC_DTYPES),
    ("aten::index_put.out", [A, [None, mask((4, 5))], T((3, 1)), True], NUMERIC_DTYPES),
    ("aten::index_put.out", [A, [None, ints([[1], [1]]), ints([2, 2])], T((3, 2, 2)), True], NUMERIC_DTYPES),
    ("aten::index_select.out", [A, 1, ints([3, 0, 3])], ALL_DTYPES),
    ("aten::index_select.out", [A, -1, ints([4, 1], torch.int32)], ALL_DTYPES),
    ("aten::index_select.out", [A, 0, ints(2)], ALL_DTYPES),
    ("aten::index_select.out", [T(()), 0, ints([0])], ALL_DTYPES),
    ("aten::gather.out", [A, 2, ints([[[4, 0], [1, 1]], [[0, 0], [3, 2]]]), False], ALL_DTYPES),
    ("aten::gather.out", [A, -3, ints([[[2, 0, 1]]]), False], ALL_DTYPES),
    ("aten::scatter.src_out", [T((3, 4)), 0, ints([[0, 1, 2, 0], [2, 0, 1, 1]]), T((2, 5))], ALL_DTYPES),
    ("aten::scatter.src_out", [T((3, 4)), -1, ints([[3, 0], [1, 2]]), T((3, 4))], ALL_DTYPES),
    ("aten::scatter.value_out", [T((3, 4)), 1, ints([[3, 0], [1, 2]]), 3], ALL_DTYPES),
    ("aten::scatter.value_out", [T((3, 4)), 0, ints([[1, 2, 0]]), 1.5], FLOAT_DTYPES),
    ("aten::scatter.reduce_out", [T((3, 4)), 0, ints([[0, 0, 2, 1], [0, 0, 2, 2]]), T((2, 4)), "add"], NUMERIC_DTYPES),
    ("aten::scatter.reduce_out", [T((3, 4)), 1, ints([[1, 1], [3, 3]]), T((2, 2)), "multiply"], NUMERIC_DTYPES),
    ("aten::scatter.value_reduce_out", [T((3, 4)), 1, ints([[1, 1], [3, 3]]), 2, "add"], NUMERIC_DTYPES),
    ("aten::scatter_add.out", [T((3, 4)), 0, ints([[0, 0, 2, 1], [0, 0, 2, 2]]), T((2, 4))], NUMERIC_DTYPES),
    ("aten::scatter_add.out", [T((5,)), 0, ints([4, 4, 4, 0]), T((6,))], NUMERIC_DTYPES),
    ("aten::index_copy.out", [T((5, 3)), 0, ints([4, 1]), T((2, 3))], ALL_DTYPES),
    ("aten::index_copy.out", [T((1, 2, 6, 4)), -2, ints([3, 4, 5]), T((1, 2, 3, 4))], ALL_DTYPES),
    ("aten::index_add.out", [T((5, 3)), 0, ints([4, 1, 4]), T((3, 3)), 1], NUMERIC_DTYPES),
    ("aten::index_add.out", [T((5, 3)), -1, ints([2, 2]), T((5, 2)), 2], NUMERIC_DTYPES),
    ("aten::index_fill.int_Scalar_out", [T((4, 3)), 0, ints([3, 1]), 2], ALL_DTYPES),
    ("aten::index_fill.int_Tensor_out", [T((4, 3)), -1, ints([0]), T(())], ALL_DTYPES),
    ("aten::select_scatter.out", [A, T((3, 5)), 1, -1], ALL_DTYPES),
    ("aten::select_scatter.out", [A, T((4, 5)), 0, 2], ALL_DTYPES),
    ("aten::slice_scatter.out", [A, T((3, 4, 2)), 2, 1, None, 2], ALL_DTYPES),
    ("aten::slice_scatter.out", [A, T((2, 4, 5)), 0, -2, 100, 1], ALL_DTYPES),
    ("aten::slice_scatter.out", [A, T((3, 0, 5)), 1, 3, 1, 1], ALL_DTYPES),
    ("aten::masked_scatter.out", [A, mask((4, 5)), T((60,))], ALL_DTYPES),
    ("aten::masked_scatter.out", [T((4, 1)), mask((2, 4, 3)), T((30,))], ALL_DTYPES),
    ("aten::masked_select.out", [A, mask((4, 5))], ALL_DTYPES),
    ("aten::masked_select.out", [T((4, 1)), mask((2, 4, 3))], ALL_DTYPES),
    ("aten::nonzero.out", [A], ALL_DTYPES),
    ("aten::nonzero.out", [T((0, 3))], ALL_DTYPES),
    ("aten::nonzero.out", [T(())], ALL_DTYPES),
]
SCATTER_REDUCE = [
    ("aten::scatter_reduce.two_out", [T((3, 4)), 0, ints([[0, 0, 2, 1], [0, 0, 2, 2]]), T((2, 4)), reduce, include])
    for reduce in ("sum", "prod", "mean", "amax", "amin")
    for include in (True, False)
]


def case_id(case: tuple) -> str:
    name, args, _ = case
    shown = [a.shape if isinstance(a, T) else "ix" if isinstance(a, torch.Tensor) else a for a in args]
    return name.split("::")[1] + str(shown).replace("'", "")


def dtype_cases(cases: list) -> list:
    return [pytest.param(c[0], c[1], d, id=f"{case_id(c)}-{d}") for c in cases for d in c[2]]


@pytest.mark.parametrize("name, args, dtype", dtype_cases(CASES))
def test_index_kernel_matches_torch(name, args, dtype):
    check_out_variant(name, args, dtype)


@pytest.mark.parametrize("name, args, dtype", dtype_cases([(c[0], c[1], [torch.float32]) for c in CASES]))
def test_index_kernel_with_exactly_planned_out(name, args, dtype):
    check_out_variant(name, args, dtype, exact=True)


@pytest.mark.parametrize("name, args", SCATTER_REDUCE, ids=[case_id((*c, None)) for c in SCATTER_REDUCE])
@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=str)
def test_scatter_reduce_matches_torch(name, args, dtype):
    low_precision = dtype in (torch.float16, torch.bfloat16) and args[4] == "mean"
    check_out_variant(name, args, dtype, atol=0.05 if low_precision else 0.0)


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16], ids=str)
def test_index_put_in_place_updates_self(accumulate, dtype):
    self_t, values = materialize([T((4, 3)), T((3,))], dtype)
    indices = [None, ints([2, 0, 2])] if not accumulate else [ints([1, 1, 3])]
    values = values if not accumulate else values.reshape(3, 1)
    self_np = to_numpy(self_t)
    got = run_kernel("aten::index_put_", [self_np, to_numpy(indices), to_numpy(values), accumulate], ())
    assert got is self_np
    assert_same(self_np, torch.ops.aten.index_put_(self_t, indices, values, accumulate))


def test_kv_cache_update_with_index_copy_in_place():
    cache = np.zeros((1, 2, 8, 4), np.float32)
    for pos in range(3):
        step = np.full((1, 2, 1, 4), pos + 1, np.float32)
        run_kernel("aten::index_copy.out", [cache, 2, np.array([pos]), step], cache)
    np.testing.assert_array_equal(cache[0, 0, :, 0], [1, 2, 3, 0, 0, 0, 0, 0])


def test_nonzero_resizes_one_slot_as_the_count_changes():
    out = np.full((12, 2), -1, np.int64)
    for density in (0.9, 0.1, 0.5):
        x = torch.rand(3, 4, generator=torch.Generator().manual_seed(int(density * 10))) < density
        got = run_kernel("aten::nonzero.out", [x.numpy()], out)
        assert np.shares_memory(got, out)
        assert_same(got, torch.nonzero(x))


def test_masked_select_resizes_to_the_selected_count():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = run_kernel("aten::masked_select.out", [x, x % 5 == 0], np.empty(12, np.float32))
    np.testing.assert_array_equal(got, [0, 5, 10])


def test_masked_scatter_with_too_small_source_raises():
    with pytest.raises(ValueError, match="selects 4 elements"):
        run_kernel("aten::masked_scatter.out", [np.zeros(4), np.ones(4, bool), np.ones(3)], np.empty(4))


def test_unknown_scatter_reduction_raises():
    args = [np.zeros(4), 0, np.array([1]), np.ones(1), "median", True]
    with pytest.raises(ValueError, match="unsupported scatter reduction 'median'"):
        run_kernel("aten::scatter_reduce.two_out", args, np.empty(4))
