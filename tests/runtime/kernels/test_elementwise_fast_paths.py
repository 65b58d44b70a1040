"""The fast formulations of element-wise kernels, on inputs big enough to take them, against torch.

Large inputs go through the bitwise select (``where``, ``masked_fill``, erf's pieces) and the blocked
multi-pass formulas (erf, gelu), whose block boundaries small tests never cross; special values check
that the mask-free formulas of ``leaky_relu`` and ``elu`` keep torch's NaN/inf/zero results.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgetorch.runtime.kernels.elementwise import select_into
from edgetorch.runtime.kernels.registry import KERNELS
from tests.runtime.kernels.test_elementwise import ALL, BF16, FLOATS, SPECIALS, check, ids, sample

BIG = (70_001,)  # more than one 64K block, not a multiple of it, above the bitwise-select threshold


def with_specials(dtype: np.dtype, shape=BIG, infinities: bool = True) -> np.ndarray:
    x = sample(shape, dtype, low=-6, high=6)
    specials = SPECIALS if infinities else SPECIALS[np.isfinite(SPECIALS) | np.isnan(SPECIALS)]
    x.reshape(-1)[: specials.size] = specials.astype(dtype)
    return x


@pytest.mark.parametrize("dtype", FLOATS, ids=ids(FLOATS))
@pytest.mark.parametrize("name, params", [("erf", ()), ("gelu", ("none",)), ("gelu", ("tanh",))])
def test_blocked_formulas(name: str, params: tuple, dtype: np.dtype) -> None:
    # torch's gelu of +-inf is nan or inf depending on which of its code paths runs: not a spec to match.
    check(f"aten::{name}.out", with_specials(dtype, infinities=name == "erf"), *params)


@pytest.mark.parametrize("dtype", FLOATS, ids=ids(FLOATS))
@pytest.mark.parametrize("slope", [0.01, 0.0, -0.3, 1.0, 2.5, float("inf")])
def test_leaky_relu_slopes(slope: float, dtype: np.dtype) -> None:
    check("aten::leaky_relu.out", with_specials(dtype, (64,)), slope)
    check("aten::leaky_relu.out", with_specials(dtype), slope)


@pytest.mark.parametrize("dtype", FLOATS, ids=ids(FLOATS))
@pytest.mark.parametrize("params", [(1, 1, 1), (0.5, 2, 1.5), (1.6732632423543772, 1.0507009873554805, 1)])
def test_elu_specials(params: tuple, dtype: np.dtype) -> None:
    check("aten::elu.out", with_specials(dtype, (64,)), *params)


@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
def test_where_and_masked_fill_bitwise(dtype: np.dtype) -> None:
    cond = sample(BIG, np.dtype(np.bool_), seed=3)
    check("aten::where.self_out", cond, sample(BIG, dtype, seed=1), sample(BIG, dtype, seed=2))
    check("aten::where.self_out", cond[:10_001, None], sample((10_001, 7), dtype), sample((7,), dtype))
    check("aten::masked_fill.Scalar_out", sample(BIG, dtype), cond, True if dtype == np.bool_ else 3)
    if dtype.kind == "f" or dtype == BF16:
        check("aten::masked_fill.Scalar_out", with_specials(dtype), cond, float("nan"))


@pytest.mark.parametrize("out_is", ["a", "b", "both"])
def test_select_into_when_out_is_an_input(out_is: str) -> None:
    rng = np.random.default_rng(0)
    cond = rng.random(10_000) < 0.5
    a, b = rng.standard_normal(10_000).astype(np.float32), rng.standard_normal(10_000).astype(np.float32)
    if out_is == "both":
        b = a
    want = np.where(cond, a, b)
    out = {"a": a, "b": b, "both": a}[out_is]
    assert np.array_equal(select_into(out, cond, a, b), want)


def test_select_keeps_nan_payload_and_signed_zero() -> None:
    a = np.full(5000, -0.0, np.float32)
    b = np.frombuffer(np.full(5000, 0x7FC01234, np.uint32).tobytes(), np.float32).copy()
    cond = np.arange(5000) % 3 == 0
    got = select_into(np.empty(5000, np.float32), cond, a, b).view(np.uint32)
    assert np.array_equal(got, np.where(cond, a.view(np.uint32), b.view(np.uint32)))


def test_where_out_aliases_condition_source() -> None:
    fn, _ = KERNELS["aten::masked_fill.Scalar_out"]
    x = np.random.default_rng(1).standard_normal(9000).astype(np.float32)
    mask = (x > 0).view(np.uint8).view(np.bool_)
    want = np.where(mask, np.float32(7), x)
    assert np.array_equal(fn(x, mask, 7.0, x), want)  # out is self
