"""Special functions outside Core ATen: the error-function family, gamma family, Bessel and Airy functions,
Hurwitz zeta, incomplete gamma and the classical orthogonal polynomials.

NumPy has none of these and the runtime may not depend on SciPy, so each is computed here, vectorised, in
float64 (results are rounded once into ``out``); the method is named where it is implemented. Float and
integer inputs are accepted (integers promote to ``out``'s float dtype, as in torch); the polynomials
recur in ``out``'s own precision so that overflow behaves as torch's. Imports only NumPy and the runtime.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from edgetorch.runtime.kernels.elementwise import quiet
from edgetorch.runtime.kernels.promotion import compute_dtype
from edgetorch.runtime.kernels.registry import kernel, register_kernel
from edgetorch.runtime.memory import resize

Number = bool | int | float
_F64 = np.float64
_EPS = np.finfo(np.float64).eps
_EULER_GAMMA = 0.57721566490153286061
_SQRT_PI = math.sqrt(math.pi)
_LOG_2PI_HALF = 0.5 * math.log(2 * math.pi)


def _f64(x: np.ndarray | Number) -> np.ndarray:
    return np.asarray(x, dtype=_F64)


def _store(out: np.ndarray, shape: tuple[int, ...], value: np.ndarray | float) -> np.ndarray:
    out = resize(out, shape)
    np.copyto(out, value, casting="unsafe")
    return out


def _sum_series(first: np.ndarray, next_term: Callable[[int, np.ndarray], np.ndarray], limit: int) -> np.ndarray:
    """``first + t1 + t2 + ...`` where ``t_k = next_term(k, t_{k-1})``, until every term is below 1 ulp."""
    total, term = first.copy(), first
    for k in range(1, limit):
        term = next_term(k, term)
        total += term
        if not np.any(np.abs(term) > _EPS * np.abs(total)):  # NaN terms count as converged
            break
    return total


def _sinpi(x: np.ndarray) -> np.ndarray:
    """sin(pi x), exact at integers (the argument is reduced to [-1, 1] first)."""
    return np.sin(np.pi * (x - 2.0 * np.round(x / 2.0)))


def _cospi(x: np.ndarray) -> np.ndarray:
    return np.cos(np.pi * (x - 2.0 * np.round(x / 2.0)))


# ---------------------------------------------------------------------------------------------
# Bernoulli numbers B_2k, exact as fractions (Akiyama-Tanigawa algorithm), for the asymptotic series below.


@functools.cache
def _bernoulli_even(count: int) -> tuple[float, ...]:
    """B_2, B_4, ..., B_2count as floats."""
    from fractions import Fraction

    a, numbers = [Fraction(0)] * (2 * count + 1), []
    for m in range(2 * count + 1):
        a[m] = Fraction(1, m + 1)
        for j in range(m, 0, -1):
            a[j - 1] = j * (a[j - 1] - a[j])
        if m >= 2 and m % 2 == 0:
            numbers.append(float(a[0]))
    return tuple(numbers)


# ---------------------------------------------------------------------------------------------
# Error-function family. erfcx = exp(x^2) erfc(x) is the base: piecewise Chebyshev interpolants of the
# standard library's erfc (fitted on first use at Chebyshev nodes) for 0 <= x < 26, and the asymptotic
# expansion 1/(x sqrt(pi)) * sum (-1)^k (2k-1)!! / (2x^2)^k beyond, where 8 terms reach 1e-19.

_ERFCX_PIECES = ((0.0, 0.5), (0.5, 1.0), (1.0, 2.0), (2.0, 4.0), (4.0, 8.0), (8.0, 16.0), (16.0, 26.0))


@functools.cache
def _erfcx_fits() -> list[tuple[float, float, np.ndarray]]:
    fits = []
    degree = 28
    nodes = np.cos(np.pi * (np.arange(degree + 1) + 0.5) / (degree + 1))
    for lo, hi in _ERFCX_PIECES:
        xs = [(lo + hi) / 2 + (hi - lo) / 2 * float(t) for t in nodes]
        values = [math.erfc(x) * math.exp(x * x) for x in xs]
        fits.append((lo, hi, np.polynomial.chebyshev.chebfit(nodes, values, degree)))
    return fits


def _erfcx_nonneg(x: np.ndarray) -> np.ndarray:
    """erfcx for x >= 0 (NaN passes through)."""
    result = np.full(x.shape, np.nan)
    for lo, hi, coef in _erfcx_fits():
        inside = (x >= lo) & (x < hi)
        if inside.any():
            t = (2 * x[inside] - (lo + hi)) / (hi - lo)
            result[inside] = np.polynomial.chebyshev.chebval(t, coef)
    far = x >= _ERFCX_PIECES[-1][1]
    if far.any():
        xf = x[far]
        inv = 1.0 / (2 * xf * xf)
        total, term = np.ones_like(xf), np.ones_like(xf)
        for k in range(1, 9):
            term = term * -(2 * k - 1) * inv
            total += term
        result[far] = total / (xf * _SQRT_PI)
    return result


def erfcx(x: np.ndarray) -> np.ndarray:
    """exp(x^2) * erfc(x) in float64; for x < 0 it is 2 exp(x^2) - erfcx(-x)."""
    x = _f64(x)
    value = _erfcx_nonneg(np.abs(x))
    neg = x < 0
    if neg.any():
        xn = x[neg]
        value[neg] = 2 * np.exp(xn * xn) - value[neg]
    return value


def erfc(x: np.ndarray) -> np.ndarray:
    """The complementary error function in float64, accurate in relative terms far into the upper tail."""
    x = _f64(x)
    a = np.abs(x)
    value = np.exp(-a * a) * _erfcx_nonneg(a)
    return np.where(x < 0, 2 - value, value)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function in float64: its Maclaurin series below 0.5, 1 - erfc beyond."""
    x = _f64(x)
    small = np.abs(x) < 0.5
    xs = np.where(small, x, 0.0)
    x2 = xs * xs
    series = _sum_series(xs.copy(), lambda k, t: t * -x2 * (2 * k - 1) / (k * (2 * k + 1)), 40)
    big = np.sign(x) * (1 - erfc(np.abs(x)))
    return np.where(small, series * (2 / _SQRT_PI), big)


def ndtr(x: np.ndarray) -> np.ndarray:
    """The standard normal CDF: erfc(-x / sqrt(2)) / 2."""
    return 0.5 * erfc(-_f64(x) / math.sqrt(2))


def log_ndtr(x: np.ndarray) -> np.ndarray:
    """log of the standard normal CDF; below -1 through erfcx, so it stays finite far into the lower tail."""
    x = _f64(x)
    low = x < -1
    xl = np.where(low, x, -2.0)
    lower = np.log(erfcx(-xl / math.sqrt(2)) / 2) - xl * xl / 2
    upper = np.log1p(-0.5 * erfc(np.where(low, 0.0, x) / math.sqrt(2)))
    return np.where(low, lower, upper)


def ndtri(p: np.ndarray) -> np.ndarray:
    """The standard normal quantile function.

    Starts from the rational approximation of Abramowitz & Stegun 26.2.23 (error < 4.5e-4) on the smaller
    tail q = min(p, 1 - p) (exact in floating point), then three Halley steps on erfc(-x/sqrt(2))/2 - q.
    """
    p = _f64(p)
    q = np.minimum(p, 1 - p)
    valid = (q > 0) & (q <= 0.5)
    qv = np.where(valid, q, 0.25)
    t = np.sqrt(-2 * np.log(qv))
    x = -(t - (2.515517 + t * (0.802853 + t * 0.010328)) / (1 + t * (1.432788 + t * (0.189269 + t * 0.001308))))
    for _ in range(3):
        e = 0.5 * erfc(-x / math.sqrt(2)) - qv
        u = e * math.sqrt(2 * math.pi) * np.exp(x * x / 2)
        x = x - u / (1 + x * u / 2)
    x = np.where(p > 0.5, -x, x)
    x = np.where(p == 0.5, 0.0, x)
    x = np.where(p == 0, -np.inf, np.where(p == 1, np.inf, x))
    return np.where((p < 0) | (p > 1) | np.isnan(p), np.nan, x)


@functools.cache
def _erfinv_series(terms: int = 40) -> np.ndarray:
    """Maclaurin coefficients of erfinv in z = sqrt(pi)/2 * y: c_k / (2k + 1), c_k = sum c_m c_(k-1-m) / ((m+1)(2m+1))."""
    c = [1.0]
    for k in range(1, terms):
        c.append(sum(c[m] * c[k - 1 - m] / ((m + 1) * (2 * m + 1)) for m in range(k)))
    return np.array([ck / (2 * k + 1) for k, ck in enumerate(c)])


def erfinv(y: np.ndarray) -> np.ndarray:
    """The inverse error function: its Maclaurin series for |y| < 0.5, -ndtri((1 - |y|) / 2) / sqrt(2) beyond."""
    y = _f64(y)
    a = np.abs(y)
    small = a < 0.5
    z = np.where(small, y, 0.0) * (_SQRT_PI / 2)
    z2 = z * z
    coef = _erfinv_series()
    poly = np.full(z.shape, coef[-1])
    for c in coef[-2::-1]:
        poly = poly * z2 + c
    series = z * poly
    tail = -ndtri(np.where(small, 0.25, (1 - a) / 2)) / math.sqrt(2) * np.sign(y)
    value = np.where(small, series, tail)
    return np.where(a > 1, np.nan, value)


# ---------------------------------------------------------------------------------------------
# Gamma family. lgamma and digamma shift x up to >= 10 with the recurrences Gamma(x+1) = x Gamma(x) and
# psi(x+1) = psi(x) + 1/x, then use Stirling's series (with Bernoulli numbers); negative x goes through the
# reflection formulas. polygamma(n >= 1) is (-1)^(n+1) n! zeta(n+1, x).

_SHIFT_TO = 10.0


def _shift_up(x: np.ndarray, step: Callable[[np.ndarray, np.ndarray], None]) -> np.ndarray:
    """Add 1 to every x below _SHIFT_TO until none is, calling ``step(x, mask)`` before each shift."""
    x = x.copy()
    while True:
        low = x < _SHIFT_TO
        if not low.any():
            return x
        step(x, low)
        x[low] += 1


def _lgamma_positive(x: np.ndarray) -> np.ndarray:
    logs = np.zeros_like(x)

    def step(v: np.ndarray, low: np.ndarray) -> None:
        logs[low] += np.log(v[low])

    z = _shift_up(np.where(np.isfinite(x), x, _SHIFT_TO), step)
    inv, inv2 = 1 / z, 1 / (z * z)
    series = np.zeros_like(z)
    for k, b in reversed(list(enumerate(_bernoulli_even(9), start=1))):
        series = series * inv2 + b / (2 * k * (2 * k - 1))
    value = (z - 0.5) * np.log(z) - z + _LOG_2PI_HALF + series * inv - logs
    return np.where(np.isfinite(x), value, x)


def lgamma(x: np.ndarray) -> np.ndarray:
    """log |Gamma(x)|; +inf at the poles (0, -1, -2, ...) and at +-inf."""
    x = _f64(x)
    neg = x < 0.5
    pos_part = _lgamma_positive(np.where(neg, 1 - x, x))
    with np.errstate(divide="ignore"):
        reflected = math.log(math.pi) - np.log(np.abs(_sinpi(x))) - pos_part
    value = np.where(neg, reflected, pos_part)
    pole = (x <= 0) & (x == np.floor(x))
    return np.where(pole | np.isinf(x), np.inf, value)


def digamma(x: np.ndarray) -> np.ndarray:
    """psi(x) = d/dx log Gamma(x); -inf at +0 and +inf at -0 (torch's choice), NaN at the negative integers."""
    x = _f64(x)
    neg = x < 0
    z0 = np.where(neg, 1 - x, x)
    acc = np.zeros_like(z0)

    def step(v: np.ndarray, low: np.ndarray) -> None:
        acc[low] -= 1 / v[low]

    z = _shift_up(np.where(np.isfinite(z0) & (z0 != 0), z0, _SHIFT_TO), step)
    inv2 = 1 / (z * z)
    series = np.zeros_like(z)
    for k, b in reversed(list(enumerate(_bernoulli_even(9), start=1))):
        series = series * inv2 + b / (2 * k)
    value = np.log(z) - 0.5 / z - series * inv2 + acc
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(neg, value - np.pi * _cospi(x) / _sinpi(x), value)
    value = np.where(x == np.inf, np.inf, value)
    value = np.where(x == 0, np.copysign(np.inf, -x), value)
    return np.where((neg & (x == np.floor(x))) | (x == -np.inf) | np.isnan(x), np.nan, value)


def zeta(s: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The Hurwitz zeta function sum_k (q + k)^-s, with Cephes' domain rules.

    Euler-Maclaurin summation: the first N terms directly (N so that q + N >= 10), then the integral of the
    tail, half its first term and 12 Bernoulli correction terms.
    """
    s, q = np.broadcast_arrays(_f64(s), _f64(q))
    bad = (s < 1) | np.isnan(s) | np.isnan(q) | ((q <= 0) & (s != np.floor(s)))
    pole = (s == 1) | ((q <= 0) & (q == np.floor(q)))
    ss = np.where(bad | pole, 2.0, s)
    qq = np.where(bad | pole, 1.0, q)
    qmin = float(qq.min()) if qq.size else 1.0
    terms = max(10, int(math.ceil(10 - qmin)))
    total = np.zeros_like(ss)
    for k in range(terms):
        total += np.power(qq + k, -ss)
    w = qq + terms
    wps = np.power(w, -ss)
    total += w * wps / (ss - 1) + 0.5 * wps
    rising, power = np.ones_like(ss), wps / w  # s(s+1)...(s+2j-2) and w^(-s-2j+1)
    for j, b in enumerate(_bernoulli_even(12), start=1):
        rising = rising * (ss + 2 * j - 2) if j == 1 else rising * (ss + 2 * j - 3) * (ss + 2 * j - 2)
        total += b / math.factorial(2 * j) * rising * power
        power = power / (w * w)
    total = np.where(pole, np.inf, total)
    return np.where(bad, np.nan, total)


def polygamma(n: int, x: np.ndarray) -> np.ndarray:
    """The n-th derivative of digamma."""
    if n < 0:
        raise ValueError(f"polygamma: n must be non-negative, got {n}")
    if n == 0:
        return digamma(x)
    return (-1) ** (n + 1) * math.factorial(n) * zeta(np.full(np.shape(x), n + 1.0), _f64(x))


def _gamma_prefactor(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """x^a e^-x / Gamma(a), computed through logarithms."""
    with np.errstate(divide="ignore"):
        return np.exp(a * np.log(x) - x - lgamma(a))


def _igamma_series(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The regularised lower incomplete gamma P(a, x) by its power series (good for x < a + 1)."""
    total = _sum_series(1 / a, lambda k, t: t * x / (a + k), 2000)
    return total * _gamma_prefactor(a, x)


def _igammac_fraction(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The regularised upper incomplete gamma Q(a, x) by its continued fraction (Lentz's method; x >= a + 1)."""
    tiny = 1e-300
    b = x + 1 - a
    c = np.full_like(b, 1 / tiny)
    d = 1 / b
    h = d.copy()
    for i in range(1, 2000):
        an = -i * (i - a)
        b = b + 2
        d = an * d + b
        d = np.where(np.abs(d) < tiny, tiny, d)
        c = b + an / c
        c = np.where(np.abs(c) < tiny, tiny, c)
        d = 1 / d
        delta = d * c
        h *= delta
        if not np.any(np.abs(delta - 1) > _EPS):
            break
    return h * _gamma_prefactor(a, x)


def _incomplete_gamma(a: np.ndarray, x: np.ndarray, upper: bool) -> np.ndarray:
    a, x = np.broadcast_arrays(_f64(a), _f64(x))
    regular = (a > 0) & (x > 0) & np.isfinite(a) & np.isfinite(x)
    aa, xx = np.where(regular, a, 1.0), np.where(regular, x, 1.0)
    use_series = xx < aa + 1
    lower = _igamma_series(np.where(use_series, aa, 1.0), np.where(use_series, xx, 0.5))
    upper_cf = _igammac_fraction(np.where(use_series, 1.0, aa), np.where(use_series, 3.0, xx))
    p = np.where(use_series, lower, 1 - upper_cf)
    q = np.where(use_series, 1 - lower, upper_cf)
    value = q if upper else p
    # torch's special cases, written for P; Q mirrors them.
    lo, hi = (1.0, 0.0) if upper else (0.0, 1.0)
    value = np.where(np.isinf(x), hi, value)
    value = np.where(np.isinf(a), np.where(np.isinf(x), np.nan, lo), value)
    value = np.where(x == 0, lo, value)
    value = np.where(a == 0, np.where(x > 0, hi, np.nan), value)
    return np.where((x < 0) | (a < 0) | np.isnan(a) | np.isnan(x), np.nan, value)


def igamma(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The regularised lower incomplete gamma function P(a, x)."""
    return _incomplete_gamma(a, x, upper=False)


def igammac(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The regularised upper incomplete gamma function Q(a, x) = 1 - P(a, x)."""
    return _incomplete_gamma(a, x, upper=True)


# ---------------------------------------------------------------------------------------------
# Bessel functions of order 0 and 1. Power series (all terms of one sign for I, little cancellation for J
# and Y below |x| = 12) near zero; Hankel's asymptotic expansions beyond (Abramowitz & Stegun 9.2.5-10 for
# J and Y, 9.7.1 for I); K by the trapezoidal rule on K_nu(x) = int_0^inf exp(-x cosh t) cosh(nu t) dt,
# which converges geometrically in the step for this analytic, doubly-exponentially decaying integrand.

_SERIES_LIMIT_JY = 12.0
_SERIES_LIMIT_I = 30.0


def _asymptotic_a(nu: float, count: int) -> list[float]:
    """a_k(nu) = (4nu^2 - 1)(4nu^2 - 9)...(4nu^2 - (2k-1)^2) / (k! 8^k), k = 0 .. count-1."""
    mu, out, a = 4 * nu * nu, [], 1.0
    for k in range(count):
        out.append(a)
        a = a * (mu - (2 * k + 1) ** 2) / ((k + 1) * 8)
    return out


def _hankel_pq(nu: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hankel's P and Q for order ``nu`` at x >= 12, summed up to the smallest term (k = 2x = 24)."""
    a = _asymptotic_a(nu, 24)
    p, q = np.zeros_like(x), np.zeros_like(x)
    inv = 1 / x
    for k in reversed(range(12)):
        p = p * (-inv * inv) + a[2 * k]
        q = q * (-inv * inv) + a[2 * k + 1]
    return p, q * inv


def _bessel_series(nu: int, x: np.ndarray, sign: float) -> np.ndarray:
    """sum_k sign^k (x/2)^(2k+nu) / (k! (k+nu)!): J_nu for sign -1, I_nu for sign +1."""
    h2 = sign * (x / 2) ** 2
    first = (x / 2) ** nu / math.factorial(nu)
    return _sum_series(first, lambda k, t: t * h2 / (k * (k + nu)), 200)


def _j_or_y(nu: int, x: np.ndarray, want_y: bool) -> np.ndarray:
    x = _f64(x)
    a = np.abs(x)
    small = a <= _SERIES_LIMIT_JY
    xs, xl = np.where(small, a, 1.0), np.where(small, _SERIES_LIMIT_JY * 2, a)
    p, q = _hankel_pq(nu, xl)
    chi = xl - (nu / 2 + 0.25) * np.pi
    amp = np.sqrt(2 / (np.pi * xl))
    if not want_y:
        large = amp * (p * np.cos(chi) - q * np.sin(chi))
        value = np.where(small, _bessel_series(nu, xs, -1.0), large)
        value = np.where(np.isinf(a), 0.0, value)
        return np.where(x < 0, value * (-1) ** nu, value)
    large = amp * (p * np.sin(chi) + q * np.cos(chi))
    # A&S 9.1.11: Y_n = (2/pi) ln(x/2) J_n - (1/pi) (x/2)^-n sum_(k<n) ... - (1/pi) sum (psi(k+1) + psi(n+k+1)) ...
    h2 = -((xs / 2) ** 2)
    term = (xs / 2) ** nu / math.factorial(nu)
    psi_k, psi_nk = -_EULER_GAMMA, -_EULER_GAMMA + sum(1 / j for j in range(1, nu + 1))
    total = term * (psi_k + psi_nk)
    for k in range(1, 200):
        term = term * h2 / (k * (k + nu))
        psi_k, psi_nk = psi_k + 1 / k, psi_nk + 1 / (k + nu)
        total += term * (psi_k + psi_nk)
        if not np.any(np.abs(term) * 50 > _EPS * np.abs(total)):
            break
    series = (2 / np.pi) * np.log(xs / 2) * _bessel_series(nu, xs, -1.0) - total / np.pi
    if nu == 1:
        series -= 2 / (np.pi * xs)
    value = np.where(small, series, large)
    value = np.where(a == np.inf, 0.0, value)
    value = np.where(x == 0, -np.inf, value)
    return np.where((x < 0) | np.isnan(x), np.nan, value)


def bessel_j0(x: np.ndarray) -> np.ndarray:
    """J_0, the Bessel function of the first kind of order 0."""
    return _j_or_y(0, x, False)


def bessel_j1(x: np.ndarray) -> np.ndarray:
    """J_1, the Bessel function of the first kind of order 1."""
    return _j_or_y(1, x, False)


def bessel_y0(x: np.ndarray) -> np.ndarray:
    """Y_0, the Bessel function of the second kind of order 0 (NaN for x < 0, -inf at 0)."""
    return _j_or_y(0, x, True)


def bessel_y1(x: np.ndarray) -> np.ndarray:
    """Y_1, the Bessel function of the second kind of order 1 (NaN for x < 0, -inf at 0)."""
    return _j_or_y(1, x, True)


def _bessel_i(nu: int, x: np.ndarray, scaled: bool) -> np.ndarray:
    """I_nu(x), or exp(-|x|) I_nu(x) when ``scaled``."""
    x = _f64(x)
    a = np.abs(x)
    small = a <= _SERIES_LIMIT_I
    xs, xl = np.where(small, a, 1.0), np.where(small, _SERIES_LIMIT_I * 2, a)
    series = _bessel_series(nu, xs, 1.0)
    if scaled:
        series = series * np.exp(-xs)
    coef = _asymptotic_a(nu, 40)
    total = np.zeros_like(xl)
    for c in reversed(coef):
        total = total * (-1 / xl) + c
    large = total / np.sqrt(2 * np.pi * xl)
    if not scaled:
        with np.errstate(over="ignore"):
            large = large * np.exp(np.minimum(xl, 800.0))
    value = np.where(small, series, large)
    value = np.where(np.isinf(a), 0.0 if scaled else np.nan, value)  # torch: I(+-inf) is NaN, scaled I is 0
    return np.where(x < 0, value * (-1) ** nu, value)


def _bessel_k_series(nu: int, x: np.ndarray) -> np.ndarray:
    """K_0 or K_1 for small x > 0 by A&S 9.6.11: the log term times I_nu plus a power series with digammas."""
    h2 = (x / 2) ** 2
    term = (x / 2) ** nu / math.factorial(nu)
    psi_k, psi_nk = -_EULER_GAMMA, -_EULER_GAMMA + (1.0 if nu else 0.0)
    total = term * (psi_k + psi_nk)
    for k in range(1, 60):
        term = term * h2 / (k * (k + nu))
        psi_k, psi_nk = psi_k + 1 / k, psi_nk + 1 / (k + nu)
        total += term * (psi_k + psi_nk)
    log_part = np.log(x / 2) * _bessel_series(nu, x, 1.0)
    return log_part + 1 / x - total / 2 if nu else -log_part + total / 2


def _bessel_k(nu: float, x: np.ndarray, scaled: bool) -> np.ndarray:
    """K_nu(x) (or exp(x) K_nu(x)): the power series below x = 1 for integer nu, else the trapezoidal rule in t
    on K_nu(x) = int_0^inf exp(-x cosh t) cosh(nu t) dt until the integrand is gone.

    The step is 1/8, and 0.7/sqrt(x) for large x, where the integrand narrows to a width of 1/sqrt(x):
    the error then stays below exp(-2 pi^2 / (h^2 x)) ~ 1e-17.
    """
    x = _f64(x)
    valid = (x > 0) & np.isfinite(x)
    small = valid & (x < 1) & (nu in (0, 1))
    xv = np.where(valid & ~small, x, 1.0)
    h = np.minimum(0.125, 0.7 / np.sqrt(xv))
    total = np.full_like(xv, 0.5) if scaled else 0.5 * np.exp(-xv)
    for j in range(1, 2000):
        t = j * h
        exponent = -xv * (np.cosh(t) - 1) if scaled else -xv * np.cosh(t)
        term = np.exp(exponent) * np.cosh(nu * t)
        total += term
        if not np.any(term > 1e-18 * total):
            break
    value = total * h
    if small.any():
        xs = x[small]
        series = _bessel_k_series(int(nu), xs)
        value[small] = series * np.exp(xs) if scaled else series
    value = np.where(x == 0, np.inf, value)
    value = np.where(x == np.inf, 0.0, value)
    return np.where((x < 0) | np.isnan(x), np.nan, value)


def airy_ai(x: np.ndarray) -> np.ndarray:
    """The Airy function Ai.

    Its Maclaurin series Ai(0) f(x) + Ai'(0) g(x) for -8 <= x <= 2; Ai(x) = sqrt(x/3) K_1/3(zeta) / pi with
    zeta = 2/3 x^1.5 above; for x < -8 the asymptotic expansion of A&S 10.4.60 in zeta = 2/3 |x|^1.5.
    """
    x = _f64(x)
    mid = (x >= -8) & (x <= 2)
    xm = np.where(mid, x, 0.0)
    x3 = xm**3
    ai0 = 1 / (3 ** (2 / 3) * math.gamma(2 / 3))
    dai0 = -1 / (3 ** (1 / 3) * math.gamma(1 / 3))
    f = _sum_series(np.ones_like(xm), lambda k, t: t * x3 / ((3 * k - 1) * 3 * k), 200)
    g = _sum_series(xm.copy(), lambda k, t: t * x3 / (3 * k * (3 * k + 1)), 200)
    series = ai0 * f + dai0 * g
    xp = np.where(x > 2, x, 4.0)
    zp = 2 / 3 * xp**1.5
    positive = np.sqrt(xp / 3) * _bessel_k(1 / 3, zp, scaled=False) / np.pi
    xn = np.where(x < -8, -x, 9.0)
    zn = 2 / 3 * xn**1.5
    u, even, odd = 1.0, np.zeros_like(zn), np.zeros_like(zn)
    for k in range(0, 24):
        if k:
            u = u * (6 * k - 5) * (6 * k - 3) * (6 * k - 1) / ((2 * k - 1) * 216 * k)
        sign = (-1) ** (k // 2)
        if k % 2 == 0:
            even += sign * u * zn ** (-k)
        else:
            odd += sign * u * zn ** (-k)
    phase = zn + np.pi / 4
    negative = (np.sin(phase) * even - np.cos(phase) * odd) / (_SQRT_PI * xn**0.25)
    value = np.where(mid, series, np.where(x > 2, positive, negative))
    value = np.where(x == np.inf, 0.0, value)
    return np.where(np.isnan(x) | (x == -np.inf), np.nan, value)


def spherical_bessel_j0(x: np.ndarray) -> np.ndarray:
    """sin(x) / x (1 at 0, 0 at +-inf)."""
    x = _f64(x)
    small = np.abs(x) < 0.5
    xs = np.where(small, x, 1.0)
    x2 = xs * xs
    series = _sum_series(np.ones_like(xs), lambda k, t: -t * x2 / ((2 * k) * (2 * k + 1)), 30)
    with np.errstate(invalid="ignore"):
        value = np.sin(x) / np.where(small, 1.0, x)
    value = np.where(small, series, value)
    return np.where(np.isinf(x), 0.0, value)


# ---------------------------------------------------------------------------------------------
# Registration of the unary float functions: compute in float64, round once into out.

_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "erfc": erfc,
    "erfinv": erfinv,
    "lgamma": lgamma,
    "digamma": digamma,
    "i0": lambda x: _bessel_i(0, x, False),
    "special_erfcx": erfcx,
    "special_ndtr": ndtr,
    "special_ndtri": ndtri,
    "special_log_ndtr": log_ndtr,
    "special_i0e": lambda x: _bessel_i(0, x, True),
    "special_i1": lambda x: _bessel_i(1, x, False),
    "special_i1e": lambda x: _bessel_i(1, x, True),
    "special_bessel_j0": bessel_j0,
    "special_bessel_j1": bessel_j1,
    "special_bessel_y0": bessel_y0,
    "special_bessel_y1": bessel_y1,
    "special_modified_bessel_i0": lambda x: _bessel_i(0, x, False),
    "special_modified_bessel_i1": lambda x: _bessel_i(1, x, False),
    "special_modified_bessel_k0": lambda x: _bessel_k(0, x, False),
    "special_modified_bessel_k1": lambda x: _bessel_k(1, x, False),
    "special_scaled_modified_bessel_k0": lambda x: _bessel_k(0, x, True),
    "special_scaled_modified_bessel_k1": lambda x: _bessel_k(1, x, True),
    "special_spherical_bessel_j0": spherical_bessel_j0,
    "special_airy_ai": airy_ai,
}


def _unary_kernel(fn: Callable[[np.ndarray], np.ndarray]) -> Callable:
    @quiet
    def run(self: np.ndarray, out: np.ndarray) -> np.ndarray:
        return _store(out, self.shape, fn(_f64(self)))

    return run


for _name, _fn in _UNARY.items():
    register_kernel(f"aten::{_name}.out", _unary_kernel(_fn))


@kernel("aten::polygamma.out")
@quiet
def polygamma_kernel(n: int, self: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The n-th derivative of digamma, element-wise."""
    return _store(out, self.shape, polygamma(n, _f64(self)))


@kernel("aten::mvlgamma.out")
@quiet
def mvlgamma(self: np.ndarray, p: int, out: np.ndarray) -> np.ndarray:
    """The multivariate log-gamma of dimension p: p(p-1)/4 log(pi) + sum_(j<p) lgamma(x - j/2)."""
    x = _f64(self)
    if p < 1:
        raise ValueError(f"mvlgamma: p must be at least 1, got {p}")
    if x.size and not np.all(x > (p - 1) / 2):
        raise ValueError(f"mvlgamma: all elements must be greater than (p-1)/2 = {(p - 1) / 2}")
    value = p * (p - 1) / 4 * math.log(math.pi) + sum(lgamma(x - j / 2) for j in range(p))
    return _store(out, self.shape, value)


def _binary_kernel(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable:
    @quiet
    def run(self: np.ndarray | Number, other: np.ndarray | Number, out: np.ndarray) -> np.ndarray:
        shape = np.broadcast_shapes(np.shape(self), np.shape(other))
        return _store(out, shape, fn(_f64(self), _f64(other)))

    return run


for _name, _binary in {"special_zeta": zeta, "igamma": igamma, "igammac": igammac}.items():
    for _overload in ("out", "self_scalar_out", "other_scalar_out"):
        register_kernel(f"aten::{_name}.{_overload}", _binary_kernel(_binary))


# ---------------------------------------------------------------------------------------------
# Classical orthogonal polynomials P_n(x), n a tensor truncated to an integer (negative n gives 0). Each
# runs its three-term recurrence in out's precision, element by element up to that element's n, stopping
# where the value has become NaN, as torch does; Chebyshev polynomials of large n inside (-1, 1) use their
# trigonometric closed forms.


def _recur(n: np.ndarray, p0: np.ndarray, p1: np.ndarray, step: Callable) -> np.ndarray:
    """P_n from P_0 = p0, P_1 = p1 and P_(k+1) = step(k, P_k, P_(k-1)), each element stopping at its n."""
    result = np.where(n == 0, p0, p1)
    p, q = p0, p1.copy()
    top = int(n.max()) if n.size else 0
    for k in range(1, top):
        active = (k < n) & ~np.isnan(q)
        if not active.any():
            break
        r = step(k, q, p)
        p = np.where(active, q, p)
        q = np.where(active, r, q)
        result = np.where(active, r, result)
    return result


def _poly_args(x: np.ndarray | Number, n: np.ndarray | Number, out: np.ndarray):
    """The compute dtype, the broadcast shape, x in that dtype and n as integers (NaN and inf n become -1)."""
    ct = compute_dtype(out.dtype)
    shape = np.broadcast_shapes(np.shape(x), np.shape(n))
    xv = np.broadcast_to(np.asarray(x).astype(ct), shape)
    nf = np.broadcast_to(np.asarray(n), shape)
    if nf.dtype.kind == "f":
        nf = np.where(np.isfinite(nf), nf, -1)
    return ct, shape, xv, nf.astype(np.int64)


def _chebyshev(kind: str, shifted: bool = False) -> Callable:
    """T, U, V or W (torch's special.chebyshev_polynomial_*), or the shifted one, P*_n(x) = P_n(2x - 1)."""
    limit = {"t": 6, "u": 6, "v": 6, "w": 4}[kind] if shifted else (6 if kind == "t" else 8)  # torch's switch-overs

    @quiet
    def run(x, n, out):
        ct, shape, x, n = _poly_args(x, n, out)
        if shifted:
            x = x + x - ct.type(1)
        one, two = ct.type(1), ct.type(2)
        inside = np.abs(x) < 1
        closed_form = inside & (n > limit)
        edge = np.abs(x) == 1
        first = {"t": x, "u": x + x, "v": x + x - one, "w": x + x + one}[kind]
        n_rec = np.where(closed_form | edge, 0, n)
        value = _recur(n_rec, np.ones(shape, ct), first, lambda k, q, p: (x + x) * q - p)
        theta = np.arccos(np.where(inside, x, 0)).astype(ct)
        nn = n.astype(ct)
        if kind == "t":
            closed = np.cos(nn * theta)
        elif kind == "u":
            sin = np.sin(theta)
            closed = np.where(sin != 0, np.sin((nn + one) * theta) / sin, (nn + one) * np.cos((nn + one) * theta) / x)
        elif kind == "v":
            closed = np.cos((nn + ct.type(0.5)) * theta) / np.cos(theta / two)
        else:
            closed = np.sin((nn + ct.type(0.5)) * theta) / np.sin(theta / two)
        value = np.where(closed_form, closed, value)
        odd = n % 2 == 1
        at_plus, at_minus = {
            "t": (1, np.where(odd, -1, 1)),
            "u": (n + 1, np.where(odd, -(n + 1), n + 1)),
            "v": (1, np.where(odd, -(2 * n + 1), 2 * n + 1)),
            "w": (2 * n + 1, np.where(odd, -1, 1)),
        }[kind]
        value = np.where(x == 1, at_plus, np.where(x == -1, at_minus, value))
        return _store(out, shape, np.where(n < 0, 0, value))

    return run


def _hermite(physicists: bool) -> Callable:
    """H_n (physicists') or He_n (probabilists'); NaN beyond n = 128 (float32) or 512, as torch."""

    @quiet
    def run(x, n, out):
        ct, shape, x, n = _poly_args(x, n, out)
        limit = 128 if ct == np.float32 else 512
        n_rec = np.where(n > limit, 0, n)
        if physicists:
            value = _recur(n_rec, np.ones(shape, ct), x + x, lambda k, q, p: (x + x) * q - ct.type(2 * k) * p)
        else:
            value = _recur(n_rec, np.ones(shape, ct), x.copy(), lambda k, q, p: x * q - ct.type(k) * p)
        value = np.where(n > limit, np.nan, value)
        return _store(out, shape, np.where(n < 0, 0, value))

    return run


@quiet
def _laguerre(x, n, out):
    """L_n, the Laguerre polynomials."""
    ct, shape, x, n = _poly_args(x, n, out)
    one = ct.type(1)

    def step(k, q, p):
        return ((ct.type(2 * k) + (one - x)) * q - ct.type(k) * p) / (k + 1)

    value = _recur(np.where(x == 0, 0, n), np.ones(shape, ct), one - x, step)
    return _store(out, shape, np.where(n < 0, 0, np.where(x == 0, 1, value)))


@quiet
def _legendre(x, n, out):
    """P_n, the Legendre polynomials."""
    ct, shape, x, n = _poly_args(x, n, out)

    def step(k, q, p):
        return (ct.type(2 * k + 1) * x * q - ct.type(k) * p) / (k + 1)

    edge = np.abs(x) == 1
    value = _recur(np.where(edge, 0, n), np.ones(shape, ct), x.copy(), step)
    value = np.where(x == 1, 1, np.where(x == -1, np.where(n % 2 == 1, -1, 1), value))
    return _store(out, shape, np.where(n < 0, 0, value))


_POLYNOMIALS = {
    "chebyshev_polynomial_t": _chebyshev("t"),
    "chebyshev_polynomial_u": _chebyshev("u"),
    "chebyshev_polynomial_v": _chebyshev("v"),
    "chebyshev_polynomial_w": _chebyshev("w"),
    "shifted_chebyshev_polynomial_t": _chebyshev("t", shifted=True),
    "shifted_chebyshev_polynomial_u": _chebyshev("u", shifted=True),
    "shifted_chebyshev_polynomial_v": _chebyshev("v", shifted=True),
    "shifted_chebyshev_polynomial_w": _chebyshev("w", shifted=True),
    "hermite_polynomial_h": _hermite(True),
    "hermite_polynomial_he": _hermite(False),
    "laguerre_polynomial_l": _laguerre,
    "legendre_polynomial_p": _legendre,
}
for _name, _fn in _POLYNOMIALS.items():
    for _overload in ("out", "x_scalar_out", "n_scalar_out"):
        register_kernel(f"aten::special_{_name}.{_overload}", _fn, nargs=3)
