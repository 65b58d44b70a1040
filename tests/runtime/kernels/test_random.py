"""Random-distribution kernels, checked statistically: support, mean and variance against the distribution's.

Values cannot match eager's (NumPy's PCG64 is not torch's Mersenne Twister), so each kernel draws a large
sample from a seeded generator and its moments are compared with the closed forms, to several standard errors.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from edgetorch.runtime.generator import use_generator
from tests.runtime.kernels._oracle import call

N = 200_000


@pytest.fixture(autouse=True)
def _seeded():
    use_generator(np.random.default_rng(1234))


def _draw(name: str, *args) -> np.ndarray:
    like = torch.empty(N)
    result = call(name, like, *args, out_like=like)
    assert result.shape == (N,) and result.dtype == np.float32
    return result.astype(np.float64)


def _moments(x: np.ndarray, mean: float, var: float) -> None:
    assert abs(x.mean() - mean) < 6 * math.sqrt(var / N)
    assert abs(x.var() - var) < 0.05 * var


@pytest.mark.parametrize(
    ("name", "args", "mean", "var", "low"),
    [
        ("aten::uniform.out", (-2.0, 3.0, None), 0.5, 25 / 12, -2.0),
        ("aten::normal.out", (1.5, 2.0, None), 1.5, 4.0, -math.inf),
        ("aten::log_normal.out", (0.2, 0.5, None), math.exp(0.2 + 0.125), (math.exp(0.25) - 1) * math.exp(0.65), 0.0),
        ("aten::exponential.out", (2.5, None), 0.4, 0.16, 0.0),
        ("aten::geometric.out", (0.3, None), 1 / 0.3, 0.7 / 0.09, 1.0),
    ],
)
def test_distribution_moments(name, args, mean, var, low):
    x = _draw(name, *args)
    assert x.min() >= low
    _moments(x, mean, var)


def test_geometric_is_integer_valued():
    x = _draw("aten::geometric.out", 0.6, None)
    assert np.array_equal(x, np.round(x)) and x.min() == 1


def test_cauchy_quartiles():
    """The Cauchy distribution has no moments; its quartiles are median -/+ sigma."""
    x = _draw("aten::cauchy.out", 1.0, 2.0, None)
    q1, q2, q3 = np.quantile(x, [0.25, 0.5, 0.75])
    assert abs(q2 - 1.0) < 0.05 and abs(q1 + 1.0) < 0.05 and abs(q3 - 3.0) < 0.05


def test_bernoulli_rate():
    like = torch.empty(N)
    x = call("aten::bernoulli.float_out", like, 0.25, None, out_like=like)
    assert set(np.unique(x)) <= {0.0, 1.0}
    _moments(x.astype(np.float64), 0.25, 0.25 * 0.75)


def test_bad_parameters_raise():
    like = torch.empty(4)
    with pytest.raises(ValueError, match="geometric"):
        call("aten::geometric.out", like, 1.5, None, out_like=like)
    with pytest.raises(ValueError, match="exponential"):
        call("aten::exponential.out", like, -1.0, None, out_like=like)


def test_seeded_generator_repeats():
    like = torch.empty(8)
    use_generator(np.random.default_rng(7))
    a = call("aten::exponential.out", like, 1.0, None, out_like=like).copy()
    use_generator(np.random.default_rng(7))
    b = call("aten::exponential.out", like, 1.0, None, out_like=like)
    assert np.array_equal(a, b)


def test_randint_bounds_and_mean():
    like = torch.empty(N, dtype=torch.int64)
    x = call("aten::randint.low_out", -3, 7, [N], out_like=like)
    assert x.dtype == np.int64 and x.min() == -3 and x.max() == 6
    _moments(x.astype(np.float64), 1.5, (10**2 - 1) / 12)
