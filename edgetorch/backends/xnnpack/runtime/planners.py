"""The float planner of each XNNPACK node kind (a planner compiled from a node at load takes the plan's
``Env`` and returns the node's steps), and the kinds whose planner applies the node's clamp itself.
"""

from __future__ import annotations

from collections.abc import Callable

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.runtime import blocks, chains, float_elementwise, float_layers
from edgetorch.backends.xnnpack.runtime.float_elementwise import BINARY
from edgetorch.backends.xnnpack.runtime.memory import Planner

FLOAT_PLANNERS: dict[type, Callable[..., Planner]] = {
    **float_elementwise.PLANNERS,
    **float_layers.PLANNERS,
    **chains.PLANNERS,
    **blocks.PLANNERS,
}
# Their planners take the node's (lo, hi) and clamp the output in their own last pass, with the bias where they can.
APPLY_ACTIVATION = (xs.XNNFullyConnected, xs.XNNConv2d, xs.XNNDepthwiseConv2d, *BINARY)
