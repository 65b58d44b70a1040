"""Global average pooling (edgetorch/runtime/ops/pool.py ``global_avg_pool``): the compiled kernel gives the
NumPy formulation's bits, the one-channel case keeps NumPy's pairwise reduce, bad shapes raise, and a lowered
classifier head gives the same outputs on both tiers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.backends.xnnpack import XnnpackPartitioner
from edgetorch.errors import InvalidArgumentError
from edgetorch.exir import to_edge_transform_and_lower
from edgetorch.runtime import Runtime, policy
from edgetorch.runtime.kernels import global_pool
from edgetorch.runtime.ops import pool

needs_numba = pytest.mark.skipif(
    not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])"
)


def numpy_mean(x: np.ndarray) -> np.ndarray:
    """The NumPy formulation: the reduce over the spatial axes, then the product by the reciprocal."""
    y = np.add.reduce(x, axis=tuple(range(1, x.ndim - 1)), keepdims=True)
    return np.multiply(y, x.dtype.type(1.0 / np.prod(x.shape[1:-1])))


@needs_numba
@pytest.mark.parametrize("shape", [(1, 7, 7, 1280), (2, 5, 3, 3), (1, 1, 1, 17), (1, 300, 20, 2), (2, 4, 6, 5, 7)])
@pytest.mark.parametrize("keep", [True, False])
def test_compiled_global_average_gives_numpys_bits(shape, keep, set_policy):
    x = np.random.default_rng(3).standard_normal(shape, dtype=np.float32) * np.float32(5)
    x[0, 0, 0, ..., 1] = np.nan  # a NaN stays in its channel
    want = numpy_mean(x)
    y = np.full(want.shape if keep else (shape[0], shape[-1]), 7.0, np.float32)
    taken = []
    step = global_pool.global_average_step
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(global_pool, "global_average_step", lambda *a: taken.append(a) or step(*a))
        for s in pool.global_avg_pool(x, y):
            s()
    assert len(taken) == 1
    np.testing.assert_array_equal(y.reshape(want.shape), want)
    assert np.isnan(y.reshape(shape[0], -1)[0, 1]) and not np.isnan(y.reshape(shape[0], -1)[:, 0]).any()


@pytest.mark.parametrize("compiled", [True, False])
def test_one_channel_and_the_numpy_tier_keep_numpys_reduce(compiled, set_policy):
    set_policy(compiled=compiled)
    x = np.random.default_rng(4).standard_normal((3, 20, 30, 1), dtype=np.float32)
    y = np.empty((3, 1), np.float32)
    steps = pool.global_avg_pool(x, y)
    assert len(steps) == 2  # the reduce, then the scale: no compiled call
    for s in steps:
        s()
    np.testing.assert_array_equal(y, numpy_mean(x).reshape(3, 1))


@pytest.mark.parametrize(("x_shape", "y_shape"), [((2, 3), (2, 3)), ((2, 4, 4, 3), (2, 4)), ((2, 0, 4, 3), (2, 3))])
def test_bad_shapes_raise_a_typed_error(x_shape, y_shape):
    with pytest.raises(InvalidArgumentError, match="global average pooling expects"):
        pool.global_avg_pool(np.zeros(x_shape, np.float32), np.zeros(y_shape, np.float32))


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = torch.nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        return torch.flatten(self.pool(x), 1)


@needs_numba
def test_a_lowered_head_gives_the_same_bits_on_both_tiers(monkeypatch, set_policy):
    x = torch.randn(2, 96, 7, 7, generator=torch.Generator().manual_seed(8))
    taken = []
    step = global_pool.global_average_step
    monkeypatch.setattr(global_pool, "global_average_step", lambda *a: taken.append(a) or step(*a))
    outs = []
    for tier in (True, False):
        set_policy(compiled=tier)
        ep = torch.export.export(Head().eval(), (x,))
        pte = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
        outs.append(Runtime.get().load_program(pte).load_method("forward").execute([x.numpy()])[0])
    assert len(taken) == 1  # the compiled tier's delegate only
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[0], Head()(x).numpy(), rtol=1e-5, atol=1e-6)
