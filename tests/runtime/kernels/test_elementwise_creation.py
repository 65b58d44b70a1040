"""Creation and conversion kernels (fill, full, arange, linspace, rand, copies, dropout) against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import edgetorch.runtime.kernels.creation  # noqa: F401  (registers the kernels)
from edgetorch.runtime.kernels.registry import KERNELS
from tests.runtime.kernels.test_elementwise import (
    ALL,
    FLOATS,
    NUMPY_TO_TORCH,
    assert_matches,
    ids,
    run_kernel,
    sample,
    to_numpy,
    to_torch,
)

NUMERIC = [d for d in ALL if d != np.bool_]


@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
@pytest.mark.parametrize("value", [3, -2.75, True], ids=str)
@pytest.mark.parametrize("shape", [(2, 3), (), (0, 5)], ids=str)
def test_fill_and_full(dtype: np.dtype, value, shape: tuple) -> None:
    if dtype == np.uint8 and value == -2.75:
        pytest.skip("negative float into uint8 is undefined behaviour in torch")
    want = to_numpy(torch.full(shape, value, dtype=NUMPY_TO_TORCH[dtype]))
    x = sample(shape, dtype)
    assert_matches(run_kernel("aten::full.out", (list(shape), value), shape, dtype, spare=3), want)
    assert_matches(run_kernel("aten::fill.Scalar_out", (x, value), shape, dtype), want)
    assert_matches(run_kernel("aten::full_like.out", (x, value, None), shape, dtype), want)
    assert_matches(run_kernel("aten::fill.Tensor_out", (x, np.array(value, dtype)), shape, dtype), want)


@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
def test_zeros_ones_scalar_tensor(dtype: np.dtype) -> None:
    t = NUMPY_TO_TORCH[dtype]
    assert_matches(
        run_kernel("aten::zeros.out", ([2, 4],), (2, 4), dtype, spare=2), to_numpy(torch.zeros(2, 4, dtype=t))
    )
    assert_matches(run_kernel("aten::ones.out", ([3],), (3,), dtype), to_numpy(torch.ones(3, dtype=t)))
    like = sample((2, 2), dtype)
    assert_matches(
        run_kernel("aten::zeros_like.out", (like, None), (2, 2), dtype), to_numpy(torch.zeros(2, 2, dtype=t))
    )
    assert_matches(run_kernel("aten::ones_like.out", (like, None), (2, 2), dtype), to_numpy(torch.ones(2, 2, dtype=t)))
    want = to_numpy(torch.scalar_tensor(5, dtype=t))
    assert_matches(run_kernel("aten::scalar_tensor.out", (5,), (), dtype), want)


@pytest.mark.parametrize(
    "name, args", [("aten::empty.out", ([2, 3], None)), ("dim_order_ops::_empty_dim_order.out", ([2, 3], None))]
)
def test_empty_resizes_only(name: str, args: tuple) -> None:
    got = run_kernel(name, args, (2, 3), np.dtype(np.float32), spare=4)
    assert got.shape == (2, 3) and got.dtype == np.float32


@pytest.mark.parametrize("dtype", NUMERIC, ids=ids(NUMERIC))
@pytest.mark.parametrize(
    "params", [(5,), (0, 7, 2), (-3, 3, 1), (10, 0, -3), (0, 1, 0.1), (2.5, -1.2, -0.7), (1, 1, 1)], ids=str
)
def test_arange(dtype: np.dtype, params: tuple) -> None:
    if dtype.kind in "iu" and any(isinstance(p, float) for p in params):
        pytest.skip("float steps into integer tensors")
    if dtype == np.uint8 and min(params) < 0:
        pytest.skip("negative values in uint8")
    want = to_numpy(torch.arange(*params, dtype=NUMPY_TO_TORCH[dtype]))
    name, args = ("aten::arange.out", params) if len(params) == 1 else ("aten::arange.start_out", params)
    assert_matches(run_kernel(name, args, want.shape, dtype, spare=4), want)


def test_arange_rejects_a_step_going_the_wrong_way() -> None:
    with pytest.raises(ValueError, match="step"):
        run_kernel("aten::arange.start_out", (0, 5, -1), (5,), np.dtype(np.float32))


@pytest.mark.parametrize("dtype", NUMERIC, ids=ids(NUMERIC))
@pytest.mark.parametrize(
    "params", [(0, 10, 7), (-1.5, 2.25, 11), (3, -3, 4), (2, 2, 1), (0, 1, 0), (0, 100, 64)], ids=str
)
def test_linspace(dtype: np.dtype, params: tuple) -> None:
    if dtype == np.uint8 and min(params) < 0:
        pytest.skip("negative values in uint8")
    want = to_numpy(torch.linspace(*params, dtype=NUMPY_TO_TORCH[dtype]))
    assert_matches(run_kernel("aten::linspace.out", params, want.shape, dtype), want)


@pytest.mark.parametrize("dtype", FLOATS, ids=ids(FLOATS))
def test_rand_and_randn_fill_the_resized_out(dtype: np.dtype) -> None:
    uniform = run_kernel("aten::rand.out", ([50, 40],), (50, 40), dtype, spare=3).astype(np.float64)
    assert uniform.shape == (50, 40) and uniform.min() >= 0 and uniform.max() <= 1
    assert 0.45 < uniform.mean() < 0.55
    normal = run_kernel("aten::randn.out", ([50, 40],), (50, 40), dtype).astype(np.float64)
    assert abs(normal.mean()) < 0.1 and 0.9 < normal.std() < 1.1


@pytest.mark.parametrize("dst", ALL, ids=ids(ALL))
@pytest.mark.parametrize("src", ALL, ids=ids(ALL))
def test_to_copy_casts_like_torch(src: np.dtype, dst: np.dtype) -> None:
    x = sample((3, 5), src, low=-100, high=100)
    if dst == np.uint8 and src.kind in "fiV":
        x = np.abs(x.astype(np.float32)).astype(src)  # negative -> uint8 is undefined behaviour in torch
    if src.kind in "fV" and dst.kind in "iu":
        x = np.clip(x.astype(np.float32), -100, 100).astype(src)
    want = to_numpy(to_torch(x).to(NUMPY_TO_TORCH[dst]))
    for name, args in [
        ("aten::_to_copy.out", (x, False, None)),
        ("dim_order_ops::_to_dim_order_copy.out", (x, False, None)),
    ]:
        assert_matches(run_kernel(name, args, (3, 5), dst, spare=2), want)


@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
@pytest.mark.parametrize(
    "name", ["aten::lift_fresh_copy.out", "aten::detach_copy.out", "aten::alias_copy.out", "aten::clone.out"]
)
def test_copies(name: str, dtype: np.dtype) -> None:
    x = sample((4, 3), dtype)
    args = (x, None) if name == "aten::clone.out" else (x,)
    got = run_kernel(name, args, (4, 3), dtype, spare=1)
    assert_matches(got, x)
    assert not np.shares_memory(got, x)


@pytest.mark.parametrize("src_shape", [(4, 3), (3,), ()], ids=str)
def test_copy_broadcasts_and_casts(src_shape: tuple) -> None:
    self = sample((4, 3), np.dtype(np.float32))
    src = sample(src_shape, np.dtype(np.int16))
    want = to_numpy(torch.ops.aten.copy(to_torch(self), to_torch(src)))
    assert_matches(run_kernel("aten::copy.out", (self, src, False), (4, 3), np.dtype(np.float32)), want)
    fn, nargs = KERNELS["aten::copy_"]
    assert nargs == 3
    target = self.copy()
    assert fn(target, src, False) is target
    assert_matches(target, want)


@pytest.mark.parametrize("train", [False, None, True])
def test_native_dropout(train: bool | None) -> None:
    x = sample((40, 50), np.dtype(np.float32))
    fn, nargs = KERNELS["aten::native_dropout.out"]
    assert nargs == 5
    out, mask = fn(x, 0.25, train, np.empty((40, 50), np.float32), np.empty((40, 50), np.bool_))
    if train is False:
        want_out, want_mask = torch.ops.aten.native_dropout(to_torch(x), 0.25, False)
        assert_matches(out, to_numpy(want_out))
        assert_matches(mask, to_numpy(want_mask))
        return
    np.testing.assert_allclose(out[mask], x[mask] / 0.75, rtol=1e-6)
    assert not out[~mask].any()
    assert 0.2 < 1 - mask.mean() < 0.3
