"""Reduction kernels against PyTorch eager: each kernel is called the way the executor calls it (schema arguments
positionally, planned outs last) on NumPy copies of the torch inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from edgetorch.errors import InvalidArgumentError
from edgetorch.runtime.kernels.registry import KERNELS
from tests.runtime.kernels._oracle import NUMPY_OF, to_numpy

aten = torch.ops.aten

CODE_OF = {torch.float32: 6, torch.float64: 7, torch.float16: 5, torch.int32: 3, torch.int64: 4}
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
SHAPES = [(), (5,), (3, 4), (2, 3, 5)]


def planned(t: torch.Tensor, extra: int = 0) -> np.ndarray:
    """An out buffer for a result like ``t``; with ``extra`` > 0 a larger flat buffer, as dynamic shapes plan."""
    dtype = NUMPY_OF[t.dtype]
    if extra:
        return np.full(t.numel() + extra, 99, dtype)
    return np.full(tuple(t.shape), 99, dtype)


def make(shape, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """A random tensor of ``shape``/``dtype`` with values that make reductions interesting but not overflow."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    low = 0 if dtype == torch.uint8 else -4
    return torch.randint(low, 5, shape, generator=g).to(dtype)


def check(got: np.ndarray, want: torch.Tensor, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """``got`` equals torch's ``want`` in dtype and shape, and in value within tolerance for floats."""
    assert got.dtype == np.dtype(NUMPY_OF[want.dtype]), (got.dtype, want.dtype)
    assert got.shape == tuple(want.shape), (got.shape, tuple(want.shape))
    if want.dtype.is_floating_point:
        if want.dtype in (torch.float16, torch.bfloat16):
            rtol, atol = 1e-2, 1e-2
        np.testing.assert_allclose(got.astype(np.float64), want.double().numpy(), rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want.numpy())


def call(name: str, *args):
    """Call the registered kernel ``name`` with NumPy conversions of any tensor arguments."""
    fn, nargs = KERNELS[name]
    assert len(args) == nargs, f"{name} takes {nargs} arguments, the test gave {len(args)}"
    return fn(*[to_numpy(a) if isinstance(a, torch.Tensor) else a for a in args])


def dims_for(shape):
    """Interesting dim arguments for a tensor of ``shape``: all, one (negative too), several."""
    if not shape:
        return [None, [], [0], [-1]]
    options = [None, [], [0], [-1]]
    if len(shape) > 1:
        options.append([0, -1])
    return options


CASES = [(s, d, k) for s in SHAPES for d in dims_for(s) for k in (False, True)]


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool])
@pytest.mark.parametrize("shape,dim,keepdim", CASES)
def test_sum(shape, dim, keepdim, dtype):
    x = make(shape, dtype)
    want = aten.sum.dim_IntList(x, dim, keepdim)
    check(call("aten::sum.IntList_out", x, dim, keepdim, None, planned(want)), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "src,dtype", [(torch.int8, torch.float32), (torch.float32, torch.float64), (torch.int32, torch.int32)]
)
def test_sum_with_dtype(src, dtype):
    x = make((3, 4), src)
    want = torch.sum(x, [1], dtype=dtype)
    check(call("aten::sum.IntList_out", x, [1], False, CODE_OF[dtype], planned(want)), want)


def test_sum_of_empty_is_zero():
    x = torch.zeros(2, 0)
    for dim in ([1], None):
        want = aten.sum.dim_IntList(x, dim)
        check(call("aten::sum.IntList_out", x, dim, False, None, planned(want)), want)
    want = torch.sum(x)
    check(call("aten::sum.out", x, None, planned(want)), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape,dim,keepdim", CASES)
def test_mean(shape, dim, keepdim, dtype):
    x = make(shape, dtype)
    want = aten.mean.dim(x, dim, keepdim)
    check(call("aten::mean.out", x, dim, keepdim, None, planned(want)), want)


@pytest.mark.parametrize("src", [torch.int32, torch.float16])
def test_mean_dtype(src):
    x = make((4, 6), src)
    want = torch.mean(x, dtype=torch.float32)
    check(call("aten::mean.dtype_out", x, 6, planned(want)), want)
    want = torch.mean(x, [0], dtype=torch.float64)
    check(call("aten::mean.out", x, [0], False, 7, planned(want)), want)


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool])
@pytest.mark.parametrize("shape,dim,keepdim", CASES)
@pytest.mark.parametrize("op", ["amax", "amin"])
def test_amax_amin(op, shape, dim, keepdim, dtype):
    x = make(shape, dtype)
    dim = [] if dim is None else dim
    want = getattr(aten, op)(x, dim, keepdim)
    check(call(f"aten::{op}.out", x, dim, keepdim, planned(want)), want)


@pytest.mark.parametrize("op", ["amax", "amin", "max", "min", "argmax", "argmin"])
def test_nan_propagates(op):
    x = torch.tensor([[1.0, float("nan"), 3.0], [2.0, 5.0, -1.0]])
    if op in ("amax", "amin"):
        want = getattr(aten, op)(x, [1])
        got = call(f"aten::{op}.out", x, [1], False, planned(want))
    elif op in ("argmax", "argmin"):
        want = getattr(aten, op)(x, 1)
        got = call(f"aten::{op}.out", x, 1, False, planned(want))
    else:
        values, indices = getattr(aten, op).dim(x, 1)
        got, got_i = call(f"aten::{op}.dim_{op}", x, 1, False, planned(values), planned(indices))
        check(got_i, indices)
        want = values
    check(got, want)


@pytest.mark.parametrize("op", ["amax", "max.unary_out", "argmax"])
def test_reducing_nothing_without_identity_fails(op):
    x = np.zeros((2, 0), np.float32)
    out = np.zeros((2,), np.float32)
    with pytest.raises(InvalidArgumentError, match="empty"):
        if op == "amax":
            KERNELS["aten::amax.out"][0](x, [1], False, out)
        elif op == "argmax":
            KERNELS["aten::argmax.out"][0](x, None, False, out.astype(np.int64))
        else:
            KERNELS["aten::max.unary_out"][0](x, np.zeros((), np.float32))


def test_amax_of_empty_batch_is_empty():
    x = torch.zeros(0, 3)
    want = aten.amax(x, [1])
    check(call("aten::amax.out", x, [1], False, planned(want)), want)


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_dim(op, shape, keepdim, dtype):
    x = make(shape, dtype)
    for dim in (0, -1):
        values, indices = getattr(aten, op).dim(x, dim, keepdim)
        got = call(f"aten::{op}.dim_{op}", x, dim, keepdim, planned(values), planned(indices))
        assert isinstance(got, tuple)
        check(got[0], values)
        check(got[1], indices)


def test_max_dim_first_index_on_ties():
    x = torch.tensor([[1, 3, 3], [2, 2, 1], [0, 0, 0]])
    for op in ("max", "min"):
        values, indices = getattr(aten, op).dim(x, 1)
        got = call(f"aten::{op}.dim_{op}", x, 1, False, planned(values), planned(indices))
        check(got[1], indices)


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_unary(op, shape, dtype):
    x = make(shape, dtype)
    want = getattr(aten, op).default(x)
    check(call(f"aten::{op}.unary_out", x, planned(want)), want)


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dim", [None, 0, -1])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_argmax_argmin(op, shape, dim, keepdim, dtype):
    x = make(shape, dtype)
    want = getattr(aten, op)(x, dim, keepdim)
    check(call(f"aten::{op}.out", x, dim, keepdim, planned(want)), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8, torch.uint8, torch.bool])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op", ["any", "all"])
def test_any_all(op, shape, keepdim, dtype):
    x = make(shape, dtype)
    x = x * (torch.rand(shape, generator=torch.Generator().manual_seed(1)) > 0.2).to(x.dtype)
    fn = getattr(aten, op)
    for dim in (0, -1):
        want = fn.dim(x, dim, keepdim)
        check(call(f"aten::{op}.out", x, dim, keepdim, planned(want)), want)
    for dims in (None, [], [0], [-1, 0][: len(shape)]):
        want = fn.dims(x, dims, keepdim)
        check(call(f"aten::{op}.dims_out", x, dims, keepdim, planned(want)), want)
    want = fn.default(x)
    check(call(f"aten::{op}.all_out", x, planned(want)), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int8, torch.int32, torch.bool])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_prod(shape, keepdim, dtype):
    x = make(shape, dtype)
    for dim in (0, -1):
        want = aten.prod.dim_int(x, dim, keepdim)
        check(call("aten::prod.int_out", x, dim, keepdim, None, planned(want)), want)
    want = aten.prod.default(x)
    check(call("aten::prod.out", x, None, planned(want)), want)
    want = aten.prod.default(x, dtype=torch.float64)
    check(call("aten::prod.out", x, 7, planned(want)), want)


VAR_CASES = [(s, d, k, c) for (s, d, k) in CASES if s for c in (None, 0, 1, 2.5)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape,dim,keepdim,correction", VAR_CASES)
def test_var_std(shape, dim, keepdim, correction, dtype):
    x = make(shape, dtype)
    for op in ("var", "std"):
        want = getattr(aten, op).correction(x, dim, correction=correction, keepdim=keepdim)
        check(call(f"aten::{op}.correction_out", x, dim, correction, keepdim, planned(want)), want)
        pair = getattr(aten, f"{op}_mean").correction(x, dim, correction=correction, keepdim=keepdim)
        got = call(f"aten::{op}_mean.correction_out", x, dim, correction, keepdim, planned(pair[0]), planned(pair[1]))
        check(got[0], pair[0])
        check(got[1], pair[1])
    for unbiased in (False, True):
        want = aten.var.dim(x, dim, unbiased, keepdim)
        check(call("aten::var.out", x, dim, unbiased, keepdim, planned(want)), want)
        want = aten.std.dim(x, dim, unbiased, keepdim)
        check(call("aten::std.out", x, dim, unbiased, keepdim, planned(want)), want)


def test_var_with_too_few_samples_is_inf_or_nan():
    x = torch.tensor([[1.0, 2.0], [3.0, 3.0]])
    for correction in (2, 3):
        want = aten.var.correction(x, [1], correction=correction)
        check(call("aten::var.correction_out", x, [1], correction, False, planned(want)), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int8, torch.int32, torch.bool])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_cumsum_cumprod(op, shape, dtype):
    x = make(shape, dtype)
    for dim in (0, -1):
        want = getattr(aten, op)(x, dim)
        check(call(f"aten::{op}.out", x, dim, None, planned(want)), want, rtol=1e-4, atol=1e-5)
    want = getattr(aten, op)(x, -1, dtype=torch.float64)
    check(call(f"aten::{op}.out", x, -1, 7, planned(want)), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
@pytest.mark.parametrize("op", ["cummax", "cummin"])
def test_cummax_cummin(op, dtype):
    x = torch.tensor([[1, 3, 3, 2, 5, 5], [4, 1, 1, 0, 2, 0]]).to(dtype)
    if dtype.is_floating_point:
        x[1, 3] = float("nan")
    for dim in (0, 1):
        values, indices = getattr(aten, op)(x, dim)
        got = call(f"aten::{op}.out", x, dim, planned(values), planned(indices))
        check(got[0], values)
        check(got[1], indices)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 5)])
def test_logsumexp(shape, dtype):
    x = make(shape, dtype) * 30
    for dim in ([0], [-1], [0, -1])[: 2 + (len(shape) > 1)]:
        for keepdim in (False, True):
            want = aten.logsumexp(x, dim, keepdim)
            check(call("aten::logsumexp.out", x, dim, keepdim, planned(want)), want)
    want = aten.logcumsumexp(x, -1)
    check(call("aten::logcumsumexp.out", x, -1, planned(want)), want)


def test_logsumexp_of_minus_inf_row():
    x = torch.tensor([[-math.inf, -math.inf], [1.0, math.inf]])
    want = aten.logsumexp(x, [1])
    check(call("aten::logsumexp.out", x, [1], False, planned(want)), want)


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.0, math.inf])
@pytest.mark.parametrize("rows", [(3, 4), (30, 27)])
@pytest.mark.parametrize("mode", [None, 1, 2])
def test_cdist(p, rows, mode):
    x1 = make((2, rows[0], 5), torch.float32)
    x2 = make((rows[1], 5), torch.float32, seed=1).expand(2, rows[1], 5).contiguous()
    want = aten._cdist_forward(x1, x2, p, mode)
    check(call("aten::_cdist_forward.out", x1, x2, p, mode, planned(want)), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 0.5, math.inf])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pdist(p, dtype):
    x = make((6, 4), dtype)
    want = aten._pdist_forward(x, p)
    check(call("aten::_pdist_forward.out", x, p, planned(want)), want, rtol=1e-4, atol=1e-5)


def test_count_nonzero_and_nansum_and_aminmax():
    x = torch.tensor([[0.0, 1.5, float("nan")], [2.0, 0.0, -3.0]])
    want = aten.count_nonzero.dim_IntList(x, [1])
    check(call("aten::count_nonzero.dim_IntList_out", x, [1], planned(want)), want)
    want = aten.count_nonzero(x)
    check(call("aten::count_nonzero.out", x, None, planned(want)), want)
    want = aten.nansum(x, [0])
    check(call("aten::nansum.out", x, [0], False, None, planned(want)), want)
    lo, hi = aten.aminmax(x[1], dim=0, keepdim=True)
    got = call("aten::aminmax.out", x[1], 0, True, planned(lo), planned(hi))
    check(got[0], lo)
    check(got[1], hi)


def test_duplicate_and_out_of_range_dims_fail():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(InvalidArgumentError, match="twice"):
        KERNELS["aten::sum.IntList_out"][0](x, [1, -1], False, None, np.zeros(2, np.float32))
    with pytest.raises(InvalidArgumentError, match="out of range"):
        KERNELS["aten::sum.IntList_out"][0](x, [2], False, None, np.zeros(2, np.float32))


@pytest.mark.parametrize(
    "name,args,reference",
    [
        ("aten::sum.IntList_out", ([1], False, None), lambda x: aten.sum.dim_IntList(x, [1])),
        ("aten::mean.out", ([-1], True, None), lambda x: aten.mean.dim(x, [-1], True)),
        ("aten::amax.out", ([0], False), lambda x: aten.amax(x, [0])),
        ("aten::cumsum.out", (1, None), lambda x: aten.cumsum(x, 1)),
        ("aten::var.correction_out", ([1], None, False), lambda x: aten.var.correction(x, [1])),
    ],
)
def test_dynamic_shape_resizes_a_larger_out(name, args, reference):
    x = make((3, 5), torch.float32)
    want = reference(x)
    out = planned(want, extra=17)
    got = call(name, x, *args, out)
    check(got, want)
    assert np.shares_memory(got, out), "the result must live in the planned buffer"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("shape,dim,keepdim", [c for c in CASES if c[1] != []])
@pytest.mark.parametrize("ord", [0.0, 1.0, 2.0, 3.0, 0.5, math.inf, -math.inf])
def test_vector_norm(ord, shape, dim, keepdim, dtype):
    x = make(shape, dtype)
    want = aten.linalg_vector_norm(x, ord, dim, keepdim)
    check(call("aten::linalg_vector_norm.out", x, ord, dim, keepdim, None, planned(want)), want, rtol=1e-4)
    if dim:
        want = aten.norm.ScalarOpt_dim(x, ord, dim, keepdim)
        check(call("aten::norm.out", x, ord, dim, keepdim, planned(want)), want, rtol=1e-4)


def test_norm_with_dtype_and_over_everything():
    x = make((3, 4), torch.float32)
    want = aten.norm.ScalarOpt_dim_dtype(x, 2.0, [1], False, dtype=torch.float64)
    check(call("aten::norm.dtype_out", x, 2.0, [1], False, 7, planned(want)), want)
    want = aten.norm.Scalar(x, 3.0)
    check(call("aten::norm.Scalar_out", x, 3.0, planned(want)), want)
    want = aten.norm.ScalarOpt_dtype(x, None, dtype=torch.float64)
    check(call("aten::norm.ScalarOpt_dtype_out", x, None, 7, planned(want)), want)
