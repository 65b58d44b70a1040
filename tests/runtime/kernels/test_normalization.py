"""Softmax and normalisation kernels against PyTorch eager, called the way the executor calls them (schema
arguments positionally, planned outs last) on NumPy copies of the torch inputs."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch

from edgetorch.runtime.kernels.registry import KERNELS

aten = torch.ops.aten

NUMPY_OF = {
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.float16: np.float16,
    torch.bfloat16: ml_dtypes.bfloat16,
}
FLOATS = list(NUMPY_OF)


def to_numpy(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.numpy().copy()


def planned(t: torch.Tensor, extra: int = 0) -> np.ndarray:
    """An out buffer for a result like ``t``; with ``extra`` > 0 a larger flat buffer, as dynamic shapes plan."""
    shape = (t.numel() + extra,) if extra else tuple(t.shape)
    return np.full(shape, 7, NUMPY_OF[t.dtype])


def check(got: np.ndarray, want: torch.Tensor, tol: float = 1e-5) -> None:
    assert got.dtype == np.dtype(NUMPY_OF[want.dtype]), (got.dtype, want.dtype)
    assert got.shape == tuple(want.shape), (got.shape, tuple(want.shape))
    if want.dtype in (torch.float16, torch.bfloat16):
        tol = 2e-2
    np.testing.assert_allclose(got.astype(np.float64), want.double().numpy(), rtol=tol, atol=tol, equal_nan=True)


def call(name: str, *args):
    fn, nargs = KERNELS[name]
    assert len(args) == nargs, f"{name} takes {nargs} arguments, the test gave {len(args)}"
    return fn(*[to_numpy(a) if isinstance(a, torch.Tensor) else a for a in args])


def randn(shape, dtype=torch.float32, seed=0, scale=1.0):
    return (torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)


SOFTMAX_SHAPES = [((), 0), ((7,), 0), ((4, 9), -1), ((4, 9), 0), ((2, 3, 5, 8), -1), ((2, 3, 5, 8), 1)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,dim", SOFTMAX_SHAPES)
@pytest.mark.parametrize("op", ["_softmax", "_log_softmax"])
def test_softmax(op, shape, dim, dtype):
    x = randn(shape, dtype, scale=20.0)  # large logits: the max shift must prevent overflow
    want = getattr(aten, op)(x, dim, False)
    check(call(f"aten::{op}.out", x, dim, False, planned(want)), want)


@pytest.mark.parametrize("op", ["_softmax", "_log_softmax"])
def test_softmax_half_to_float(op):
    x = randn((3, 6), torch.float16, scale=5.0)
    want = getattr(aten, op)(x.float(), -1, False)  # torch's CPU kernel refuses half_to_float; this is its meaning
    check(call(f"aten::{op}.out", x, -1, True, planned(want)), want, tol=1e-3)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_with_dtype(op):
    x = randn((3, 6))
    want = getattr(aten, op).int(x, 1, torch.float64)
    check(call(f"aten::{op}.int_out", x, 1, 7, planned(want)), want, tol=1e-12)


@pytest.mark.parametrize("op", ["_softmax", "_log_softmax"])
def test_softmax_with_infinities(op):
    x = torch.tensor([[-math.inf, -math.inf, -math.inf], [0.0, -math.inf, 1.0], [1.0, 2.0, math.inf]])
    want = getattr(aten, op)(x, 1, False)
    check(call(f"aten::{op}.out", x, 1, False, planned(want)), want)


def test_softmax_writes_into_a_larger_planned_out():
    x = randn((3, 5))
    want = aten._softmax(x, -1, False)
    out = planned(want, extra=11)
    got = call("aten::_softmax.out", x, -1, False, out)
    check(got, want)
    assert np.shares_memory(got, out)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,normalized", [((4, 8), [8]), ((2, 3, 16), [16]), ((2, 3, 4, 5), [4, 5]), ((6,), [6])])
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm(shape, normalized, affine, dtype):
    x = randn(shape, dtype, scale=3.0) + 2
    weight = randn(normalized, dtype, seed=1) if affine else None
    bias = randn(normalized, dtype, seed=2) if affine else None
    want = aten.native_layer_norm(x, normalized, weight, bias, 1e-5)
    got = call("aten::native_layer_norm.out", x, normalized, weight, bias, 1e-5, *map(planned, want))
    assert isinstance(got, tuple) and len(got) == 3
    for g, w in zip(got, want):
        check(g, w, tol=1e-4)


def test_layer_norm_dynamic_rows():
    x = randn((3, 8))
    want = aten.native_layer_norm(x, [8], None, None, 1e-6)
    outs = [planned(w, extra=40) for w in want]
    got = call("aten::native_layer_norm.out", x, [8], None, None, 1e-6, *outs)
    for g, w, o in zip(got, want, outs):
        check(g, w, tol=1e-4)
        assert np.shares_memory(g, o)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,group", [((2, 6, 4, 4), 3), ((1, 4, 5), 2), ((3, 8, 2, 2), 8), ((2, 4), 1)])
@pytest.mark.parametrize("affine", [False, True])
def test_group_norm(shape, group, affine, dtype):
    x = randn(shape, dtype, scale=2.0) + 1
    n, c, hxw = shape[0], shape[1], math.prod(shape[2:])
    weight = randn((c,), dtype, seed=1) if affine else None
    bias = randn((c,), dtype, seed=2) if affine else None
    want = aten.native_group_norm(x, weight, bias, n, c, hxw, group, 1e-5)
    got = call("aten::native_group_norm.out", x, weight, bias, n, c, hxw, group, 1e-5, *map(planned, want))
    for g, w in zip(got, want):
        check(g, w, tol=1e-4)


def _batch_norm_inputs(shape, dtype, affine):
    c = shape[1]
    x = randn(shape, dtype, scale=2.0) + 1
    weight = randn((c,), dtype, seed=1) if affine else None
    bias = randn((c,), dtype, seed=2) if affine else None
    running_mean = randn((c,), dtype, seed=3)
    running_var = randn((c,), dtype, seed=4).abs() + 0.5
    return x, weight, bias, running_mean, running_var


BN_SHAPES = [(4, 3), (2, 3, 5), (2, 4, 3, 3)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", BN_SHAPES)
@pytest.mark.parametrize("affine", [False, True])
def test_batch_norm_no_training(shape, affine, dtype):
    x, weight, bias, rm, rv = _batch_norm_inputs(shape, dtype, affine)
    want = aten._native_batch_norm_legit_no_training(x, weight, bias, rm, rv, 0.1, 1e-5)
    got = call(
        "aten::_native_batch_norm_legit_no_training.out", x, weight, bias, rm, rv, 0.1, 1e-5, *map(planned, want)
    )
    for g, w in zip(got, want):
        check(g, w, tol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", BN_SHAPES)
@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("training", [False, True])
def test_batch_norm_legit(shape, affine, training, dtype):
    x, weight, bias, rm, rv = _batch_norm_inputs(shape, dtype, affine)
    rm_np, rv_np = to_numpy(rm), to_numpy(rv)
    want = aten._native_batch_norm_legit(x, weight, bias, rm, rv, training, 0.1, 1e-5)  # updates rm, rv in place
    fn = KERNELS["aten::_native_batch_norm_legit.out"][0]
    args = [to_numpy(x), *(None if t is None else to_numpy(t) for t in (weight, bias))]
    got = fn(*args, rm_np, rv_np, training, 0.1, 1e-5, *map(planned, want))
    for g, w in zip(got, want):
        check(g, w, tol=1e-4)
    np.testing.assert_allclose(rm_np, rm.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rv_np, rv.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", BN_SHAPES)
@pytest.mark.parametrize("affine", [False, True])
def test_batch_norm_no_stats(shape, affine):
    x, weight, bias, _, _ = _batch_norm_inputs(shape, torch.float32, affine)
    want = aten._native_batch_norm_legit.no_stats(x, weight, bias, True, 0.1, 1e-5)
    got = call("aten::_native_batch_norm_legit.no_stats_out", x, weight, bias, True, 0.1, 1e-5, *map(planned, want))
    for g, w in zip(got, want):
        check(g, w, tol=1e-4)


def test_native_batch_norm_training_without_running_stats():
    x, weight, bias, _, _ = _batch_norm_inputs((3, 2, 4), torch.float32, True)
    want = aten.native_batch_norm(x, weight, bias, None, None, True, 0.1, 1e-5)
    got = call("aten::native_batch_norm.out", x, weight, bias, None, None, True, 0.1, 1e-5, *map(planned, want))
    for g, w in zip(got, want):
        check(g, w, tol=1e-4)
