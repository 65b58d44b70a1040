"""GELU and softmax are declared once: every runtime's step is the op layer's, on either tier, and it agrees
with torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.runtime import policy
from edgetorch.runtime.kernels.registry import lookup
from edgetorch.runtime.ops import activation


def _x(shape, seed=0):
    return (3 * np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)


@pytest.mark.parametrize("tier", [False, True])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_step_is_the_portable_kernels_and_matches_torch(tier, approximate, set_policy):
    if tier and not policy.compiled_tier():
        pytest.skip("numba is not installed (pip install edgetorch[fast])")
    set_policy(compiled=tier)
    x = _x((37, 129))
    y = np.empty_like(x)
    activation.gelu(x, y, approximate)()
    kernel_out = lookup("aten::gelu.out")[0](x, approximate, np.empty_like(x))
    np.testing.assert_array_equal(y, kernel_out)
    want = torch.nn.functional.gelu(torch.from_numpy(x), approximate=approximate).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("tier", [False, True])
def test_softmax_step_is_the_portable_kernels_and_matches_torch(tier, set_policy):
    if tier and not policy.compiled_tier():
        pytest.skip("numba is not installed (pip install edgetorch[fast])")
    set_policy(compiled=tier)
    x = _x((6, 11, 197), 1)
    x[0, 0, 3] = np.nan
    y = np.empty_like(x)
    activation.softmax(x, y)()
    kernel_out = lookup("aten::_softmax.out")[0](x, -1, False, np.empty_like(x))
    np.testing.assert_array_equal(y, kernel_out)
    assert np.isnan(y[0, 0]).all() and not np.isnan(y[0, 1:]).any()
    want = torch.softmax(torch.from_numpy(x), -1).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-7)


def test_steps_may_run_in_place(set_policy):
    for tier in (False, policy.compiled_tier()):
        set_policy(compiled=tier)
        x = _x((5, 64), 2)
        want = np.empty_like(x)
        activation.gelu(x, want)()
        activation.gelu(x, x)()
        np.testing.assert_array_equal(x, want)
