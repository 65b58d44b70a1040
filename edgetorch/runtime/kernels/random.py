"""Random-distribution kernels: uniform, normal, bernoulli, exponential, cauchy, geometric, log-normal, random
integers, multinomial, the ``*_like`` factories, poisson, gamma, binomial, dirichlet and training-mode RReLU.

Every draw comes from the generator of the Method that is running (``method_rng``): each loaded Method
owns one, seeded by ``Method.set_seed(seed)`` or ``load_method(name, seed=...)``, so two methods (or two
loads) draw independent, reproducible streams. NumPy's PCG64 is not torch's Mersenne Twister, so values
differ from eager's; the distributions are the same. The kernels are marked impure: the executor never
precomputes them at load time. ``generator`` arguments (torch Generators cannot be serialised) are ignored.
Imports only NumPy and the runtime.
"""

from __future__ import annotations

import numpy as np

from edgetorch.runtime.generator import generator as active_generator
from edgetorch.runtime.kernels.promotion import is_float
from edgetorch.runtime.kernels.registry import kernel
from edgetorch.runtime.memory import resize

Number = bool | int | float


def _store(out: np.ndarray, shape: tuple[int, ...], values: np.ndarray | Number) -> np.ndarray:
    out = resize(out, shape)
    with np.errstate(all="ignore"):
        np.copyto(out, values, casting="unsafe")
    return out


def _float_dtype(out: np.ndarray) -> np.dtype:
    """Draw in float64 for float64 results, float32 for every other dtype."""
    return np.dtype(np.float64) if out.dtype == np.float64 else np.dtype(np.float32)


def _uniform(out: np.ndarray, shape: tuple[int, ...], low: float, high: float) -> np.ndarray:
    values = active_generator().random(shape, dtype=_float_dtype(out))
    if (low, high) != (0.0, 1.0):
        values = values * (high - low) + low
    return _store(out, shape, values)


def _normal(out: np.ndarray, shape: tuple[int, ...], mean: np.ndarray | float, std: np.ndarray | float) -> np.ndarray:
    if np.any(np.asarray(std) < 0):
        raise ValueError("normal: std must be non-negative")
    values = active_generator().standard_normal(shape, dtype=_float_dtype(out))
    return _store(out, shape, values * std + mean)


@kernel("aten::uniform.out", impure=True)
def uniform(self: np.ndarray, from_: float, to: float, generator: None, out: np.ndarray) -> np.ndarray:
    """Samples of U[from, to), shaped like ``self``."""
    if from_ > to:
        raise ValueError(f"uniform: expected from <= to, got from={from_}, to={to}")
    return _uniform(out, self.shape, from_, to)


@kernel("aten::rand_like.out", impure=True)
def rand_like(self: np.ndarray, memory_format: int | None, out: np.ndarray) -> np.ndarray:
    """Samples of U[0, 1) shaped like ``self``."""
    return _uniform(out, self.shape, 0.0, 1.0)


@kernel("aten::randn_like.out", impure=True)
def randn_like(self: np.ndarray, memory_format: int | None, out: np.ndarray) -> np.ndarray:
    """Standard normal samples shaped like ``self``."""
    return _normal(out, self.shape, 0.0, 1.0)


@kernel("aten::normal.out", impure=True)
def normal(self: np.ndarray, mean: float, std: float, generator: None, out: np.ndarray) -> np.ndarray:
    """N(mean, std^2) samples shaped like ``self``."""
    return _normal(out, self.shape, mean, std)


@kernel("aten::normal.Tensor_float_out", "aten::normal.float_Tensor_out", "aten::normal.Tensor_Tensor_out", impure=True)
def normal_tensor(mean: np.ndarray | float, std: np.ndarray | float, generator: None, out: np.ndarray) -> np.ndarray:
    """N(mean, std^2) samples with element-wise ``mean`` and/or ``std``, broadcast together."""
    shape = np.broadcast_shapes(np.shape(mean), np.shape(std))
    return _normal(out, shape, np.asarray(mean, np.float64), np.asarray(std, np.float64))


@kernel("aten::normal.float_float_out", impure=True)
def normal_sized(mean: float, std: float, size: list[int], generator: None, out: np.ndarray) -> np.ndarray:
    """N(mean, std^2) samples of shape ``size``."""
    return _normal(out, tuple(size), mean, std)


@kernel("aten::log_normal.out", impure=True)
def log_normal(self: np.ndarray, mean: float, std: float, generator: None, out: np.ndarray) -> np.ndarray:
    """exp(N(mean, std^2)) samples shaped like ``self``."""
    if std <= 0:
        raise ValueError(f"log_normal: std must be positive, got {std}")
    return _store(out, self.shape, active_generator().lognormal(mean, std, self.shape))


@kernel("aten::exponential.out", impure=True)
def exponential(self: np.ndarray, lambd: float, generator: None, out: np.ndarray) -> np.ndarray:
    """Exponential samples of rate ``lambd`` shaped like ``self``."""
    if lambd <= 0:
        raise ValueError(f"exponential: lambd must be positive, got {lambd}")
    return _store(out, self.shape, active_generator().standard_exponential(self.shape) / lambd)


@kernel("aten::cauchy.out", impure=True)
def cauchy(self: np.ndarray, median: float, sigma: float, generator: None, out: np.ndarray) -> np.ndarray:
    """Cauchy samples (location ``median``, scale ``sigma``) shaped like ``self``."""
    if sigma <= 0:
        raise ValueError(f"cauchy: sigma must be positive, got {sigma}")
    return _store(out, self.shape, median + sigma * active_generator().standard_cauchy(self.shape))


@kernel("aten::geometric.out", impure=True)
def geometric(self: np.ndarray, p: float, generator: None, out: np.ndarray) -> np.ndarray:
    """The number of Bernoulli(p) trials up to the first success (1, 2, ...), shaped like ``self``."""
    if not 0 < p < 1:
        raise ValueError(f"geometric: p must be in (0, 1), got {p}")
    return _store(out, self.shape, active_generator().geometric(p, self.shape))


def _bernoulli(out: np.ndarray, shape: tuple[int, ...], p: np.ndarray | float) -> np.ndarray:
    p = np.asarray(p, np.float64)
    if p.size and (np.nanmin(p) < 0 or np.nanmax(p) > 1 or np.isnan(p).any()):
        raise ValueError("bernoulli: probabilities must be in [0, 1]")
    return _store(out, shape, active_generator().random(shape) < p)


@kernel("aten::bernoulli.out", impure=True)
def bernoulli(self: np.ndarray, generator: None, out: np.ndarray) -> np.ndarray:
    """1 with probability ``self`` (element-wise), else 0."""
    return _bernoulli(out, self.shape, self)


@kernel("aten::bernoulli.float_out", impure=True)
def bernoulli_p(self: np.ndarray, p: float, generator: None, out: np.ndarray) -> np.ndarray:
    """1 with probability ``p``, else 0, shaped like ``self``."""
    return _bernoulli(out, self.shape, p)


@kernel("aten::bernoulli.Tensor_out", impure=True)
def bernoulli_tensor(self: np.ndarray, p: np.ndarray, generator: None, out: np.ndarray) -> np.ndarray:
    """1 with probability ``p`` (broadcast to ``self``'s shape), else 0."""
    return _bernoulli(out, self.shape, np.broadcast_to(p, self.shape))


def _integers(
    out: np.ndarray, shape: tuple[int, ...], low: int | np.ndarray, high: int | np.ndarray, endpoint: bool = False
) -> np.ndarray:
    """Integers uniform on [low, high), or on [low, high] with ``endpoint``."""
    if np.any(np.asarray(low) > np.asarray(high) - (0 if endpoint else 1)):
        raise ValueError(f"random integers: expected low < high, got low={low}, high={high}")
    return _store(out, shape, active_generator().integers(low, high, shape, endpoint=endpoint))


def _random_max(dtype: np.dtype) -> int:
    """The largest integer torch's ``random_()`` draws for ``dtype``: 2**mantissa digits for floats."""
    if dtype == np.bool_:
        return 1
    if is_float(dtype):
        return 2 ** ({2: 11, 4: 24, 8: 53}[dtype.itemsize] if dtype.kind == "f" else 8)
    return int(np.iinfo(dtype).max)


@kernel("aten::random.out", impure=True)
def random_(self: np.ndarray, generator: None, out: np.ndarray) -> np.ndarray:
    """Integers uniform on [0, top] shaped like ``self``: every integer ``self``'s dtype holds exactly."""
    return _integers(out, self.shape, 0, _random_max(out.dtype), endpoint=True)


@kernel("aten::random.to_out", impure=True)
def random_to(self: np.ndarray, to: int, generator: None, out: np.ndarray) -> np.ndarray:
    """Integers uniform on [0, to) shaped like ``self``."""
    return _integers(out, self.shape, 0, to)


@kernel("aten::random.from_out", impure=True)
def random_from(self: np.ndarray, from_: int, to: int | None, generator: None, out: np.ndarray) -> np.ndarray:
    """Integers uniform on [from, to) (to None: up to what ``self``'s dtype holds exactly)."""
    if to is None:
        return _integers(out, self.shape, from_, _random_max(out.dtype), endpoint=True)
    return _integers(out, self.shape, from_, to)


@kernel("aten::randint_like.out", impure=True)
def randint_like(self: np.ndarray, high: int, memory_format: int | None, out: np.ndarray) -> np.ndarray:
    """Integers uniform on [0, high) shaped like ``self``."""
    return _integers(out, self.shape, 0, high)


@kernel("aten::randint_like.Tensor_out", impure=True)
def randint_like_tensor(self: np.ndarray, high: np.ndarray, memory_format: int | None, out: np.ndarray) -> np.ndarray:
    """Integers uniform on [0, high) shaped like ``self``, ``high`` a 0-d tensor."""
    return _integers(out, self.shape, 0, int(high))


@kernel("aten::randint_like.low_dtype_out", impure=True)
def randint_like_low(self: np.ndarray, low: int, high: int, memory_format: int | None, out: np.ndarray) -> np.ndarray:
    """Integers uniform on [low, high) shaped like ``self``."""
    return _integers(out, self.shape, low, high)


@kernel("aten::multinomial.out", impure=True)
def multinomial(self: np.ndarray, num_samples: int, replacement: bool, generator: None, out: np.ndarray) -> np.ndarray:
    """Indices drawn from each row of the (unnormalised) weights ``self``, with or without replacement."""
    w = np.asarray(self, np.float64).reshape(-1, self.shape[-1])
    if not np.isfinite(w).all() or (w < 0).any() or (w.sum(axis=1) <= 0).any():
        raise ValueError("multinomial: each row of weights must be finite, non-negative and sum to more than 0")
    n = w.shape[1]
    if not replacement and num_samples > n:
        raise ValueError(f"multinomial: cannot draw {num_samples} samples from {n} categories without replacement")
    rng = active_generator()
    if replacement:
        cdf = np.cumsum(w, axis=1)
        cdf /= cdf[:, -1:]
        u = rng.random((w.shape[0], num_samples))
        draws = np.stack([np.searchsorted(c, r, side="right") for c, r in zip(cdf, u)])
        draws = np.minimum(draws, n - 1)
    else:
        # Exponential races: category i finishes at E_i / w_i with E_i ~ Exp(1); the order of finishing is
        # a draw without replacement proportional to the weights (zero weights never finish).
        with np.errstate(divide="ignore"):
            keys = rng.standard_exponential(w.shape) / w
        draws = np.argsort(keys, axis=1, kind="stable")[:, :num_samples]
    return _store(out, self.shape[:-1] + (num_samples,), draws.reshape(self.shape[:-1] + (num_samples,)))


@kernel("aten::poisson.out", impure=True)
def poisson(self: np.ndarray, generator: None, out: np.ndarray) -> np.ndarray:
    """Poisson samples with element-wise rates ``self``."""
    return _store(out, self.shape, active_generator().poisson(np.asarray(self, np.float64)))


@kernel("aten::_standard_gamma.out", impure=True)
def standard_gamma(self: np.ndarray, generator: None, out: np.ndarray) -> np.ndarray:
    """Gamma(shape=self, scale=1) samples."""
    return _store(out, self.shape, active_generator().standard_gamma(np.asarray(self, np.float64)))


@kernel("aten::binomial.out", impure=True)
def binomial(count: np.ndarray, prob: np.ndarray, generator: None, out: np.ndarray) -> np.ndarray:
    """Binomial(count, prob) samples, element-wise."""
    shape = np.broadcast_shapes(count.shape, prob.shape)
    n = np.asarray(count, np.float64).astype(np.int64)
    return _store(out, shape, active_generator().binomial(n, np.asarray(prob, np.float64)))


@kernel("aten::_sample_dirichlet.out", impure=True)
def sample_dirichlet(self: np.ndarray, generator: None, out: np.ndarray) -> np.ndarray:
    """Dirichlet samples along the last dim, ``self`` the concentrations (normalised gamma draws)."""
    g = active_generator().standard_gamma(np.asarray(self, np.float64))
    with np.errstate(all="ignore"):
        return _store(out, self.shape, g / g.sum(axis=-1, keepdims=True))


@kernel("aten::rrelu_with_noise.out", impure=True)
def rrelu_with_noise(
    self: np.ndarray,
    noise: np.ndarray,
    lower: Number,
    upper: Number,
    training: bool,
    generator: None,
    out: np.ndarray,
) -> np.ndarray:
    """Randomized leaky ReLU: negative inputs scaled by a U[lower, upper] slope in training, else by the mean.

    In training the slopes used (1 for non-negative inputs) are written into ``noise``, as torch does.
    """
    x = np.asarray(self, np.float64)
    if training:
        slope = np.where(x >= 0, 1.0, active_generator().uniform(lower, upper, x.shape))
        np.copyto(noise, slope.reshape(noise.shape), casting="unsafe")
    else:
        slope = np.where(x >= 0, 1.0, (lower + upper) / 2)
    return _store(out, self.shape, x * slope)


@kernel("aten::randint.out", impure=True)
def randint(high: int, size: list[int], out: np.ndarray) -> np.ndarray:
    """Integers uniform on [0, high) of shape ``size``."""
    return _integers(out, tuple(size), 0, high)


@kernel("aten::randint.low_out", impure=True)
def randint_low(low: int, high: int, size: list[int], out: np.ndarray) -> np.ndarray:
    """Integers uniform on [low, high) of shape ``size``."""
    return _integers(out, tuple(size), low, high)
