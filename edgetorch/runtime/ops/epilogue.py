"""GEMM epilogues, declared once for every runtime: what a matrix product's output goes through before anyone
reads it. The bias added to every row, the clamp to an activation's bounds (ReLU, ReLU6, hardtanh), a GELU
or a residual add of the biased rows.

Each builder returns the steps over the C-contiguous [M, N] product: one compiled pass when the policy's tier
has the kernel (edgetorch/runtime/kernels/compiled.py), else NumPy passes doing the same float32 operations
in the same order. The XNNPACK runtime's layers (backends/xnnpack/runtime/epilogues.py) and the portable
runtime's static fusion (runtime/static_fusion.py) both build theirs here. Imports NumPy, never torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import numpy as np

from edgetorch.errors import InvalidArgumentError
from edgetorch.runtime import policy
from edgetorch.runtime.kernels import compiled
from edgetorch.runtime.ops import activation

Step = Callable[[], object]

NO_CLAMP = (-math.inf, math.inf)


def clamp(src: np.ndarray, dst: np.ndarray, lo: float, hi: float) -> list[Step]:
    """Steps that write clamp(src, lo, hi) into ``dst`` (in place when they are one array); none for the
    unbounded clamp in place."""
    if lo == -math.inf and hi == math.inf:
        return [] if src is dst else [partial(np.copyto, dst, src)]
    # np.clip with an infinite bound is faster than np.maximum / np.minimum with a scalar (float32).
    return [partial(np.clip, src, dst.dtype.type(lo), dst.dtype.type(hi), out=dst)]


def add_rows(y2: np.ndarray, row: np.ndarray) -> Step:
    """The step ``y2 += row`` on every row of the C-contiguous [M, C] ``y2``.

    With few channels NumPy's inner loop is short: the row tiled k times added to ``y2`` seen as [M/k, k*C]
    makes it long, with the same additions.
    """
    m, c = y2.shape
    k = max(d for d in range(1, 1 + min(64, max(1, 512 // c))) if m % d == 0)
    wide = y2.reshape(m // k, k * c)
    return partial(np.add, wide, np.tile(row, k), out=wide)


def bias_clamp(y2: np.ndarray, bias: np.ndarray | None, lo: float, hi: float) -> list[Step]:
    """Steps that add ``bias`` (None: no bias) to every row of ``y2`` and clamp it to [lo, hi], in place: for
    float32 on the compiled tier one pass doing both with NumPy's bits (kernels/compiled.py ``bias_clamp``),
    else one NumPy pass for each."""
    if bias is None and (lo, hi) == NO_CLAMP:
        return []
    fused = compiled.kernel("bias_clamp") if y2.dtype == np.float32 else None
    if fused is not None:
        b = np.empty(0, np.float32) if bias is None else bias.reshape(-1)
        return [partial(fused, y2, b, np.float32(lo), np.float32(hi))]
    steps = [] if bias is None else [add_rows(y2, bias.reshape(-1))]
    return steps + clamp(y2, y2, lo, hi)


def bias_gelu(x: np.ndarray, bias: np.ndarray, out: np.ndarray, approximate: str, split: bool = False) -> Step:
    """The step ``out = GELU(x + bias)`` over [M, N] rows (``out`` may be ``x``): one compiled pass when the
    tier is usable and the arrays flat float32 (its rows over the threads with ``split``), else the bias add
    then the op layer's GELU."""
    if policy.compiled_tier() and compiled.flat_float32(x, out, bias):
        return compiled.rows_step("bias_gelu", x, bias, out, approximate == "tanh", split=split)
    gelu = activation.gelu(out, out, approximate, split=split)

    def run() -> None:
        np.add(x, bias, out=out)
        gelu()

    return run


def bias_residual(x: np.ndarray, bias: np.ndarray, residual: np.ndarray, out: np.ndarray, split: bool = False) -> Step:
    """The step ``out = residual + (x + bias)`` over [M, N] rows (``out`` may be ``x`` or ``residual``): one
    compiled pass when the tier is usable, else the same two float32 additions in NumPy."""
    if policy.compiled_tier() and compiled.flat_float32(x, out, bias, residual):
        return compiled.rows_step("bias_add", x, bias, residual, out, split=split)
    if np.shares_memory(residual, out) and residual is not out:
        raise InvalidArgumentError(
            "bias_residual: expected the output to be the residual or apart from it, found them overlapping; "
            "pass the same array to write in place, or a separate output"
        )
    if out is residual:

        def into_residual() -> None:
            np.add(residual, np.add(x, bias), out=residual)

        return into_residual

    def run() -> None:
        np.add(x, bias, out=out)
        np.add(residual, out, out=out)

    return run
