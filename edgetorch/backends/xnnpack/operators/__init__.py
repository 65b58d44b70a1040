"""The XNNPACK node visitors, one module per op family; importing this package registers them all in
``node_visitor.VISITORS``."""

from edgetorch.backends.xnnpack.operators import conv, elementwise, matmul, pooling, quant, shape  # noqa: F401
from edgetorch.backends.xnnpack.operators.node_visitor import VISITORS, XnnpackLoweringError, result_node, visits

__all__ = ["VISITORS", "XnnpackLoweringError", "result_node", "visits"]
