"""Complex tensors: ATen's three FFT primitives (which every ``torch.fft.*`` function lowers to), complex, polar.

``_fft_r2c`` (real to complex, optionally one-sided), ``_fft_c2r`` (one-sided complex to real) and
``_fft_c2c`` (complex to complex, either direction) over a list of dims, computed with ``numpy.fft``.
Each computes the unscaled transform and then applies ATen's ``normalization`` code: 0 leaves it unscaled,
1 multiplies by 1/sqrt(n), 2 by 1/n, where n is the number of points of the signal (the product of the
transformed dims' lengths; for ``c2r``, of the real output's). Complex tensors are complex64/complex128.
Imports only NumPy and the runtime's own modules.
"""

from __future__ import annotations

import math

import numpy as np

from edgetorch.errors import InvalidArgumentError
from edgetorch.runtime.kernels.registry import kernel, wrap_dim
from edgetorch.runtime.kernels.shape import copy_into
from edgetorch.runtime.memory import resize


def _axes(dim: list[int], ndim: int) -> tuple[int, ...]:
    return tuple(wrap_dim(d, ndim) for d in dim)


def _scaled(value: np.ndarray, normalization: int, points: int) -> np.ndarray:
    if normalization == 0:
        return value
    if normalization == 1:
        return value * (1.0 / math.sqrt(points))
    if normalization == 2:
        return value * (1.0 / points)
    raise InvalidArgumentError(
        f"FFT normalization must be 0 (none), 1 (1/sqrt(n)) or 2 (1/n), got {normalization}; "
        "the program was written by a tool that does not follow ATen's fft_norm_mode"
    )


def _points(shape: tuple[int, ...], axes: tuple[int, ...]) -> int:
    return math.prod(shape[a] for a in axes) if axes else 1


@kernel("aten::_fft_r2c.out")
def fft_r2c(self: np.ndarray, dim: list[int], normalization: int, onesided: bool, out: np.ndarray) -> np.ndarray:
    """Forward transform of a real tensor over ``dim``; one-sided keeps n//2 + 1 bins of the last dim."""
    axes = _axes(dim, self.ndim)
    x = self.astype(np.float64 if out.dtype == np.complex128 else np.float32, copy=False)
    value = np.fft.rfftn(x, axes=axes) if onesided and axes else np.fft.fftn(x, axes=axes)
    return copy_into(out, _scaled(value, normalization, _points(self.shape, axes)))


@kernel("aten::_fft_c2r.out")
def fft_c2r(self: np.ndarray, dim: list[int], normalization: int, last_dim_size: int, out: np.ndarray) -> np.ndarray:
    """Inverse of a one-sided transform over ``dim``: a real tensor whose last transformed dim has
    ``last_dim_size`` points (unscaled: the caller's ``normalization`` supplies the 1/n)."""
    axes = _axes(dim, self.ndim)
    if not axes:
        return copy_into(out, self.real)
    sizes = [self.shape[a] for a in axes[:-1]] + [last_dim_size]
    value = np.fft.irfftn(self, s=sizes, axes=axes, norm="forward")
    return copy_into(out, _scaled(value, normalization, math.prod(sizes)))


@kernel("aten::_fft_c2c.out")
def fft_c2c(self: np.ndarray, dim: list[int], normalization: int, forward: bool, out: np.ndarray) -> np.ndarray:
    """Forward (``forward``) or inverse transform of a complex tensor over ``dim``, unscaled before
    ``normalization``."""
    axes = _axes(dim, self.ndim)
    if not axes:
        return copy_into(out, self)
    value = np.fft.fftn(self, axes=axes) if forward else np.fft.ifftn(self, axes=axes, norm="forward")
    return copy_into(out, _scaled(value, normalization, _points(self.shape, axes)))


@kernel("aten::complex.out")
def complex_(real: np.ndarray, imag: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The complex tensor ``real + i*imag`` (broadcast)."""
    out = resize(out, np.broadcast_shapes(real.shape, imag.shape))
    np.copyto(out.real, real, casting="unsafe")
    np.copyto(out.imag, imag, casting="unsafe")
    return out


@kernel("aten::polar.out")
def polar(abs: np.ndarray, angle: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The complex tensor ``abs * (cos(angle) + i*sin(angle))`` (broadcast)."""
    out = resize(out, np.broadcast_shapes(abs.shape, angle.shape))
    np.multiply(abs, np.cos(angle), out=out.real, casting="unsafe")
    np.multiply(abs, np.sin(angle), out=out.imag, casting="unsafe")
    return out
