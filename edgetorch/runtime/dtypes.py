"""ExecuTorch ScalarType <-> NumPy dtype. Torch-free; bfloat16 and float8 come from ml_dtypes."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from edgetorch.format.program import ScalarType

SCALAR_TO_NUMPY: dict[ScalarType, np.dtype] = {
    ScalarType.BYTE: np.dtype(np.uint8),
    ScalarType.CHAR: np.dtype(np.int8),
    ScalarType.SHORT: np.dtype(np.int16),
    ScalarType.INT: np.dtype(np.int32),
    ScalarType.LONG: np.dtype(np.int64),
    ScalarType.HALF: np.dtype(np.float16),
    ScalarType.FLOAT: np.dtype(np.float32),
    ScalarType.DOUBLE: np.dtype(np.float64),
    ScalarType.COMPLEX64: np.dtype(np.complex64),
    ScalarType.COMPLEX128: np.dtype(np.complex128),
    ScalarType.BOOL: np.dtype(np.bool_),
    ScalarType.QINT8: np.dtype(np.int8),
    ScalarType.QUINT8: np.dtype(np.uint8),
    ScalarType.QINT32: np.dtype(np.int32),
    ScalarType.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    ScalarType.BITS16: np.dtype(np.uint16),
    ScalarType.FLOAT8E5M2: np.dtype(ml_dtypes.float8_e5m2),
    ScalarType.FLOAT8E4M3FN: np.dtype(ml_dtypes.float8_e4m3fn),
    ScalarType.FLOAT8E5M2FNUZ: np.dtype(ml_dtypes.float8_e5m2fnuz),
    ScalarType.FLOAT8E4M3FNUZ: np.dtype(ml_dtypes.float8_e4m3fnuz),
    ScalarType.UINT16: np.dtype(np.uint16),
    ScalarType.UINT32: np.dtype(np.uint32),
    ScalarType.UINT64: np.dtype(np.uint64),
}

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


def numpy_dtype(code: int | ScalarType) -> np.dtype:
    """The NumPy dtype for a ScalarType code (as stored in tensors and in ``dtype`` arguments)."""
    try:
        return SCALAR_TO_NUMPY[ScalarType(code)]
    except (KeyError, ValueError):
        raise ValueError(f"scalar type {code} has no NumPy equivalent in this runtime") from None


LOW_PRECISION = (np.dtype(np.float16), BFLOAT16)
"""Float types kernels compute in float32 and round back to."""


def upcast(x: np.ndarray) -> np.ndarray:
    """``x`` in the dtype kernels compute in: float32 for float16/bfloat16, unchanged otherwise."""
    return x.astype(np.float32) if x.dtype in LOW_PRECISION else x


def store(out: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Write ``value`` into ``out`` (rounding to ``out``'s dtype) and return ``out``."""
    np.copyto(out, value, casting="unsafe")
    return out
