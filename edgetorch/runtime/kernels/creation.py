"""Creation and conversion kernels: fill, full, zeros/ones/empty, arange, linspace, rand/randn/randperm, and copies.

Every conversion casts like torch (floats truncate toward zero into integers, nonzero is True) and
every copy broadcasts its source into the planned ``out``. Imports only NumPy and the runtime.
"""

from __future__ import annotations

import math

import numpy as np

from edgetorch.errors import InvalidArgumentError
from edgetorch.runtime.kernels.elementwise import quiet
from edgetorch.runtime.kernels.promotion import compute_dtype, is_float, scalar
from edgetorch.runtime.kernels.registry import kernel
from edgetorch.runtime.memory import resize

Number = bool | int | float

_RNG = np.random.default_rng()


def seed(value: int) -> None:
    """Reseed the generator behind rand, randn and training-mode dropout (for reproducible runs)."""
    global _RNG
    _RNG = np.random.default_rng(value)


def _fill(out: np.ndarray, shape: tuple[int, ...] | list[int], value: Number) -> np.ndarray:
    out = resize(out, tuple(shape))
    out.fill(scalar(value, out.dtype))
    return out


@kernel("aten::fill.Scalar_out")
def fill(self: np.ndarray, value: Number, out: np.ndarray) -> np.ndarray:
    """A tensor shaped like ``self``, every element ``value``."""
    return _fill(out, self.shape, value)


@kernel("aten::fill.Tensor_out")
def fill_tensor(self: np.ndarray, value: np.ndarray, out: np.ndarray) -> np.ndarray:
    """A tensor shaped like ``self``, every element the 0-d tensor ``value``."""
    out = resize(out, self.shape)
    np.copyto(out, value, casting="unsafe")
    return out


@kernel("aten::full_like.out", shape_only=True)
def full_like(self: np.ndarray, fill_value: Number, memory_format: int | None, out: np.ndarray) -> np.ndarray:
    """A tensor shaped like ``self``, every element ``fill_value``."""
    return _fill(out, self.shape, fill_value)


@kernel("aten::full.out")
def full(size: list[int], fill_value: Number, out: np.ndarray) -> np.ndarray:
    """A tensor of shape ``size``, every element ``fill_value``."""
    return _fill(out, size, fill_value)


@kernel("aten::zeros.out")
def zeros(size: list[int], out: np.ndarray) -> np.ndarray:
    """Zeros of shape ``size``."""
    return _fill(out, size, 0)


@kernel("aten::ones.out")
def ones(size: list[int], out: np.ndarray) -> np.ndarray:
    """Ones of shape ``size``."""
    return _fill(out, size, 1)


@kernel("aten::zeros_like.out", shape_only=True)
def zeros_like(self: np.ndarray, memory_format: int | None, out: np.ndarray) -> np.ndarray:
    """Zeros shaped like ``self``."""
    return _fill(out, self.shape, 0)


@kernel("aten::ones_like.out", shape_only=True)
def ones_like(self: np.ndarray, memory_format: int | None, out: np.ndarray) -> np.ndarray:
    """Ones shaped like ``self``."""
    return _fill(out, self.shape, 1)


@kernel("aten::empty.out")
def empty(size: list[int], memory_format: int | None, out: np.ndarray) -> np.ndarray:
    """Uninitialised memory of shape ``size`` (the planned slot, resized)."""
    return resize(out, tuple(size))


@kernel("aten::empty_like.out")
def empty_like(self: np.ndarray, memory_format: int | None, out: np.ndarray) -> np.ndarray:
    """Uninitialised memory shaped like ``self``."""
    return resize(out, self.shape)


@kernel("aten::empty_strided.out")
def empty_strided(size: list[int], stride: list[int], out: np.ndarray) -> np.ndarray:
    """Uninitialised memory of shape ``size``; the layout is the planned ``out``'s, whatever ``stride`` asks."""
    return resize(out, tuple(size))


@kernel("aten::empty_permuted.out")
def empty_permuted(size: list[int], physical_layout: list[int], out: np.ndarray) -> np.ndarray:
    """Uninitialised memory of shape ``size``; the layout is the planned ``out``'s, whatever ``physical_layout`` asks."""
    return resize(out, tuple(size))


@kernel("dim_order_ops::_empty_dim_order.out")
def empty_dim_order(size: list[int], dim_order: list[int] | None, out: np.ndarray) -> np.ndarray:
    """Uninitialised memory of shape ``size``; the layout is the planned ``out``'s."""
    return resize(out, tuple(size))


@kernel("aten::scalar_tensor.out")
def scalar_tensor(s: Number, out: np.ndarray) -> np.ndarray:
    """A 0-d tensor holding ``s``."""
    return _fill(out, (), s)


def _arange(start: Number, end: Number, step: Number, out: np.ndarray) -> np.ndarray:
    if step == 0 or (end - start) * step < 0:
        raise InvalidArgumentError(
            f"arange: step {step} cannot go from {start} to {end}; use a step of the sign of end - start"
        )
    n = max(0, math.ceil((end - start) / step))
    out = resize(out, (n,))
    exact = all(isinstance(v, int) for v in (start, end, step))
    values: np.ndarray = np.arange(n, dtype=np.int64 if exact else np.float64)
    values *= step
    values += start
    np.copyto(out, values, casting="unsafe")
    return out


@kernel("aten::arange.out")
def arange(end: Number, out: np.ndarray) -> np.ndarray:
    """0, 1, ..., up to (not including) ``end``."""
    return _arange(0, end, 1, out)


@kernel("aten::arange.start_out")
def arange_start(start: Number, end: Number, step: Number, out: np.ndarray) -> np.ndarray:
    """start, start + step, ..., up to (not including) ``end``; computed in float64 then cast, like torch."""
    return _arange(start, end, step, out)


@kernel("aten::linspace.out")
def linspace(start: Number, end: Number, steps: int, out: np.ndarray) -> np.ndarray:
    """``steps`` evenly spaced values from ``start`` to ``end``, filled from both ends like torch."""
    if steps < 0:
        raise InvalidArgumentError(f"linspace: steps must be non-negative, got {steps}")
    out = resize(out, (steps,))
    ct = compute_dtype(out.dtype) if is_float(out.dtype) else np.dtype(np.float32)
    if not is_float(out.dtype):
        start, end = int(start), int(end)  # torch casts the ends to the integer dtype first
    step = (end - start) / (steps - 1) if steps > 1 else 0.0
    i = np.arange(steps, dtype=ct)
    values = start + i * ct.type(step)
    half = steps // 2
    values[half:] = end - (steps - 1 - i[half:]) * ct.type(step)
    np.copyto(out, values, casting="unsafe")
    return out


def _random(out: np.ndarray, size: list[int], draw) -> np.ndarray:
    out = resize(out, tuple(size))
    if out.dtype in (np.float32, np.float64) and out.flags.c_contiguous:
        draw(out.shape, dtype=out.dtype, out=out)
    else:
        np.copyto(out, draw(out.shape, dtype=np.float32), casting="unsafe")
    return out


@kernel("aten::rand.out", impure=True)
def rand(size: list[int], out: np.ndarray) -> np.ndarray:
    """Uniform samples in [0, 1) (NumPy's generator, so the values differ from torch's)."""
    return _random(out, size, _RNG.random)


@kernel("aten::randn.out", impure=True)
def randn(size: list[int], out: np.ndarray) -> np.ndarray:
    """Standard normal samples (NumPy's generator, so the values differ from torch's)."""
    return _random(out, size, _RNG.standard_normal)


@kernel("aten::randperm.out", impure=True)
def randperm(n: int, out: np.ndarray) -> np.ndarray:
    """A random permutation of 0 .. n-1 (NumPy's generator, so the order differs from torch's)."""
    if n < 0:
        raise InvalidArgumentError(f"randperm: n must be non-negative, got {n}")
    out = resize(out, (n,))
    np.copyto(out, _RNG.permutation(n), casting="unsafe")
    return out


@quiet
def _copy_into(out: np.ndarray, src: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    out = resize(out, shape)
    np.copyto(out, src, casting="unsafe")
    return out


@kernel("aten::_to_copy.out")
def to_copy(self: np.ndarray, non_blocking: bool, memory_format: int | None, out: np.ndarray) -> np.ndarray:
    """``self`` converted to ``out``'s dtype."""
    return _copy_into(out, self, self.shape)


@kernel(
    "dim_order_ops::_to_dim_order_copy.out",
    "dim_order_ops::_clone_dim_order.out",
)
def to_dim_order_copy(self: np.ndarray, non_blocking: bool, dim_order: list[int] | None, out: np.ndarray) -> np.ndarray:
    """``self`` converted to ``out``'s dtype; the layout (dim order) is the planned ``out``'s own strides."""
    return _copy_into(out, self, self.shape)


@kernel("aten::clone.out")
def clone(self: np.ndarray, memory_format: int | None, out: np.ndarray) -> np.ndarray:
    """A copy of ``self``."""
    return _copy_into(out, self, self.shape)


@kernel("et_copy::_h2d_copy.out", "et_copy::_d2h_copy.out")  # lift_fresh/detach/alias_copy: kernels.shape
def copy_of(self: np.ndarray, out: np.ndarray) -> np.ndarray:
    """A copy of ``self`` (these ops differ only in device, which the runtime has not)."""
    return _copy_into(out, self, self.shape)


@kernel("aten::copy.out")
def copy(self: np.ndarray, src: np.ndarray, non_blocking: bool, out: np.ndarray) -> np.ndarray:
    """``src`` broadcast to ``self``'s shape and cast to ``out``'s dtype."""
    return _copy_into(out, src, self.shape)


@kernel("aten::copy_")
def copy_(self: np.ndarray, src: np.ndarray, non_blocking: bool) -> np.ndarray:
    """In place: ``src`` broadcast and cast into ``self``, which is returned."""
    with np.errstate(all="ignore"):
        np.copyto(self, src, casting="unsafe")
    return self


@kernel("aten::native_dropout.out", impure=True)
def native_dropout(
    input: np.ndarray, p: float, train: bool | None, out0: np.ndarray, out1: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Dropout and its keep-mask: the identity and all-true in eval mode (``train`` False) or when p == 0."""
    out0 = resize(out0, input.shape)
    out1 = resize(out1, input.shape)
    if train is False or p == 0:
        np.copyto(out0, input, casting="unsafe")
        out1.fill(True)
        return out0, out1
    keep = _RNG.random(input.shape) >= p
    np.copyto(out1, keep, casting="unsafe")
    scale = 0.0 if p >= 1 else 1.0 / (1.0 - p)
    np.copyto(out0, np.where(keep, input * scale, 0), casting="unsafe")
    return out0, out1
