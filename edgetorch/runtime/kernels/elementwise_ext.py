"""Element-wise ops outside Core ATen: copysign, fmax/fmin, hypot, nextafter, ldexp, frexp, signbit, exp2,
logaddexp(2), float_power, heaviside, xlogy, xlog1py, entr and sinc.

Same conventions as :mod:`elementwise`: operands broadcast, arithmetic runs in torch's opmath dtype
(float32 for float16/bfloat16 results) and the result is rounded once into ``out``. Imports only NumPy and
the runtime's own modules.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from edgetorch.runtime.kernels.elementwise import quiet
from edgetorch.runtime.kernels.promotion import as_dtype, compute_dtype, is_float, scalar
from edgetorch.runtime.kernels.registry import kernel, register_kernel
from edgetorch.runtime.memory import resize

Number = bool | int | float
Operand = np.ndarray | Number
_BOOL = np.dtype(np.bool_)


def _operand(x: Operand, dtype: np.dtype) -> np.ndarray | np.generic:
    return as_dtype(x, dtype) if isinstance(x, np.ndarray) else scalar(x, dtype)


def _store(out: np.ndarray, shape: tuple[int, ...], value: np.ndarray | np.generic) -> np.ndarray:
    out = resize(out, shape)
    np.copyto(out, value, casting="unsafe")
    return out


def _heaviside(x, values):
    return np.where(x == 0, values, x > 0)


def _xlogy(x, y):
    value = np.where(x == 0, 0, x * np.log(y))
    return np.where(np.isnan(y), y, value)


def _xlog1py(x, y):
    value = np.where(x == 0, 0, x * np.log1p(y))
    return np.where(np.isnan(y), y, value)


def _ldexp(x, e):
    return x * np.exp2(e)


_BINARY: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "copysign": (np.copysign, ("out", "Scalar_out")),
    "fmax": (np.fmax, ("out",)),
    "fmin": (np.fmin, ("out",)),
    "hypot": (np.hypot, ("out",)),
    "ldexp": (_ldexp, ("out",)),
    "logaddexp": (np.logaddexp, ("out",)),
    "logaddexp2": (np.logaddexp2, ("out",)),
    "float_power": (np.power, ("Tensor_Tensor_out", "Tensor_Scalar_out", "Scalar_out")),
    "heaviside": (_heaviside, ("out",)),
    "xlogy": (_xlogy, ("OutTensor", "OutScalar_Self", "OutScalar_Other")),
    "special_xlog1py": (_xlog1py, ("out", "self_scalar_out", "other_scalar_out")),
}


def _binary_kernel(fn: Callable) -> Callable:
    @quiet
    def run(self: Operand, other: Operand, out: np.ndarray) -> np.ndarray:
        ct = compute_dtype(out.dtype)
        shape = np.broadcast_shapes(np.shape(self), np.shape(other))
        return _store(out, shape, fn(_operand(self, ct), _operand(other, ct)))

    return run


for _name, (_fn, _overloads) in _BINARY.items():
    for _overload in _overloads:
        register_kernel(f"aten::{_name}.{_overload}", _binary_kernel(_fn))


def _entr(x):
    value = np.where(x > 0, -x * np.log(np.where(x > 0, x, 1)), np.where(x == 0, 0, -np.inf))
    return np.where(np.isnan(x), x, value)


_UNARY: dict[str, Callable] = {"exp2": np.exp2, "sinc": np.sinc, "special_entr": _entr}


def _unary_kernel(fn: Callable) -> Callable:
    @quiet
    def run(self: np.ndarray, out: np.ndarray) -> np.ndarray:
        return _store(out, self.shape, fn(as_dtype(self, compute_dtype(out.dtype))))

    return run


for _name, _fn in _UNARY.items():
    register_kernel(f"aten::{_name}.out", _unary_kernel(_fn))


@kernel("aten::signbit.out")
def signbit(self: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Whether the sign bit is set (true for -0.0 and negative NaNs); x < 0 for integers."""
    x = as_dtype(self, np.dtype(np.float32)) if is_float(self.dtype) and self.dtype.kind != "f" else self
    value = np.signbit(x) if x.dtype.kind == "f" else (x < 0 if x.dtype != _BOOL else np.zeros(x.shape, bool))
    return _store(out, self.shape, value)


@kernel("aten::frexp.Tensor_out")
def frexp(self: np.ndarray, mantissa: np.ndarray, exponent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x = mantissa * 2**exponent with 0.5 <= |mantissa| < 1 (mantissa 0 and exponent 0 for 0)."""
    x = self if self.dtype.kind == "f" else as_dtype(self, np.dtype(np.float32))
    m, e = np.frexp(x)
    return _store(mantissa, self.shape, m), _store(exponent, self.shape, e)


@kernel("aten::nextafter.out")
def nextafter(self: np.ndarray, other: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The next representable value of ``out``'s dtype after ``self`` toward ``other``."""
    shape = np.broadcast_shapes(self.shape, other.shape)
    a = np.broadcast_to(as_dtype(self, out.dtype), shape)
    b = np.broadcast_to(as_dtype(other, out.dtype), shape)
    if out.dtype.kind == "f":
        return _store(out, shape, np.nextafter(a, b))
    # bfloat16 (NumPy has no nextafter for it): step the bit pattern, which orders like the value per sign.
    af, bf = a.astype(np.float32), b.astype(np.float32)
    bits = a.view(np.int16).astype(np.int32)
    away = (bf > af) == (af > 0)
    stepped = np.where(af == 0, np.where(bf > 0, 1, 0x8001), bits + np.where(away, 1, -1))
    value = stepped.astype(np.uint16).view(out.dtype)
    value = np.where(af == bf, b, np.where(np.isnan(af) | np.isnan(bf), np.nan, value))
    return _store(out, shape, value)


@kernel("aten::angle.out")
def angle(self: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The argument of a number: of a complex one its phase in (-pi, pi]; of a real one 0 for non-negative
    values, pi for negative ones, NaN kept."""
    if self.dtype.kind == "c":
        return _store(out, self.shape, np.angle(self))
    x = np.asarray(self, compute_dtype(out.dtype) if is_float(out.dtype) else np.float32)
    return _store(out, self.shape, np.where(np.isnan(x), x, np.where(x < 0, np.pi, 0.0)))


@kernel("aten::hash_tensor.out")
def hash_tensor(self: np.ndarray, dim: list[int], keepdim: bool, mode: int, out: np.ndarray) -> np.ndarray:
    """XOR over ``dim`` (all dims when empty) of the elements' 64-bit patterns, floats as float64 and integers
    as int64 (mode 0, xor_sum, the only mode torch has)."""
    if mode != 0:
        raise ValueError(f"hash_tensor: mode must be 0 (xor_sum), got {mode}")
    wide = np.asarray(self, np.float64 if is_float(self.dtype) else np.int64)
    bits = np.ascontiguousarray(wide).view(np.uint64)
    axes = tuple(d % max(self.ndim, 1) for d in dim) if dim else tuple(range(self.ndim))
    value = np.bitwise_xor.reduce(bits, axis=axes, keepdims=bool(keepdim)) if self.ndim else bits  # type: ignore[call-overload]  # numpy's stubs reject a tuple axis for reduce
    return _store(out, np.shape(value), value)
