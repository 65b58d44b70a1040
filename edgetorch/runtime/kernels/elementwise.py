"""Element-wise kernels: unary math, activations, binary arithmetic, comparisons, logic, clamp, where.

Most ops are rows of a table (op name -> NumPy ufunc or small function); a few drivers turn a row
into a registered kernel that broadcasts, resizes ``out``, computes in torch's "opmath" dtype
(float32 for float16/bfloat16 results, see :mod:`promotion`) and writes into ``out``. Float32
results are written straight into ``out`` with ``out=``; other dtypes go through one temporary.
Imports only NumPy and the runtime's own modules.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from edgetorch.errors import InvalidArgumentError
from edgetorch.runtime.kernels.promotion import (
    as_dtype,
    compute_dtype,
    is_float,
    is_reduced_float,
    result_type,
    scalar,
)
from edgetorch.runtime.kernels.registry import kernel, register_kernel
from edgetorch.runtime.memory import resize
from edgetorch.runtime.ops import activation
from edgetorch.runtime.ops.numeric import erf, select_into

Number = bool | int | float
Operand = np.ndarray | Number
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_BOOL = np.dtype(np.bool_)


def quiet(fn: Callable) -> Callable:
    """Run ``fn`` with NumPy's floating-point and integer-division warnings off (torch gives inf/nan silently)."""

    @functools.wraps(fn)
    def run(*args):
        with np.errstate(all="ignore"):
            return fn(*args)

    return run


def _into(out: np.ndarray, ct: np.dtype, fn: Callable, *args) -> np.ndarray:
    """Call ``fn(*args, out=...)`` so that its ``ct`` result lands in ``out`` (directly when dtypes match)."""
    if out.ndim == 0:
        # Ufuncs return NumPy scalars for 0-d operands, which cannot serve as out=; use 1-element views.
        flat = [a.reshape(1) if isinstance(a, np.ndarray) else a for a in args]
        _into(out.reshape(1), ct, fn, *flat)
        return out
    if out.dtype == ct:
        fn(*args, out=out)
        return out
    tmp = np.empty(out.shape, ct)
    fn(*args, out=tmp)
    np.copyto(out, tmp, casting="unsafe")
    return out


def _operand(x: Operand, dtype: np.dtype) -> np.ndarray | np.generic:
    return as_dtype(x, dtype) if isinstance(x, np.ndarray) else scalar(x, dtype)


def _shape(*xs: Operand | None) -> tuple[int, ...]:
    return np.broadcast_shapes(*(x.shape for x in xs if isinstance(x, np.ndarray)))


# ---------------------------------------------------------------------------------------------
# Unary functions: f(x, out) with x already in the compute dtype.


def _sign(x, out):
    if x.dtype == _BOOL:
        return np.copyto(out, x)
    np.sign(x, out=out)
    if is_float(x.dtype):
        out[np.isnan(x)] = 0  # torch.sign(nan) is 0
    return out


def _rsqrt(x, out):
    np.sqrt(x, out=out)
    return np.reciprocal(out, out=out)


def _reciprocal(x, out):
    return np.divide(x.dtype.type(1), x, out=out)


def _sigmoid(x, out):
    np.negative(x, out=out)
    np.exp(out, out=out)
    out += x.dtype.type(1)
    return np.reciprocal(out, out=out)


def _relu(x, out):
    if x.dtype.kind == "f":  # np.clip is the faster of the two for floats (docs/benchmarks.md)
        return np.clip(x, x.dtype.type(0), x.dtype.type(np.inf), out=out)
    return np.maximum(x, x.dtype.type(0), out=out)


def _silu(x, out):
    s = _sigmoid(x, np.empty_like(x))
    return np.multiply(x, s, out=out)


def _hardsigmoid(x, out):
    t = x + x.dtype.type(3)
    np.clip(t, 0, 6, out=t)
    return np.divide(t, x.dtype.type(6), out=out)


def _hardswish(x, out):
    t = _hardsigmoid(x, np.empty_like(x))
    return np.multiply(x, t, out=out)


def _integral(ufunc: np.ufunc) -> Callable:
    """Rounding ufuncs leave integer tensors as they are."""

    def run(x, out):
        if x.dtype.kind in "iub":
            return np.copyto(out, x)
        return ufunc(x, out=out)

    return run


def _bitwise_not(x, out):
    return np.logical_not(x, out=out) if x.dtype == _BOOL else np.invert(x, out=out)


_UNARY: dict[str, Callable] = {
    "abs": np.absolute,
    "neg": np.negative,
    "sign": _sign,
    "sqrt": np.sqrt,
    "rsqrt": _rsqrt,
    "reciprocal": _reciprocal,
    "exp": np.exp,
    "expm1": np.expm1,
    "log": np.log,
    "log10": np.log10,
    "log1p": np.log1p,
    "log2": np.log2,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "erf": erf,
    "ceil": _integral(np.ceil),
    "floor": _integral(np.floor),
    "round": _integral(np.rint),
    "trunc": _integral(np.trunc),
    "bitwise_not": _bitwise_not,
    "sigmoid": _sigmoid,
    "relu": _relu,
    "silu": _silu,
    "hardsigmoid": _hardsigmoid,
    "hardswish": _hardswish,
    "_conj_physical": np.conjugate,  # the identity on real tensors
    "_conj_copy": np.conjugate,
}


def _unary_kernel(fn: Callable) -> Callable:
    def run(self, out):
        out = resize(out, self.shape)
        if self.dtype.kind == "c" and out.dtype.kind != "c":  # abs of a complex tensor: computed in complex
            np.copyto(out, fn(self), casting="unsafe")
            return out
        ct = compute_dtype(out.dtype)
        return _into(out, ct, fn, as_dtype(self, ct))

    return run


_HOT_UNARY = {"abs", "neg", "relu", "sigmoid", "tanh"}
for _name, _fn in _UNARY.items():
    _k = _unary_kernel(_fn)
    register_kernel(f"aten::{_name}.out", _k if _name in _HOT_UNARY else quiet(_k))


def _predicate_kernel(fn: Callable) -> Callable:
    """Unary ops with a boolean result, computed in the input's own dtype."""

    def run(self, out):
        out = resize(out, self.shape)
        x = as_dtype(self, _F32) if is_reduced_float(self.dtype) else self
        return _into(out, _BOOL, fn, x)

    return run


def _isnan(x, out):
    return np.isnan(x, out=out) if is_float(x.dtype) else np.copyto(out, False)


def _isinf(x, out):
    return np.isinf(x, out=out) if is_float(x.dtype) else np.copyto(out, False)


_PREDICATES: dict[str, Callable] = {"isnan": _isnan, "isinf": _isinf, "logical_not": np.logical_not}
for _name, _fn in _PREDICATES.items():
    register_kernel(f"aten::{_name}.out", _predicate_kernel(_fn))


# ---------------------------------------------------------------------------------------------
# Unary ops with parameters.


def _apply(self: np.ndarray, out: np.ndarray, fn: Callable, *params) -> np.ndarray:
    out = resize(out, self.shape)
    ct = compute_dtype(out.dtype)
    return _into(out, ct, fn, as_dtype(self, ct), *params)


@kernel("aten::gelu.out")
@quiet
def gelu(self: np.ndarray, approximate: str, out: np.ndarray) -> np.ndarray:
    """GELU, exact (``approximate='none'``) or with torch's tanh approximation."""
    if approximate not in ("none", "tanh"):
        raise InvalidArgumentError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _apply(self, out, _gelu, approximate)


def _gelu(x: np.ndarray, approximate: str, out: np.ndarray) -> np.ndarray:
    activation.gelu(x, out, approximate)()
    return out


def _clamp(x, lo, hi, out):
    if x.dtype.kind == "f" and (lo is not None or hi is not None):
        # One np.clip pass (NaN propagates, lo > hi gives hi as in torch) instead of maximum + minimum.
        inf = x.dtype.type(np.inf)
        return np.clip(x, -inf if lo is None else lo, inf if hi is None else hi, out=out)
    src = x
    if lo is not None:
        src = np.maximum(src, lo, out=out)
    if hi is not None:
        src = np.minimum(src, hi, out=out)
    if src is x:
        np.copyto(out, x)
    return out


def _clamp_bound(bound: Number | None, dtype: np.dtype) -> np.generic | None:
    return None if bound is None else scalar(bound, dtype)


@kernel("aten::clamp.out")
def clamp(self: np.ndarray, min: Number | None, max: Number | None, out: np.ndarray) -> np.ndarray:
    """Clamp to scalar bounds (either may be None); NaN stays NaN, and min > max gives max like torch."""
    ct = compute_dtype(out.dtype)
    return _apply(self, out, _clamp, _clamp_bound(min, ct), _clamp_bound(max, ct))


@kernel("aten::hardtanh.out")
def hardtanh(self: np.ndarray, min_val: Number, max_val: Number, out: np.ndarray) -> np.ndarray:
    """Clamp to [min_val, max_val]."""
    return clamp(self, min_val, max_val, out)


@kernel("aten::clamp.Tensor_out")
def clamp_tensor(self: np.ndarray, min: np.ndarray | None, max: np.ndarray | None, out: np.ndarray) -> np.ndarray:
    """Clamp to element-wise tensor bounds, broadcast together with ``self``."""
    out = resize(out, _shape(self, min, max))
    ct = compute_dtype(out.dtype)
    lo = None if min is None else as_dtype(min, ct)
    hi = None if max is None else as_dtype(max, ct)
    x = np.broadcast_to(as_dtype(self, ct), out.shape)
    return _into(out, ct, _clamp, x, lo, hi)


def _leaky_relu(x, slope, out):
    # For a finite nonzero slope, x or slope * x is the larger (slope < 1) or smaller (slope > 1) of the
    # two on each side of zero: one max/min pass instead of a masked copy, NaN propagating.
    if math.isfinite(slope) and slope != 0:
        np.multiply(x, x.dtype.type(slope), out=out)
        return (np.maximum if slope < 1 else np.minimum)(x, out, out=out)
    scaled = np.multiply(x, x.dtype.type(slope))
    return select_into(out, np.greater(x, 0), x, scaled)


@kernel("aten::leaky_relu.out")
def leaky_relu(self: np.ndarray, negative_slope: Number, out: np.ndarray) -> np.ndarray:
    """x where x > 0, else negative_slope * x."""
    return _apply(self, out, _leaky_relu, negative_slope)


def _elu(x, alpha, scale, input_scale, out):
    # scale * max(x, 0) + alpha * scale * expm1(min(x, 0) * input_scale): one side of the sum is
    # exactly 0 for every x, so no masked copy is needed and NaN/inf come out as torch's.
    t = np.minimum(x, x.dtype.type(0))
    t *= x.dtype.type(input_scale)
    np.expm1(t, out=t)
    t *= x.dtype.type(alpha * scale)
    np.maximum(x, x.dtype.type(0), out=out)
    out *= x.dtype.type(scale)
    out += t
    return out


@kernel("aten::elu.out")
@quiet
def elu(self: np.ndarray, alpha: Number, scale: Number, input_scale: Number, out: np.ndarray) -> np.ndarray:
    """scale * x where x > 0, else scale * alpha * (exp(x * input_scale) - 1)."""
    return _apply(self, out, _elu, alpha, scale, input_scale)


def _logit(x, eps, out):
    if eps is not None:
        x = np.clip(x, x.dtype.type(eps), x.dtype.type(1 - eps))
    t = np.subtract(x.dtype.type(1), x)
    np.divide(x, t, out=out)
    return np.log(out, out=out)


@kernel("aten::logit.out")
@quiet
def logit(self: np.ndarray, eps: float | None, out: np.ndarray) -> np.ndarray:
    """log(x / (1 - x)), with x first clamped to [eps, 1 - eps] when eps is given."""
    return _apply(self, out, _logit, eps)


def _softplus(x, beta, threshold, out):
    t = np.multiply(x, x.dtype.type(beta))
    linear = t > threshold
    np.exp(t, out=t)
    np.log1p(t, out=t)
    np.divide(t, x.dtype.type(beta), out=out)
    return np.copyto(out, x, where=linear)  # a masked copy is cheap here: the mask is almost all false


@kernel("aten::softplus.out")
@quiet
def softplus(self: np.ndarray, beta: Number, threshold: Number, out: np.ndarray) -> np.ndarray:
    """log(1 + exp(beta * x)) / beta, or x where beta * x > threshold."""
    return _apply(self, out, _softplus, beta, threshold)


def _round_decimals(x, decimals, out):
    if x.dtype.kind in "iub":
        return np.copyto(out, x)
    scale = x.dtype.type(10.0 ** abs(decimals))
    if decimals >= 0:
        np.multiply(x, scale, out=out)
        np.rint(out, out=out)
        return np.divide(out, scale, out=out)
    np.divide(x, scale, out=out)
    np.rint(out, out=out)
    return np.multiply(out, scale, out=out)


@kernel("aten::log_sigmoid_forward.output")
@quiet
def log_sigmoid_forward(self: np.ndarray, output: np.ndarray, buffer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), stable at both ends; ``buffer`` gets exp(-|x|)."""
    output, buffer = resize(output, self.shape), resize(buffer, self.shape)
    ct = compute_dtype(output.dtype)
    x = as_dtype(self, ct)
    e = np.exp(np.negative(np.absolute(x)))
    t = np.minimum(x, ct.type(0))
    t -= np.log1p(e)
    np.copyto(output, t, casting="unsafe")
    np.copyto(buffer, e, casting="unsafe")
    return output, buffer


@kernel("aten::round.decimals_out")
@quiet
def round_decimals(self: np.ndarray, decimals: int, out: np.ndarray) -> np.ndarray:
    """Round half to even at ``decimals`` decimal places (negative: to tens, hundreds, ...)."""
    return _apply(self, out, _round_decimals, decimals)


@kernel("aten::glu.out")
@quiet
def glu(self: np.ndarray, dim: int, out: np.ndarray) -> np.ndarray:
    """a * sigmoid(b), where a and b are the two halves of ``self`` along ``dim``."""
    half = self.shape[dim] // 2
    a, b = np.split(self, [half], axis=dim)
    out = resize(out, a.shape)
    ct = compute_dtype(out.dtype)
    gate = _sigmoid(as_dtype(b, ct), np.empty(a.shape, ct))
    return _into(out, ct, np.multiply, as_dtype(a, ct), gate)


# ---------------------------------------------------------------------------------------------
# Binary arithmetic: f(a, b, out) with operands already in the compute dtype.


def _trunc_divide(a, b, out):
    if is_float(out.dtype):
        np.divide(a, b, out=out)
        return np.trunc(out, out=out)
    exact = np.subtract(a, np.fmod(a, b))
    return np.floor_divide(exact, b, out=out)


def _pow(a, b, out):
    if out.dtype == _BOOL:
        return np.logical_or(a, np.logical_not(b), out=out)  # x**0 is 1, x**1 is x
    if is_float(out.dtype) or not np.any(np.less(b, 0)):
        return np.power(a, b, out=out)
    # NumPy refuses negative integer powers; torch gives 1 for base 1, +-1 for base -1, else 0.
    negative = np.less(b, 0)
    np.power(a, np.maximum(b, 0), out=out)
    odd = np.bitwise_and(b, 1).astype(bool)
    special = np.where(np.equal(a, 1) | (np.equal(a, -1) & ~odd), 1, np.where(np.equal(a, -1), -1, 0))
    return np.copyto(out, special.astype(out.dtype), where=negative)


_BINARY: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "mul": (np.multiply, ("out", "Scalar_out")),
    "div": (np.true_divide, ("out", "Scalar_out")),
    "atan2": (np.arctan2, ("out",)),
    "maximum": (np.maximum, ("out",)),
    "minimum": (np.minimum, ("out",)),
    "max": (np.maximum, ("out",)),  # the two-tensor overloads of max/min are maximum/minimum
    "min": (np.minimum, ("out",)),
    "fmod": (np.fmod, ("Tensor_out", "Scalar_out")),
    "remainder": (np.remainder, ("Tensor_out", "Scalar_out")),
    "floor_divide": (np.floor_divide, ("out", "Scalar_out")),
    "pow": (_pow, ("Tensor_Tensor_out", "Tensor_Scalar_out", "Scalar_out")),
    "bitwise_and": (np.bitwise_and, ("Tensor_out", "Scalar_out", "Scalar_Tensor_out")),
    "bitwise_or": (np.bitwise_or, ("Tensor_out", "Scalar_out", "Scalar_Tensor_out")),
    "bitwise_xor": (np.bitwise_xor, ("Tensor_out", "Scalar_out", "Scalar_Tensor_out")),
    "bitwise_left_shift": (np.left_shift, ("Tensor_out", "Tensor_Scalar_out", "Scalar_Tensor_out")),
    "bitwise_right_shift": (np.right_shift, ("Tensor_out", "Tensor_Scalar_out", "Scalar_Tensor_out")),
}


def _binary_kernel(fn: Callable) -> Callable:
    def run(self, other, out):
        out = resize(out, _shape(self, other))
        ct = compute_dtype(out.dtype)
        return _into(out, ct, fn, _operand(self, ct), _operand(other, ct))

    return run


_HOT_BINARY = {"mul", "maximum", "minimum", "max", "min"}
for _name, (_fn, _overloads) in _BINARY.items():
    _k = _binary_kernel(_fn)
    _k = _k if _name in _HOT_BINARY else quiet(_k)
    for _overload in _overloads:
        register_kernel(f"aten::{_name}.{_overload}", _k)


def _add(a, b, alpha, out):
    if alpha != 1:
        b = np.multiply(b, alpha)
    return np.add(a, b, out=out)


def _sub(a, b, alpha, out):
    if alpha != 1:
        b = np.multiply(b, alpha)
    return np.subtract(a, b, out=out)


@kernel("aten::add.out", "aten::add.Scalar_out")
def add(self: np.ndarray, other: Operand, alpha: Number, out: np.ndarray) -> np.ndarray:
    """self + alpha * other."""
    out = resize(out, _shape(self, other))
    ct = compute_dtype(out.dtype)
    return _into(out, ct, _add, _operand(self, ct), _operand(other, ct), scalar(alpha, ct))


@kernel("aten::sub.out", "aten::sub.Scalar_out")
def sub(self: np.ndarray, other: Operand, alpha: Number, out: np.ndarray) -> np.ndarray:
    """self - alpha * other."""
    out = resize(out, _shape(self, other))
    ct = compute_dtype(out.dtype)
    return _into(out, ct, _sub, _operand(self, ct), _operand(other, ct), scalar(alpha, ct))


@kernel("aten::rsub.Scalar_out")
def rsub(self: np.ndarray, other: Number, alpha: Number, out: np.ndarray) -> np.ndarray:
    """other - alpha * self."""
    out = resize(out, self.shape)
    ct = compute_dtype(out.dtype)
    return _into(out, ct, _sub, scalar(other, ct), as_dtype(self, ct), scalar(alpha, ct))


_ROUNDING: dict[str | None, Callable] = {None: np.true_divide, "trunc": _trunc_divide, "floor": np.floor_divide}


@kernel("aten::div.out_mode", "aten::div.Scalar_mode_out")
@quiet
def div_mode(self: np.ndarray, other: Operand, rounding_mode: str | None, out: np.ndarray) -> np.ndarray:
    """Division rounded toward zero ('trunc'), down ('floor'), or not at all (None)."""
    if rounding_mode not in _ROUNDING:
        raise InvalidArgumentError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    return _binary_kernel(_ROUNDING[rounding_mode])(self, other, out)


# ---------------------------------------------------------------------------------------------
# Predicates: comparisons (computed in torch's promoted dtype) and logical ops (on truthiness).

_COMPARE = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}


def _compare_kernel(fn: Callable) -> Callable:
    def run(self, other, out):
        out = resize(out, _shape(self, other))
        ct = compute_dtype(result_type(self, other))
        return _into(out, _BOOL, fn, _operand(self, ct), _operand(other, ct))

    return run


for _name, _fn in _COMPARE.items():
    register_kernel(f"aten::{_name}.Tensor_out", _compare_kernel(_fn))
    register_kernel(f"aten::{_name}.Scalar_out", _compare_kernel(_fn))


def _logical_kernel(fn: Callable) -> Callable:
    def run(self, other, out):
        out = resize(out, _shape(self, other))
        a = as_dtype(self, _F32) if is_reduced_float(self.dtype) else self
        b = as_dtype(other, _F32) if is_reduced_float(other.dtype) else other
        return _into(out, _BOOL, fn, a, b)

    return run


for _name, _fn in {"logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor}.items():
    register_kernel(f"aten::{_name}.out", _logical_kernel(_fn))


# ---------------------------------------------------------------------------------------------
# Selection.


@kernel("aten::where.self_out")
def where(condition: np.ndarray, self: np.ndarray, other: np.ndarray, out: np.ndarray) -> np.ndarray:
    """self where condition, else other."""
    out = resize(out, _shape(condition, self, other))
    return select_into(out, as_dtype(condition, _BOOL), as_dtype(self, out.dtype), as_dtype(other, out.dtype))


@kernel("aten::masked_fill.Scalar_out")
def masked_fill(self: np.ndarray, mask: np.ndarray, value: Number, out: np.ndarray) -> np.ndarray:
    """self with ``value`` where mask is true."""
    out = resize(out, _shape(self, mask))
    fill = np.array(scalar(value, out.dtype))
    return select_into(out, as_dtype(mask, _BOOL), fill, as_dtype(self, out.dtype))
