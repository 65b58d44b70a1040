"""What the kernel tests share: torch dtype -> NumPy dtype, and NumPy copies of torch tensors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

NUMPY_OF = {
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.float16: np.float16,
    torch.bfloat16: ml_dtypes.bfloat16,
    torch.int8: np.int8,
    torch.int16: np.int16,
    torch.int32: np.int32,
    torch.int64: np.int64,
    torch.uint8: np.uint8,
    torch.bool: np.bool_,
}


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A NumPy copy of ``t`` with the matching dtype (bfloat16 via ml_dtypes)."""
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.numpy().copy()
