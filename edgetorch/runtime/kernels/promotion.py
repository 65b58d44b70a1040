"""PyTorch's type promotion and scalar conversion, for kernels that compute in NumPy. Torch-free.

The compiler fixes every ``out`` dtype, so most kernels only need :func:`compute_dtype`: the dtype
to do the arithmetic in so that, once cast to ``out``, the result is torch's. Predicates
(comparisons, ``isnan``) write ``bool`` whatever their inputs, so they need torch's
:func:`result_type` to know what to compare in.
"""

from __future__ import annotations

import numpy as np

from edgetorch.runtime.dtypes import BFLOAT16

Operand = np.ndarray | bool | int | float

_F32 = np.dtype(np.float32)
_REDUCED = (np.dtype(np.float16), BFLOAT16)
_INT64 = np.dtype(np.int64)
_BOOL = np.dtype(np.bool_)


def is_float(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is a floating-point type (bfloat16 included, which NumPy does not know as one)."""
    return dtype.kind == "f" or dtype == BFLOAT16


def is_reduced_float(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is float16 or bfloat16, which torch computes in float32 and rounds once."""
    return dtype in _REDUCED


def compute_dtype(out_dtype: np.dtype) -> np.dtype:
    """The dtype to compute in for a result of ``out_dtype`` (torch's "opmath" type)."""
    return _F32 if out_dtype in _REDUCED else out_dtype


def _category(dtype: np.dtype) -> int:
    if dtype == _BOOL:
        return 0
    return 2 if is_float(dtype) else 1


def promote_types(a: np.dtype, b: np.dtype) -> np.dtype:
    """torch.promote_types for real dtypes: a float beats any integer whatever their widths."""
    if a == b:
        return a
    fa, fb = is_float(a), is_float(b)
    if fa and fb:
        return _F32 if {a, b} == set(_REDUCED) else np.promote_types(a, b)
    if fa or fb:
        return a if fa else b
    return np.promote_types(a, b)


def _scalar_dtype(value: bool | int | float) -> np.dtype:
    if isinstance(value, bool):
        return _BOOL
    return _INT64 if isinstance(value, int) else _F32


def _combine(higher: np.dtype | None, lower: np.dtype | None) -> np.dtype | None:
    """Fold a lower-priority tier into a higher one: it only counts when its category is higher."""
    if higher is None:
        return lower
    if lower is None or _category(higher) == 2:
        return higher
    if higher == _BOOL or _category(lower) == 2:
        return promote_types(higher, lower)
    return higher


def result_type(*operands: Operand) -> np.dtype:
    """torch.result_type: tensors with dimensions, then 0-d tensors, then Python scalars, by category."""
    tiers: list[np.dtype | None] = [None, None, None]
    for x in operands:
        if isinstance(x, np.ndarray):
            tier, dtype = (0 if x.ndim else 1), x.dtype
        else:
            tier, dtype = 2, _scalar_dtype(x)
        seen = tiers[tier]
        tiers[tier] = dtype if seen is None else promote_types(seen, dtype)
    result = _combine(tiers[0], _combine(tiers[1], tiers[2]))
    return _BOOL if result is None else result


def scalar(value: bool | int | float, dtype: np.dtype) -> np.generic:
    """``value`` as a NumPy scalar of ``dtype``, wrapping or truncating like torch's scalar cast."""
    with np.errstate(all="ignore"):
        return np.asarray(value).astype(dtype)[()]  # type: ignore[return-value]  # [()] of a 0-d array is a scalar; NumPy's stubs say ndarray


def as_dtype(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``x`` in ``dtype``, without a copy when it already is."""
    return x if x.dtype == dtype else x.astype(dtype)
