"""``where`` and ``masked_fill`` with a broadcast condition that is uniform (all true or all false, as the
attention row mask of an unmasked model) take one copy: the result is still every bit of the chosen side."""

from __future__ import annotations

import numpy as np
import pytest

from edgetorch.runtime.kernels.registry import lookup


@pytest.mark.parametrize("fill", ["none", "all", "one"])
def test_where_with_a_broadcast_condition(fill):
    rng = np.random.default_rng(0)
    cond = np.zeros((1, 3, 64, 1), bool) if fill != "all" else np.ones((1, 3, 64, 1), bool)
    if fill == "one":
        cond[0, 1, 7, 0] = True
    a = rng.standard_normal((1, 3, 64, 64)).astype(np.float32)
    b = rng.standard_normal((1, 3, 64, 64)).astype(np.float32)
    a[0, 0, 0, :3] = [-0.0, np.nan, np.inf]
    b[0, 0, 0, :3] = [np.nan, -0.0, -np.inf]
    fn, _ = lookup("aten::where.self_out")
    got = fn(cond, a, b, np.empty_like(a))
    assert np.array_equal(got.view(np.uint32), np.where(cond, a, b).view(np.uint32))
    fill_value = 2.5
    got = lookup("aten::masked_fill.Scalar_out")[0](b, cond, fill_value, np.empty_like(b))
    assert np.array_equal(got.view(np.uint32), np.where(cond, np.float32(fill_value), b).view(np.uint32))
