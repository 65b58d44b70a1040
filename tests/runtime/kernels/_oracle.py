"""What the kernel tests share: dtype maps, NumPy copies of torch tensors, calling a kernel the executor's way."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from edgetorch.runtime.kernels.registry import KERNELS

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


TOL = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.float64: dict(rtol=1e-12, atol=1e-12),
    torch.float16: dict(rtol=1e-3, atol=1e-3),
    torch.bfloat16: dict(rtol=1e-2, atol=1e-2),
}


def call(name: str, *args, out_like):
    """Run kernel ``name`` on ``args`` with outs planned like ``out_like`` (a tensor or a tuple of tensors)."""
    likes = out_like if isinstance(out_like, tuple) else (out_like,)
    outs = [np.empty(tuple(t.shape), to_numpy(t).dtype) for t in likes]
    fn, nargs = KERNELS[name]
    assert nargs == len(args) + len(outs)
    result = fn(*[to_numpy(a) if isinstance(a, torch.Tensor) else a for a in args], *outs)
    results = result if isinstance(result, tuple) else (result,)
    assert all(np.shares_memory(r, o) for r, o in zip(results, outs))
    return result


def check(result: np.ndarray, expected: torch.Tensor, exact: bool = False, tolerances: dict | None = None) -> None:
    """``result`` has ``expected``'s shape and dtype and its values (to a per-dtype tolerance; ints exactly)."""
    assert result.shape == tuple(expected.shape)
    assert result.dtype == to_numpy(expected).dtype
    tol = dict(rtol=0, atol=0) if exact else (tolerances or TOL).get(expected.dtype, dict(rtol=0, atol=0))
    np.testing.assert_allclose(result.astype(np.float64), expected.double().numpy(), **tol)
