"""The steps a node's output ends with: the bias added to every row and the clamp to the node's output
bounds (XNNPACK's ``output_min_max``), in one compiled pass when the fast tier takes it.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import numpy as np

from edgetorch.backends.xnnpack import fast
from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.runtime.memory import Env, Planner, Step


def clamp_steps(src: np.ndarray, dst: np.ndarray, lo: float, hi: float) -> list:
    """Steps that write clamp(src) into dst; in place when src is dst."""
    if lo == -math.inf and hi == math.inf:
        return [] if src is dst else [partial(np.copyto, dst, src)]
    # np.clip with an infinite bound is faster than np.maximum / np.minimum with a scalar (float32).
    return [partial(np.clip, src, dst.dtype.type(lo), dst.dtype.type(hi), out=dst)]


def min_max(node: xs.XNode) -> tuple[float, float]:
    mm = node.output_min_max
    return (-math.inf, math.inf) if mm is None else (mm.output_min, mm.output_max)


def bias_steps(y2: np.ndarray, env: Env, bias_id: int) -> list:
    if bias_id == xs.INVALID_VALUE_ID:
        return []
    return [_add_to_rows(y2, env[bias_id].reshape(-1))]


NO_CLAMP = (-math.inf, math.inf)


def bias_act_steps(y2: np.ndarray, env: Env, bias_id: int, act: tuple[float, float]) -> list:
    """Steps that add the bias (if any) to every row of ``y2`` and clamp it to ``act``: one compiled pass in
    the fast tier (fast.py; the same float32 results), else a NumPy pass for each."""
    has_bias = bias_id != xs.INVALID_VALUE_ID
    if (has_bias or act != NO_CLAMP) and y2.dtype == np.float32:
        fused = fast.kernel("bias_clamp")
        if fused is not None:
            bias = env[bias_id].reshape(-1) if has_bias else np.empty(0, np.float32)
            return [partial(fused, y2, bias, np.float32(act[0]), np.float32(act[1]))]
    return bias_steps(y2, env, bias_id) + clamp_steps(y2, y2, *act)


def _add_to_rows(y2: np.ndarray, row: np.ndarray) -> Step:
    """The step y2 += row on every row of the C-contiguous [M, C] ``y2``.

    With few channels NumPy's inner loop is short; adding the row tiled k times to y2 seen as [M/k, k*C]
    is faster for 16-32 channels.
    """
    m, c = y2.shape
    k = max(d for d in range(1, 1 + min(64, max(1, 512 // c))) if m % d == 0)
    wide = y2.reshape(m // k, k * c)
    return partial(np.add, wide, np.tile(row, k), out=wide)


def with_activation(n: Any, node: xs.XNode, planner: Planner) -> Planner:
    """``planner`` followed by the clamp of node ``n``'s output to its bounds (a clamp node is its own)."""
    lo, hi = min_max(node)
    if isinstance(n, xs.XNNClamp) or (lo == -math.inf and hi == math.inf):
        return planner

    def plan(env: Env) -> list:
        steps = planner(env)
        y = env[n.output_id]
        return steps + clamp_steps(y, y, lo, hi)

    return plan
