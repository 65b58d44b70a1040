"""GEMM epilogues are declared once (ops/epilogue.py): the XNNPACK runtime's layer epilogue is the op layer's,
each builder gives the same bits on both tiers where the formulation is exact, and it agrees with torch."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.runtime import epilogues
from edgetorch.errors import InvalidArgumentError
from edgetorch.runtime import policy
from edgetorch.runtime.ops import epilogue


def _x(shape, seed=0):
    return (3 * np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)


def _tier(tier, set_policy):
    if tier and not policy.compiled_tier():
        pytest.skip("numba is not installed (pip install edgetorch[fast])")
    set_policy(compiled=tier)


@pytest.mark.parametrize("tier", [False, True])
@pytest.mark.parametrize("channels", [3, 24, 130])
@pytest.mark.parametrize("bounds", [(0.0, 6.0), (0.0, math.inf), epilogue.NO_CLAMP])
def test_bias_clamp_is_the_xnnpack_layers_and_matches_torch(tier, channels, bounds, set_policy):
    _tier(tier, set_policy)
    x, bias = _x((48, channels)), _x((channels,), 1)
    x[0, 0] = np.nan
    y = x.copy()
    for step in epilogue.bias_clamp(y, bias, *bounds):
        step()
    via_layer = x.copy()
    for step in epilogues.bias_act_steps(via_layer, {7: bias}, 7, bounds):
        step()
    np.testing.assert_array_equal(y, via_layer)
    set_policy(compiled=False)
    numpy_only = x.copy()
    for step in epilogue.bias_clamp(numpy_only, bias, *bounds):
        step()
    np.testing.assert_array_equal(y, numpy_only)  # the compiled pass has NumPy's bits
    want = torch.clamp(torch.from_numpy(x) + torch.from_numpy(bias), *bounds).numpy()
    np.testing.assert_array_equal(y, want)


def test_no_bias_no_clamp_is_no_step():
    y = _x((4, 5))
    assert epilogue.bias_clamp(y, None, *epilogue.NO_CLAMP) == []
    assert epilogues.bias_act_steps(y, {}, xs.INVALID_VALUE_ID, epilogue.NO_CLAMP) == []


@pytest.mark.parametrize("tier", [False, True])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("inplace", [False, True])
def test_bias_gelu_matches_torch(tier, approximate, inplace, set_policy):
    _tier(tier, set_policy)
    x, bias = _x((33, 70)), _x((70,), 2)
    src = x.copy()
    out = src if inplace else np.empty_like(x)
    epilogue.bias_gelu(src, bias, out, approximate)()
    want = torch.nn.functional.gelu(torch.from_numpy(x) + torch.from_numpy(bias), approximate=approximate)
    np.testing.assert_allclose(out, want.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("tier", [False, True])
@pytest.mark.parametrize("into", ["new", "x", "residual"])
def test_bias_residual_is_exact_on_both_tiers(tier, into, set_policy):
    _tier(tier, set_policy)
    x, bias, residual = _x((21, 40)), _x((40,), 3), _x((21, 40), 4)
    xs_, rs = x.copy(), residual.copy()
    out = {"new": np.empty_like(x), "x": xs_, "residual": rs}[into]
    epilogue.bias_residual(xs_, bias, rs, out)()
    want = (torch.from_numpy(residual) + (torch.from_numpy(x) + torch.from_numpy(bias))).numpy()
    np.testing.assert_array_equal(out, want)


def test_bias_residual_refuses_a_partly_overlapping_output(set_policy):
    set_policy(compiled=False)
    buf = _x((10, 8))
    with pytest.raises(InvalidArgumentError, match="overlapping"):
        epilogue.bias_residual(_x((9, 8)), _x((8,)), buf[:9], buf[1:])
