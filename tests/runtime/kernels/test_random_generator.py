"""Random kernels that take a (serialised as None) ``generator`` argument draw from the running Method's generator.

Values differ from eager's (PCG64, not Mersenne Twister), so each kernel is checked for the support of its
distribution and for reproducibility under a seed.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgetorch.runtime.generator import generator, use_generator
from edgetorch.runtime.kernels.registry import KERNELS

X = np.full((4, 5), 0.5, np.float32)
RATES = np.linspace(0.5, 3.0, 20, dtype=np.float32).reshape(4, 5)


def _out(dtype=np.float32):
    return np.empty((4, 5), dtype)


# (kernel, arguments before ``out``, out dtype, a check of the distribution's support)
CASES = [
    ("aten::log_normal.out", (X, 0.0, 1.0, None), np.float32, lambda y: (y > 0).all()),
    ("aten::exponential.out", (X, 2.0, None), np.float32, lambda y: (y >= 0).all()),
    ("aten::cauchy.out", (X, 0.0, 1.0, None), np.float32, lambda y: np.isfinite(y).all()),
    ("aten::geometric.out", (X, 0.3, None), np.float32, lambda y: (y >= 1).all() and (y == np.round(y)).all()),
    ("aten::poisson.out", (RATES, None), np.float32, lambda y: (y >= 0).all() and (y == np.round(y)).all()),
    ("aten::_standard_gamma.out", (RATES, None), np.float32, lambda y: (y > 0).all()),
    ("aten::binomial.out", (np.full((4, 5), 10.0, np.float32), X, None), np.float32, lambda y: (0 <= y).all()),
    ("aten::_sample_dirichlet.out", (RATES, None), np.float32, lambda y: np.allclose(y.sum(-1), 1, atol=1e-5)),
    ("aten::multinomial.out", (RATES, 5, False, None), np.int64, lambda y: (np.sort(y, -1) == np.arange(5)).all()),
]


@pytest.fixture(autouse=True)
def _restore_generator():
    saved = generator()
    yield
    use_generator(saved)


def _draw(name, args, dtype, seed):
    use_generator(np.random.default_rng(seed))
    fn, _ = KERNELS[name]
    return fn(*args, _out(dtype)).copy()


@pytest.mark.parametrize("name, args, dtype, support", CASES, ids=[c[0] for c in CASES])
def test_draws_from_the_active_generator(name, args, dtype, support):
    first = _draw(name, args, dtype, 0)
    assert first.shape == (4, 5) and support(first)
    np.testing.assert_array_equal(_draw(name, args, dtype, 0), first)
    assert not np.array_equal(_draw(name, args, dtype, 1), first)


def test_rrelu_training_slopes_come_from_the_active_generator():
    x = -np.ones((4, 5), np.float32)
    noise = np.empty_like(x)
    use_generator(np.random.default_rng(0))
    out = KERNELS["aten::rrelu_with_noise.out"][0](x, noise, 0.1, 0.3, True, None, np.empty_like(x))
    assert ((0.1 <= noise) & (noise <= 0.3)).all() and len(np.unique(noise)) > 1
    np.testing.assert_allclose(out, x * noise)
