"""Sort and selection kernels against PyTorch eager, called the way the executor calls them (schema arguments
positionally, planned outs last) on NumPy copies of the torch inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.errors import InvalidArgumentError
from edgetorch.runtime.kernels.registry import KERNELS
from tests.runtime.kernels._oracle import NUMPY_OF, to_numpy

aten = torch.ops.aten
NAN = float("nan")

DTYPES = list(NUMPY_OF)
SHAPES = [(), (7,), (4, 6), (2, 3, 5)]


def planned(t: torch.Tensor, extra: int = 0) -> np.ndarray:
    """An out buffer for a result like ``t``; with ``extra`` > 0 a larger flat buffer, as dynamic shapes plan."""
    shape = (t.numel() + extra,) if extra else tuple(t.shape)
    return np.zeros(shape, NUMPY_OF[t.dtype])


def check(got: np.ndarray, want: torch.Tensor) -> None:
    """Exact equality (selection never computes new values), NaN equal to NaN."""
    assert got.dtype == np.dtype(NUMPY_OF[want.dtype]), (got.dtype, want.dtype)
    assert got.shape == tuple(want.shape), (got.shape, tuple(want.shape))
    np.testing.assert_array_equal(got.astype(np.float64), to_numpy(want).astype(np.float64))


def call(name: str, *args):
    fn, nargs = KERNELS[name]
    assert len(args) == nargs, f"{name} takes {nargs} arguments, the test gave {len(args)}"
    return fn(*[to_numpy(a) if isinstance(a, torch.Tensor) else a for a in args])


def with_ties(shape, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Small integers (many ties) in ``dtype``, with some NaN for floating dtypes."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    x = torch.randint(0 if dtype == torch.uint8 else -3, 4, shape, generator=g).to(dtype)
    if dtype.is_floating_point and x.numel() > 2:
        x.view(-1)[[1, -1]] = NAN
    return x


def distinct(shape, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Distinct values in ``dtype`` (no ties), so any correct selection has one answer."""
    n = max(1, int(np.prod(shape)))
    values = torch.randperm(n, generator=torch.Generator().manual_seed(seed)) - (0 if dtype == torch.uint8 else n // 2)
    return values.reshape(shape).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("descending", [False, True])
def test_sort_stable(shape, descending, dtype):
    x = with_ties(shape, dtype)
    for dim in (0, -1):
        values, indices = aten.sort.stable(x, stable=True, dim=dim, descending=descending)
        got = call("aten::sort.values_stable", x, True, dim, descending, planned(values), planned(indices))
        assert isinstance(got, tuple)
        check(got[0], values)
        check(got[1], indices)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_default_orders_values_and_indices_consistently(descending, dtype):
    x = with_ties((5, 9), dtype)
    values, indices = aten.sort(x, -1, descending)
    got_values, got_indices = call("aten::sort.values", x, -1, descending, planned(values), planned(indices))
    check(got_values, values)
    gathered = np.take_along_axis(to_numpy(x), got_indices, -1)
    np.testing.assert_array_equal(gathered.astype(np.float64), got_values.astype(np.float64))


def test_sort_puts_nan_above_infinity():
    x = torch.tensor([1.0, NAN, float("inf"), -float("inf"), NAN, 0.0])
    for descending in (False, True):
        values, indices = aten.sort.stable(x, stable=True, descending=descending)
        got = call("aten::sort.values_stable", x, True, -1, descending, planned(values), planned(indices))
        check(got[0], values)
        check(got[1], indices)


@pytest.mark.parametrize("descending", [False, True])
def test_argsort_and_msort(descending):
    x = with_ties((4, 6), torch.float32)
    want = aten.argsort.stable(x, stable=True, dim=1, descending=descending)
    check(call("aten::argsort.stable_out", x, True, 1, descending, planned(want)), want)
    want = aten.msort(x)
    check(call("aten::msort.out", x, planned(want)), want)


@pytest.mark.parametrize("dtype", DTYPES[:-1])
@pytest.mark.parametrize("shape", [(7,), (4, 6), (2, 3, 5)])
@pytest.mark.parametrize("largest", [False, True])
@pytest.mark.parametrize("k", [0, 1, 3, "all"])
def test_topk(shape, largest, k, dtype):
    x = distinct(shape, dtype)
    for dim in (0, -1):
        kk = x.shape[dim] if k == "all" else min(k, x.shape[dim])
        values, indices = aten.topk(x, kk, dim, largest, True)
        got = call("aten::topk.values", x, kk, dim, largest, True, planned(values), planned(indices))
        check(got[0], values)
        check(got[1], indices)


def test_topk_unsorted_returns_the_same_set():
    x = distinct((3, 10), torch.float32)
    values, indices = aten.topk(x, 4, -1, True, False)
    got = call("aten::topk.values", x, 4, -1, True, False, planned(values), planned(indices))
    np.testing.assert_array_equal(np.sort(got[0], -1), np.sort(values.numpy(), -1))
    np.testing.assert_array_equal(np.take_along_axis(to_numpy(x), got[1], -1), got[0])


@pytest.mark.parametrize("largest", [False, True])
def test_topk_with_nan_and_ties(largest):
    x = torch.tensor([[3.0, NAN, 1.0, 3.0, -2.0, 1.0], [0.0, 0.0, 5.0, NAN, NAN, 4.0]])
    values, _ = aten.topk(x, 3, -1, largest)
    got_values, got_indices = call("aten::topk.values", x, 3, -1, largest, True, planned(values), planned(_))
    check(got_values, values)
    np.testing.assert_array_equal(np.take_along_axis(to_numpy(x), got_indices, -1), got_values)


def test_topk_rejects_k_beyond_the_dim():
    with pytest.raises(InvalidArgumentError, match="between 0 and 4"):
        KERNELS["aten::topk.values"][0](np.zeros(4, np.float32), 5, -1, True, True, np.zeros(5), np.zeros(5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_kthvalue(shape, keepdim, dtype):
    x = distinct(shape, dtype)
    for dim in (0, -1):
        n = x.shape[dim] if x.ndim else 1
        for k in sorted({1, (n + 1) // 2, n}):
            values, indices = aten.kthvalue(x, k, dim, keepdim)
            got = call("aten::kthvalue.values", x, k, dim, keepdim, planned(values), planned(indices))
            check(got[0], values)
            check(got[1], indices)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op", ["median", "nanmedian"])
def test_median(op, shape, keepdim, dtype):
    x = distinct(shape, dtype)
    if dtype.is_floating_point and x.numel() > 3:
        x.view(-1)[[0, 3]] = NAN
    fn = getattr(aten, op)
    for dim in (0, -1):
        values, indices = fn.dim(x, dim, keepdim)
        got = call(f"aten::{op}.dim_values", x, dim, keepdim, planned(values), planned(indices))
        check(got[0], values)
        check(got[1], indices)
    want = fn.default(x)
    check(call(f"aten::{op}.out", x, planned(want)), want)


def test_nanmedian_of_all_nan_slice():
    x = torch.tensor([[NAN, NAN], [1.0, NAN]])
    values, indices = aten.nanmedian.dim(x, 1)
    got = call("aten::nanmedian.dim_values", x, 1, False, planned(values), planned(indices))
    check(got[0], values)
    check(got[1][1:], indices[1:])  # the index into an all-NaN slice is unspecified


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.int8, torch.bool])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_mode(shape, keepdim, dtype):
    x = with_ties(shape, dtype, seed=3).nan_to_num(0.0) if dtype.is_floating_point else with_ties(shape, dtype, 3)
    for dim in (0, -1):
        values, indices = aten.mode(x, dim, keepdim)
        got = call("aten::mode.values", x, dim, keepdim, planned(values), planned(indices))
        check(got[0], values)
        check(got[1], indices)


@pytest.mark.parametrize("op", ["kthvalue", "median", "mode"])
def test_selection_from_an_empty_dim_fails(op):
    x = np.zeros((2, 0), np.float32)
    fn = KERNELS[f"aten::{op}.{'dim_values' if op == 'median' else 'values'}"][0]
    args = (1,) if op == "kthvalue" else ()
    with pytest.raises(InvalidArgumentError):
        fn(x, *args, 1, False, np.zeros(2, np.float32), np.zeros(2, np.int64))


def test_dynamic_shape_sort_and_topk_resize_larger_outs():
    x = distinct((3, 5), torch.float32)
    values, indices = aten.sort(x, -1, True)
    outs = planned(values, extra=9), planned(indices, extra=9)
    got = call("aten::sort.values", x, -1, True, *outs)
    for g, w, o in zip(got, (values, indices), outs):
        check(g, w)
        assert np.shares_memory(g, o)
    values, indices = aten.topk(x, 2)
    got = call("aten::topk.values", x, 2, -1, True, True, planned(values, 6), planned(indices, 6))
    check(got[0], values)
    check(got[1], indices)
