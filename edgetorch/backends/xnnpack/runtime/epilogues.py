"""The steps a node's output ends with: the bias added to every row and the clamp to the node's output
bounds (XNNPACK's ``output_min_max``), in one compiled pass when the fast tier takes it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.runtime.memory import Env, Planner
from edgetorch.runtime.ops import epilogue


def clamp_steps(src: np.ndarray, dst: np.ndarray, lo: float, hi: float) -> list:
    """Steps that write clamp(src) into dst; in place when src is dst (the op layer's, ops/epilogue.py)."""
    return epilogue.clamp(src, dst, lo, hi)


def min_max(node: xs.XNode) -> tuple[float, float]:
    mm = node.output_min_max
    return (-math.inf, math.inf) if mm is None else (mm.output_min, mm.output_max)


def bias_steps(y2: np.ndarray, env: Env, bias_id: int) -> list:
    if bias_id == xs.INVALID_VALUE_ID:
        return []
    return [epilogue.add_rows(y2, env[bias_id].reshape(-1))]


NO_CLAMP = epilogue.NO_CLAMP


def bias_act_steps(y2: np.ndarray, env: Env, bias_id: int, act: tuple[float, float]) -> list:
    """Steps that add the bias (if any) to every row of ``y2`` and clamp it to ``act``: the op layer's
    epilogue (one compiled pass on the compiled tier, the same float32 results)."""
    bias = None if bias_id == xs.INVALID_VALUE_ID else env[bias_id]
    return epilogue.bias_clamp(y2, bias, act[0], act[1])


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
