"""Matrix kernels (mm, bmm, addmm, baddbmm, matmul, dot, linear, mv) and embedding lookup.

Every product is one ``np.matmul`` (BLAS for float32/float64) writing into the planned ``out``.
float16 and bfloat16 are computed in float32 and rounded once on store, as torch's CPU kernels do.
Imports only NumPy and the runtime's own modules.
"""

from __future__ import annotations

import numpy as np

from edgetorch.errors import OutOfRangeError
from edgetorch.runtime import rewrite_checks
from edgetorch.runtime.dtypes import BFLOAT16, LOW_PRECISION, store, upcast  # noqa: F401  (kernels import them here)
from edgetorch.runtime.kernels.registry import kernel
from edgetorch.runtime.memory import resize


def matmul_into(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``a @ b`` (NumPy matmul broadcasting) written into ``out``; BLAS straight into ``out`` when dtypes allow."""
    if a.dtype == b.dtype == out.dtype and out.dtype not in LOW_PRECISION:
        np.matmul(a, b, out=out)
        return out
    return store(out, np.matmul(upcast(a), upcast(b)))


def _product_shape(a: np.ndarray, b: np.ndarray) -> tuple[int, ...]:
    return np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])


def _scaled_sum_into(
    bias: np.ndarray, a: np.ndarray, b: np.ndarray, beta: float, alpha: float, out: np.ndarray
) -> np.ndarray:
    """``beta * bias + alpha * (a @ b)`` into ``out``; ``bias`` is ignored when ``beta`` is 0 (even NaNs)."""
    if out.dtype in LOW_PRECISION or out.dtype != a.dtype:
        value = np.matmul(upcast(a), upcast(b)) * alpha
        if beta != 0:
            value = value + upcast(bias) * beta
        return store(out, value)
    matmul_into(a, b, out)
    if alpha != 1:
        np.multiply(out, alpha, out=out, casting="unsafe")
    if beta == 1:
        np.add(out, bias, out=out, casting="unsafe")
    elif beta != 0:
        np.add(out, np.multiply(bias, beta), out=out, casting="unsafe")
    return out


@kernel("aten::mm.out", "aten::bmm.out")
def mm(self: np.ndarray, mat2: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Matrix product of two 2-d (mm) or two 3-d (bmm) tensors."""
    rewrite_checks.matmul("aten::mm.out/bmm.out", self.shape, mat2.shape)
    return matmul_into(self, mat2, resize(out, _product_shape(self, mat2)))


@kernel("aten::mm.dtype_out", "aten::bmm.dtype_out")
def mm_dtype(self: np.ndarray, mat2: np.ndarray, out_dtype: int, out: np.ndarray) -> np.ndarray:
    """mm/bmm with a wider result dtype (``out`` already has it)."""
    rewrite_checks.matmul("aten::mm.dtype_out/bmm.dtype_out", self.shape, mat2.shape)
    return matmul_into(self, mat2, resize(out, _product_shape(self, mat2)))


@kernel("aten::addmm.out", "aten::baddbmm.out")
def addmm(
    self: np.ndarray, mat1: np.ndarray, mat2: np.ndarray, beta: float, alpha: float, out: np.ndarray
) -> np.ndarray:
    """``beta * self + alpha * (mat1 @ mat2)``, ``self`` broadcast to the product's shape."""
    return _scaled_sum_into(self, mat1, mat2, beta, alpha, resize(out, _product_shape(mat1, mat2)))


@kernel("aten::addmm.dtype_out", "aten::baddbmm.dtype_out")
def addmm_dtype(
    self: np.ndarray, mat1: np.ndarray, mat2: np.ndarray, out_dtype: int, beta: float, alpha: float, out: np.ndarray
) -> np.ndarray:
    """addmm/baddbmm with a wider result dtype (``out`` already has it)."""
    return _scaled_sum_into(self, mat1, mat2, beta, alpha, resize(out, _product_shape(mat1, mat2)))


@kernel("aten::addbmm.out")
def addbmm(
    self: np.ndarray, batch1: np.ndarray, batch2: np.ndarray, beta: float, alpha: float, out: np.ndarray
) -> np.ndarray:
    """``beta * self + alpha * sum_b(batch1[b] @ batch2[b])``: the batch folded into the contraction."""
    n, k = batch1.shape[1], batch1.shape[0] * batch1.shape[2]
    a = batch1.transpose(1, 0, 2).reshape(n, k)
    b = batch2.reshape(k, batch2.shape[2])
    return _scaled_sum_into(self, a, b, beta, alpha, resize(out, (n, b.shape[1])))


@kernel("aten::matmul.out")
def matmul(self: np.ndarray, other: np.ndarray, out: np.ndarray) -> np.ndarray:
    """torch.matmul: 1-d operands are promoted and squeezed, leading dims broadcast (same rules as NumPy)."""
    a, b = self, other
    if a.ndim == 1 and b.ndim == 1:
        shape: tuple[int, ...] = ()
    elif a.ndim == 1:
        shape = b.shape[:-2] + b.shape[-1:]
    elif b.ndim == 1:
        shape = a.shape[:-1]
    else:
        shape = _product_shape(a, b)
    return matmul_into(a, b, resize(out, shape))


@kernel("aten::dot.out", "aten::vdot.out")
def dot(self: np.ndarray, other: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Inner product of two 1-d tensors (real dtypes, so vdot's conjugation is a no-op)."""
    return store(resize(out, ()), np.dot(upcast(self), upcast(other)))


@kernel("aten::mv.out")
def mv(self: np.ndarray, vec: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Matrix-vector product."""
    return matmul_into(self, vec, resize(out, self.shape[:1]))


@kernel("aten::addmv.out")
def addmv(self: np.ndarray, mat: np.ndarray, vec: np.ndarray, beta: float, alpha: float, out: np.ndarray) -> np.ndarray:
    """``beta * self + alpha * (mat @ vec)``."""
    return _scaled_sum_into(self, mat, vec, beta, alpha, resize(out, mat.shape[:1]))


@kernel("aten::linear.out")
def linear(input: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, out: np.ndarray) -> np.ndarray:
    """``input @ weight.T + bias`` over any leading dims of ``input``."""
    shape = input.shape[:-1] + weight.shape[:-1]
    if bias is None:
        return matmul_into(input, weight.T, resize(out, shape))
    return _scaled_sum_into(bias, input, weight.T, 1, 1, resize(out, shape))


@kernel("aten::embedding.out")
def embedding(
    weight: np.ndarray,
    indices: np.ndarray,
    padding_idx: int,
    scale_grad_by_freq: bool,
    sparse: bool,
    out: np.ndarray,
) -> np.ndarray:
    """Rows of ``weight`` picked by ``indices``; ``padding_idx`` and the gradient flags only matter in training."""
    out = resize(out, indices.shape + weight.shape[1:])
    if indices.size and (indices.min() < 0 or indices.max() >= weight.shape[0]):
        raise OutOfRangeError(
            f"embedding index out of range: indices must be in [0, {weight.shape[0]}), "
            f"found values in [{indices.min()}, {indices.max()}]"
        )
    if out.dtype == weight.dtype and out.flags.c_contiguous:
        np.take(weight, indices, axis=0, out=out, mode="clip")
        return out
    return store(out, np.take(weight, indices, axis=0))
